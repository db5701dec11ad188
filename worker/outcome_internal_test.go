package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// Only JetStream's "cannot take any write now" answers hold a run's
// message; an error about what was written goes the usual way (a
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
		{"stopping while waiting", fmt.Errorf("%w (while waiting out: %w)", context.Canceled, api(10023)), stopping},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: %v is %s, want %s", tc.name, tc.err, got, tc.want)
		}
	}
}

// A pass's active-time deadline goes on from the run's last event, as the
// fold counts the time since it, unless the run is parked; a run without
// events starts its budget now.
func TestActiveTimeGoesOnFromTheLastEvent(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	limits := events.Limits{MaxActive: events.Duration(time.Minute)}
	for _, tc := range []struct {
		name string
		st   events.RunState
		want time.Time
	}{
		{"a new run", events.RunState{}, now.Add(time.Minute)},
		{"resumed 20 s after its last event, 10 s used", events.RunState{LastSeq: 4, LastTime: now.Add(-20 * time.Second), Active: 10 * time.Second}, now.Add(30 * time.Second)},
		{"parked an hour, 10 s used", events.RunState{LastSeq: 9, LastTime: now.Add(-time.Hour), Active: 10 * time.Second, IsParked: true}, now.Add(50 * time.Second)},
		{"last event stamped ahead of this clock", events.RunState{LastSeq: 4, LastTime: now.Add(time.Second), Active: 10 * time.Second}, now.Add(50 * time.Second)},
	} {
		if got := activeDeadline(&tc.st, limits, now); !got.Equal(tc.want) {
			t.Errorf("%s: deadline %s, want %s", tc.name, got.Sub(now), tc.want.Sub(now))
		}
	}
}

// Each try of a message held through an outage is told how long it has
// been held, so the run it drives is not charged for the wait.
func TestAHeldMessageIsCreditedWithTheWait(t *testing.T) {
	p := &Pool{opts: Config{RetryDelay: 20 * time.Millisecond}, log: slog.New(slog.DiscardHandler), now: time.Now}
	var credits []time.Duration
	o, _ := p.waitOutOutage(t.Context(), "a test's writes", "loopgate.tasks.t", unavailable, "full", func(ctx context.Context) (outcome, string) {
		credits = append(credits, outageCredit(ctx))
		if len(credits) < 3 {
			return unavailable, "full"
		}
		return settled, ""
	})
	if o != settled {
		t.Fatalf("outcome %s, want settled", o)
	}
	// Waits of 20, 40 and 80 ms before the three tries.
	for i, least := range []time.Duration{20 * time.Millisecond, 60 * time.Millisecond, 140 * time.Millisecond} {
		if credits[i] < least {
			t.Errorf("try %d was credited %s, want at least %s", i+1, credits[i], least)
		}
	}
	if c := outageCredit(t.Context()); c != 0 {
		t.Errorf("a context never held carries a credit of %s", c)
	}
}
