package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/journal"
)

// outcome is what becomes of a work message once a worker is done with it.
// Every failure class maps to exactly one outcome here, and nowhere else.
type outcome int

const (
	// settled: the run finished, parked, or was already done. Ack.
	settled outcome = iota
	// rejected: the message can never succeed (a malformed task, already
	// recorded as a rejected event). Term, so it is not redelivered.
	rejected
	// retry: infrastructure trouble or a lost race for the run. Nak with a
	// delay; the next delivery reloads the run's events and continues.
	retry
	// stopping: the worker is shutting down mid-run. Nak with a short
	// delay so another worker continues promptly.
	stopping
)

func (o outcome) String() string {
	if o < 0 || int(o) >= 4 {
		return "again"
	}
	return [...]string{"settled", "rejected", "retry", "stopping"}[o]
}

// classify maps the error a run ended with to an outcome.
func classify(err error) outcome {
	switch {
	case err == nil, errors.Is(err, errParked):
		return settled
	case errors.Is(err, context.Canceled):
		return stopping
	case errors.Is(err, journal.ErrConflict):
		return retry
	default:
		return retry
	}
}

// settle acknowledges msg according to o. Ack errors are returned for
// logging only: redelivery is the safe default.
func settle(msg jetstream.Msg, o outcome, reason string, retryDelay time.Duration) error {
	switch o {
	case settled:
		return msg.Ack()
	case rejected:
		return msg.TermWithReason(reason)
	case stopping:
		return msg.NakWithDelay(time.Second)
	default:
		return msg.NakWithDelay(retryDelay)
	}
}
