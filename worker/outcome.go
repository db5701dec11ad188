package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
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
	// unavailable: JetStream cannot take writes at all for now (its store
	// is full, its cluster is electing). That is no fault of the run: the
	// worker keeps the message and tries again, spending none of its
	// deliveries, which are what stop a poison message.
	unavailable
)

func (o outcome) String() string {
	switch {
	case o == handedOver:
		return "handed_over"
	case o < 0 || int(o) >= 5:
		return "again"
	}
	return [...]string{"settled", "rejected", "retry", "stopping", "unavailable"}[o]
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
	case outage(err):
		return unavailable
	default:
		return retry
	}
}

// failedOn is the outcome of a message whose run (or approval entry) could
// not be read or written: held while JetStream cannot take writes or does
// not answer (see outage), handed back otherwise. A work message handed
// back for a read that timed out while the cluster elected a leader spent
// a delivery on it: one that had lost four to worker kills was stopped as
// a poison message.
//
// Cancelled (the pool stopping) is stopping, handed over for another
// worker: a retry spent a delivery on the shutdown, and on the last one
// gave the message up with a cancelled context (an approval's decision
// dropped).
func failedOn(err error) (outcome, string) {
	switch {
	case errors.Is(err, context.Canceled):
		return stopping, ""
	case outage(err):
		return unavailable, err.Error()
	}
	return retry, ""
}

// outage reports whether err says JetStream cannot take writes now: it
// says so (StoreUnavailable), or it does not answer (noAnswer). Either
// lasts as long as JetStream's trouble, whatever the run does, so a message
// is held through it rather than spent on it.
//
// An append still in process after its quick tries (journal.ErrInProcess)
// is held the same way: its outcome is the stream's to decide, shortly.
func outage(err error) bool {
	return StoreUnavailable(err) || noAnswer(err) || errors.Is(err, journal.ErrInProcess)
}

// noAnswer reports whether err is a JetStream request that got no answer:
// no reply in time, or nobody to reply. A single server whose disk filled
// up stops answering publishes to the stream it could not write, until it
// is restarted; a cluster between leaders and a connection being made
// again do the same for seconds. The write may have been stored: every
// write a held message tries again is safe to try again (an event's
// Nats-Msg-Id and expected last sequence; compare-and-set KV writes, and a
// run taken up again from its events).
func noAnswer(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// StoreUnavailable reports whether err is JetStream's answer that it
// cannot take a write now, whatever the write: resource limits reached (a
// full store: server, account or memory), no cluster to answer, or a
// stream leader not ready to check a run's last sequence. Such an outage
// lasts until JetStream recovers or an operator makes room; the errors
// that depend on what was written (a conflict, a size limit) are not here.
func StoreUnavailable(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10002, // resource limits exceeded for account
		10008, // JetStream system temporarily unavailable
		10023, // insufficient resources (the server's max_file_store or max_mem_store)
		10028, // insufficient memory resources available
		10047, // insufficient storage resources available
		10163: // expected last sequence per subject temporarily unavailable
		return true
	}
	return false
}

// maxOutageDelay caps the wait between tries while JetStream cannot take
// writes: a run goes on at most this long after the outage ends (sooner
// when another held run gets through first: recovery), and a long outage
// logs once per this per run held.
const maxOutageDelay = 10 * time.Second

// patiently runs write until JetStream takes it or answers anything but an
// outage, waiting between tries (from the pool's RetryDelay,
// doubling up to maxOutageDelay) for as long as the outage lasts or ctx
// allows, and returns how long it waited: from the first try to the last,
// the failed tries included (a try JetStream does not answer takes the
// request timeout). what names the write for the log.
func (p *Pool) patiently(ctx context.Context, log *slog.Logger, what string, write func() error) (waited time.Duration, err error) {
	delay := p.opts.RetryDelay
	first := time.Now()
	h := hold{p: p}
	defer h.end()
	for try := 1; ; try++ {
		if try > 1 {
			h.retry()
		}
		err := write()
		if !outage(err) {
			if try > 1 {
				p.recovery.tell() // JetStream answers again
			}
			return waited, err
		}
		h.failed()
		log.WarnContext(ctx, "JetStream cannot store "+what+"; trying again", "try", try, "in", delay, "err", err)
		werr := p.waitOutage(ctx, delay)
		waited = time.Since(first)
		if werr != nil {
			return waited, fmt.Errorf("%w (while waiting out: %w)", werr, err)
		}
		delay = min(2*delay, maxOutageDelay)
	}
}

// waitOutOutage runs try again while the outcome is unavailable (JetStream
// cannot take writes at all), waiting from the pool's RetryDelay, doubling
// up to maxOutageDelay, and returns the first other outcome, or stopping
// when ctx ends first. The caller keeps the message (subject) leased
// meanwhile; what names what could not be stored or read, for the log
// (the cause says which).
func (p *Pool) waitOutOutage(ctx context.Context, what, subject string, o outcome, reason string, try func() (outcome, string)) (outcome, string) {
	h := hold{p: p}
	defer h.end()
	for delay := p.opts.RetryDelay; o == unavailable; delay = min(2*delay, maxOutageDelay) {
		h.failed()
		p.log.WarnContext(ctx, "JetStream cannot store or read "+what+"; keeping its message and trying again",
			"subject", subject, "in", delay, "cause", reason)
		if p.waitOutage(ctx, delay) != nil {
			return stopping, reason
		}
		h.retry()
		if o, reason = try(); o != unavailable {
			p.recovery.tell() // JetStream answers again
		}
	}
	return o, reason
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
