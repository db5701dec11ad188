package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/journal"
)

// Only JetStream's "cannot take any write now" answers, and its silence,
// hold a run's message; an error about what was written goes the usual way (a
// redelivery, and the poison-message stop if it never succeeds).
func TestOnlyAnOutageOfJetStreamHoldsTheMessage(t *testing.T) {
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("append executed event 5: %w", &jetstream.APIError{Code: 503, ErrorCode: code, Description: "test"})
	}
	for _, tc := range []struct {
		name string
		err  error
		want outcome
	}{
		{"account limits", api(10002), unavailable},
		{"cluster unavailable", api(10008), unavailable},
		{"server store full", api(10023), unavailable},
		{"memory full", api(10028), unavailable},
		{"storage full", api(10047), unavailable},
		{"last sequence not ready", api(10163), unavailable},
		{"message too large", api(jetstream.JSErrCodeStreamMessageExceedsMaximum), retry},
		{"stream not found", api(jetstream.JSErrCodeStreamNotFound), retry},
		{"a lost race", &journal.ConflictError{Err: api(jetstream.JSErrCodeStreamWrongLastSequence)}, retry},
		{"not an API error", errors.New("boom"), retry},
		{"no answer in time", fmt.Errorf("journal: append executed event 5: %w", context.DeadlineExceeded), unavailable},
		{"no answer from the stream", fmt.Errorf("create approval: %w", jetstream.ErrNoStreamResponse), unavailable},
		{"nobody to answer", fmt.Errorf("get entry: %w", nats.ErrNoResponders), unavailable},
		{"a request timeout", fmt.Errorf("put: %w", nats.ErrTimeout), unavailable},
		{"stopping while waiting", fmt.Errorf("%w (while waiting out: %w)", context.Canceled, api(10023)), stopping},
		{"stopping while reading", fmt.Errorf("journal: load run: %w", context.Canceled), stopping},
		{"an append still in process", fmt.Errorf("journal: append started event 1: %w: %w", journal.ErrInProcess, api(10158)), unavailable},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: %v is %s, want %s", tc.name, tc.err, got, tc.want)
		}
		// A read or write that failed outside a run's steps (loading
		// the run, an approval's decision) is judged the same way.
		if got, _ := failedOn(tc.err); got != tc.want {
			t.Errorf("%s: failedOn(%v) is %s, want %s", tc.name, tc.err, got, tc.want)
		}
	}
}

// The time a write waited out an outage, which the run is not charged for,
// includes its failed tries: a try JetStream does not answer takes the
// whole request timeout, and a disk-full outage of minutes is mostly such
// tries. A first try that succeeds waited nothing.
func TestAnOutageWaitCountsTheFailedTries(t *testing.T) {
	p := &Pool{opts: Config{RetryDelay: 10 * time.Millisecond}}
	log := slog.New(slog.DiscardHandler)
	tries := 0
	waited, err := p.patiently(t.Context(), log, "a test's events", func() error {
		if tries++; tries <= 2 {
			time.Sleep(50 * time.Millisecond) // the request timeout
			return fmt.Errorf("append: %w", context.DeadlineExceeded)
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("%d tries, err %v; want 3 and nil", tries, err)
	}
	if least := 2*50*time.Millisecond + 10*time.Millisecond + 20*time.Millisecond; waited < least {
		t.Errorf("waited %s, want at least %s: two 50 ms tries and two delays", waited, least)
	}
	waited, err = p.patiently(t.Context(), log, "a test's events", func() error { return nil })
	if err != nil || waited > 5*time.Millisecond {
		t.Errorf("a first try that succeeds: waited %s, err %v; want nothing", waited, err)
	}
}
