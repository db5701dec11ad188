package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestJetStreamBusyTellsWaitingFromFailing(t *testing.T) {
	busy := []error{
		fmt.Errorf("journal: ensure stream LOOPGATE_WORK: %w", context.DeadlineExceeded),
		nats.ErrTimeout,
		nats.ErrNoResponders,
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
	}
	for _, err := range busy {
		if !jetStreamBusy(err) {
			t.Errorf("jetStreamBusy(%v) = false, want true: waiting may help", err)
		}
	}
	failing := []error{
		jetstream.ErrJetStreamNotEnabled,
		&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabledForAccount},
		&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"},
		errors.New("nats: permissions violation"),
	}
	for _, err := range failing {
		if jetStreamBusy(err) {
			t.Errorf("jetStreamBusy(%v) = true, want false: waiting will not help", err)
		}
	}
}

func TestUntilJetStreamAnswersRetriesOnlyWhatWaitingCanFix(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	calls := 0
	err := untilJetStreamAnswers(t.Context(), log, "test", func(context.Context) error {
		if calls++; calls < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("two timeouts, then success: err %v after %d calls, want nil after 3", err, calls)
	}

	calls = 0
	permanent := errors.New("stream name already in use with a different configuration")
	err = untilJetStreamAnswers(t.Context(), log, "test", func(context.Context) error { calls++; return permanent })
	if !errors.Is(err, permanent) || calls != 1 {
		t.Errorf("a permanent error: err %v after %d calls, want it after 1", err, calls)
	}

	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	err = untilJetStreamAnswers(ctx, log, "test", func(context.Context) error { calls++; cancel(); return nats.ErrTimeout })
	if !errors.Is(err, nats.ErrTimeout) || calls != 1 {
		t.Errorf("cancelled while waiting: err %v after %d calls, want the timeout after 1", err, calls)
	}
}
