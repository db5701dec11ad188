package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/wait"
	"github.com/loopgate/loopgate/journal"
)

// A message that keeps failing is a poison message: retried forever it
// would hold a run hostage and burn workers. After MaxDeliver deliveries
// loopgate stops its run with reason error and the cause, and removes the
// message from the work queue. Two paths lead there: a worker that fails on
// the last delivery gives up itself (giveUp); a worker that dies on it
// cannot, so every pool also listens for JetStream's max-deliveries
// advisory (watchMaxDeliveries).

// lastDelivery reports whether msg will not be redelivered after this one.
func (p *Pool) lastDelivery(msg jetstream.Msg) bool {
	meta, err := msg.Metadata()
	return err == nil && p.maxDeliver > 0 && meta.NumDelivered >= uint64(p.maxDeliver)
}

// giveUp stops the run of msg with reason error, because its last delivery
// failed too. It returns how to settle msg: rejected (terminated) once the
// stop is recorded, and as failedOn says when it could not be. A message
// nakked on its last delivery is not delivered again; the max-deliveries
// advisory deals with it (deadLetter).
func (p *Pool) giveUp(ctx context.Context, msg jetstream.Msg, cause string) (o outcome, reason string) {
	defer func() {
		// The bug that failed every delivery may be met again recording
		// the stop: the message is handed back (the advisory's handler
		// tries once more), the worker goes on.
		if v := recover(); v != nil {
			p.log.ErrorContext(ctx, "stopping a poisoned run panicked", "subject", msg.Subject(), "panic", v)
			o, reason = retry, fmt.Sprintf("%s; stopping its run panicked: %v", cause, v)
		}
	}()
	meta, err := msg.Metadata()
	if err != nil {
		return retry, cause
	}
	detail := fmt.Sprintf("the work message failed on all %d deliveries; last cause: %s", meta.NumDelivered, cause)
	if err := p.stopPoisoned(ctx, msg.Subject(), msg.Data(), meta.Sequence.Stream, detail, failedEach); err != nil {
		p.log.ErrorContext(ctx, "could not stop a poisoned run", "subject", msg.Subject(), "err", err)
		if o, reason := failedOn(err); o != retry {
			return o, reason
		}
		return retry, cause
	}
	return rejected, cause
}

// maxDeliveriesAdvisory is what JetStream publishes when a message exhausts
// MaxDeliver.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// watchMaxDeliveries subscribes every pool to the max-deliveries
// advisories of the worker and approvals consumers. Every pool acts on
// them; conditional appends let one of them record what happened.
func (p *Pool) watchMaxDeliveries(ctx context.Context) (interface{ Unsubscribe() error }, error) {
	watch := func(stream, consumer string, act func(context.Context, maxDeliveriesAdvisory)) (*nats.Subscription, error) {
		subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
		sub, err := p.js.Conn().Subscribe(subject, func(m *nats.Msg) {
			// The server's advisories carry no reply subject and name our
			// stream and consumer; anything else on the subject (a client
			// that may create push consumers can aim one here) is ignored.
			var a maxDeliveriesAdvisory
			if m.Reply != "" {
				return
			}
			if err := json.Unmarshal(m.Data, &a); err != nil || a.StreamSeq == 0 || a.Stream != stream || a.Consumer != consumer {
				p.log.WarnContext(ctx, "unreadable max-deliveries advisory", "err", err)
				return
			}
			defer func() {
				// A bug met recording the stop would otherwise end
				// the process, every pool's at once: each gets the
				// advisory.
				if v := recover(); v != nil {
					p.log.ErrorContext(ctx, "max-deliveries advisory handling panicked; the message stays in its stream",
						"stream", a.Stream, "stream_seq", a.StreamSeq, "panic", v)
				}
			}()
			act(ctx, a)
		})
		if err != nil {
			return nil, fmt.Errorf("worker: subscribe to max-deliveries advisories of %s: %w", consumer, err)
		}
		return sub, nil
	}
	work, err := watch(journal.StreamWork, journal.ConsumerWorkers, p.deadLetter)
	if err != nil {
		return nil, err
	}
	approvalsSub, err := watch(journal.StreamApprovals, journal.ConsumerApprovals, p.decideDeadLetter)
	if err != nil {
		_ = work.Unsubscribe()
		return nil, err
	}
	return unsubscribers{work, approvalsSub}, nil
}

// unsubscribers unsubscribes several subscriptions as one.
type unsubscribers []*nats.Subscription

func (u unsubscribers) Unsubscribe() error {
	var errs []error
	for _, s := range u {
		errs = append(errs, s.Unsubscribe())
	}
	return errors.Join(errs...)
}

// decideDeadLetter gives an approval message that exhausted its
// deliveries with no worker settling it (its handler's process died each
// time, say) one more decision, read back from the stream; what that
// cannot decide is recorded as undecided. Without it the message would
// stay in the stream, its run saying nothing of it.
//
// The advisory comes once, so what JetStream cannot do now (read the
// message, store the decision) is waited out, as deadLetter waits out the
// stop of a work message: recorded undecided for an outage, an approval
// that was sound would have to be sent again, and one the outage kept
// from being recorded at all would be lost in silence.
func (p *Pool) decideDeadLetter(ctx context.Context, a maxDeliveriesAdvisory) {
	where := fmt.Sprintf("%s seq %d", journal.StreamApprovals, a.StreamSeq)
	var raw *jetstream.RawStreamMsg
	read := func() (outcome, string) {
		var err error
		if raw, err = p.approvalMsgs.GetMsg(ctx, a.StreamSeq); err != nil {
			o, reason := failedOn(err)
			if o == retry {
				p.log.WarnContext(ctx, "dead-letter: read approval message", "stream_seq", a.StreamSeq, "err", err)
			}
			return o, reason
		}
		return settled, ""
	}
	o, reason := read()
	if o, _ = p.waitOutOutage(ctx, "an approval message out of deliveries", where, o, reason, read); o != settled {
		return
	}
	msg := approvalMsg{subject: raw.Subject, data: raw.Data, seq: raw.Sequence, received: raw.Time, deliveries: a.Deliveries}
	p.log.WarnContext(ctx, "approval message ran out of deliveries; deciding it once more", "subject", raw.Subject, "approval_seq", raw.Sequence, "deliveries", a.Deliveries)
	decide := func() (outcome, string) { return p.decideSafely(ctx, msg) }
	o, reason = decide()
	if o, _ = p.waitOutOutage(ctx, "the decision of an approval message out of deliveries", raw.Subject, o, reason, decide); o != retry {
		return
	}
	undecided := func() (outcome, string) { return p.undecided(ctx, msg) } // a panic in it is the advisory callback's to catch
	o, reason = undecided()
	p.waitOutOutage(ctx, "an approval message out of deliveries as undecided", raw.Subject, o, reason, undecided)
}

// deadLetter stops the run of a message that exhausted its deliveries
// without any worker settling it, and removes the message. The advisory is
// core NATS and comes once, so what JetStream cannot do now (it does not
// answer, or cannot store the stop) is tried again, as a run's writes are,
// until it can or the pool ends: given up, the message would stay in the
// stream past MaxDeliver, nothing would deliver it again, and its run
// would look running for ever.
func (p *Pool) deadLetter(ctx context.Context, a maxDeliveriesAdvisory) {
	detail := fmt.Sprintf("no worker settled the work message in %d deliveries (a worker crashed or hung on it each time)", a.Deliveries)
	try := func() (outcome, string) {
		err := p.bury(ctx, a.StreamSeq, detail)
		if err == nil {
			return settled, ""
		}
		o, reason := failedOn(err)
		if o == retry { // an outage is logged by the wait for its end
			p.log.ErrorContext(ctx, "dead-letter: stop run", "stream_seq", a.StreamSeq, "err", err)
		}
		return o, reason
	}
	o, reason := try()
	p.waitOutOutage(ctx, "a work message out of deliveries", fmt.Sprintf("%s seq %d", journal.StreamWork, a.StreamSeq), o, reason, try)
}

// strandedSweepEvery is how often a pool looks for work messages out of
// deliveries that no advisory told any pool of (sweepStranded), and
// strandedRecheck how long a message found must stay before it is buried.
const (
	strandedSweepEvery = time.Minute
	strandedRecheck    = 10 * time.Second
)

// sweepStranded dead-letters, when the pool starts and then every
// strandedSweepEvery until ctx ends, the work messages that ran out of
// deliveries while no pool listened. The max-deliveries advisory is core
// NATS, sent once, when the last delivery's ack deadline passes: a single
// process killed on a message's last delivery and started again after
// that deadline, or one stopping (Stop unsubscribes from the advisories
// first), is told of it by nobody. JetStream never delivers such a message
// again and keeps it in the work queue, and its run would look running
// for ever with nothing to drive it. Such a message is one the work
// stream still holds that the consumer is done with (strandedSeqs): what
// is acknowledged or terminated is removed from a work queue.
func (p *Pool) sweepStranded(ctx context.Context, cons jetstream.Consumer) {
	for {
		p.buryStranded(ctx, cons)
		if wait.For(ctx, strandedSweepEvery) != nil {
			return
		}
	}
}

// buryStranded dead-letters the messages strandedSeqs finds, if they are
// still there strandedRecheck later: on a cluster, an acknowledged
// message's removal is a write of the stream's own, which can come a
// moment after the consumer's ack floor passed it.
func (p *Pool) buryStranded(ctx context.Context, cons jetstream.Consumer) {
	first, err := p.strandedSeqs(ctx, cons)
	if err != nil || len(first) == 0 {
		if err != nil && ctx.Err() == nil {
			p.log.DebugContext(ctx, "look for work messages out of deliveries", "err", err)
		}
		return
	}
	if wait.For(ctx, strandedRecheck) != nil {
		return
	}
	again, err := p.strandedSeqs(ctx, cons)
	if err != nil {
		return
	}
	for _, seq := range again {
		if !slices.Contains(first, seq) || ctx.Err() != nil {
			continue
		}
		p.log.WarnContext(ctx, "dead-letter: work message out of deliveries that no pool was told of; stopping its run", "stream_seq", seq)
		p.deadLetter(ctx, maxDeliveriesAdvisory{Stream: journal.StreamWork, Consumer: journal.ConsumerWorkers, StreamSeq: seq, Deliveries: uint64(p.maxDeliver)})
	}
}

// strandedSeqs returns the stream sequences of the work messages (tasks
// and wake-ups, not the schedules the stream also holds) that the workers
// consumer is done with: at or below its ack floor, or, when it has no
// message in flight at all, delivered. (JetStream does not move the ack
// floor past a message given up until a later acknowledgement does: a
// quiet queue would keep it below for ever.)
func (p *Pool) strandedSeqs(ctx context.Context, cons jetstream.Consumer) ([]uint64, error) {
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	floor := info.AckFloor.Stream
	if info.NumAckPending == 0 {
		floor = max(floor, info.Delivered.Stream)
	}
	if floor == 0 {
		return nil, nil
	}
	stream, err := p.js.Stream(ctx, journal.StreamWork)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, filter := range []string{events.TasksPrefix + ".*", events.ResumePrefix + ".*.*"} {
		for seq := uint64(1); seq <= floor; {
			m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return nil, err
			}
			if m.Sequence > floor {
				break
			}
			seqs = append(seqs, m.Sequence)
			seq = m.Sequence + 1
		}
	}
	return seqs, nil
}

// bury stops the run of the work message at stream seq, out of
// deliveries, and removes the message once the stop is recorded. A message
// no longer there was buried by another pool.
func (p *Pool) bury(ctx context.Context, seq uint64, detail string) error {
	stream, err := p.js.Stream(ctx, journal.StreamWork)
	if err != nil {
		return fmt.Errorf("work stream: %w", err)
	}
	raw, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read message: %w", err)
	}
	if err := p.stopPoisoned(ctx, raw.Subject, raw.Data, seq, detail, unsettled); err != nil {
		return err
	}
	if err := stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		p.log.WarnContext(ctx, "dead-letter: remove message", "stream_seq", seq, "err", err)
	}
	return nil
}

// poisoning says how a work message came to be stopped for: its worker
// saw it fail on its last delivery, or it ran out of deliveries with no
// worker settling it (the max-deliveries advisory, the stranded sweep).
type poisoning int

const (
	failedEach poisoning = iota
	unsettled
)

// stopPoisoned records the end of the run a work message belongs to:
// finished with reason error for a started run, rejected for a task that
// never started. A run already finished is left alone, and so, for a
// message that ran out unsettled, is a run idle on a question
// (idleOnAQuestion). It returns nil only when the run's end is recorded,
// by this call or before it, or needs none: the message may then go.
func (p *Pool) stopPoisoned(ctx context.Context, subject string, data []byte, streamSeq uint64, detail string, how poisoning) error {
	kind, tenant, runID, err := events.ParseWorkSubject(subject)
	if err != nil {
		return nil // unroutable: nothing to record against
	}
	if kind == "tasks" {
		id := firstTaskID(data)
		if id == "" {
			return nil
		}
		runID = events.RunID(tenant, id)
	}
	_, st, last, err := p.readRun(ctx, tenant, runID)
	if err != nil {
		return err
	}
	if st.Finished != nil || st.Rejection != nil {
		return nil
	}
	if how == unsettled {
		switch idle, err := p.idleOnAQuestion(ctx, st); {
		case err != nil:
			return err
		case idle:
			p.log.WarnContext(ctx, "work message out of deliveries for a run parked on a question: removing it; the run waits on", "run_id", runID, "stream_seq", streamSeq, "detail", detail)
			return nil
		}
	}
	p.log.ErrorContext(ctx, "poison message: stopping its run", "run_id", runID, "stream_seq", streamSeq, "detail", detail)
	switch {
	case st.Started == nil:
		_, err := p.recordRejection(ctx, tenant, streamSeq, &events.RejectedData{
			Reason: detail, TaskID: firstTaskID(data), Subject: subject, PayloadExcerpt: excerpt(data),
		})
		if errors.Is(err, journal.ErrConflict) {
			return nil // the run has a trail now: another pool's rejection, or another copy's start
		}
		return p.poisonStopped(err) // nil only once the rejection is stored: the message may go
	}
	err = p.ender(st, last).finish(ctx, stop{events.ReasonError, detail}, nil)
	if errors.Is(err, journal.ErrConflict) {
		return nil // someone else recorded an end, or the run moved on
	}
	return p.poisonStopped(err)
}

// idleOnAQuestion reports whether a run is parked with nothing for a work
// message to do: every question it awaits is still undecided in its entry
// and not yet expired, so a delivery would only find it parked and let go
// (run.wait). A message of such a run that ran out of deliveries with no
// worker saying it failed most likely did its work and lost its
// acknowledgement (to a failover, or its worker dying just after
// parking): stopping the run for it would end a healthy run that waits
// for a human. The run is woken by the answer, or at its expiry by the
// wake-up its park scheduled. (A worker that saw the message fail, such
// as a wake-up of a run whose profile was removed, still stops the run.)
func (p *Pool) idleOnAQuestion(ctx context.Context, st *events.RunState) (bool, error) {
	if st.Started == nil || !st.IsParked || !st.Parked() {
		return false, nil
	}
	for _, c := range st.CurrentCalls {
		if !c.Awaiting() {
			continue
		}
		if !p.now().Before(c.Request.ExpiresAt) {
			return false, nil // the wake-up's work: expire it
		}
		e, _, err := p.approvals.Get(ctx, st.RunID, c.Call.ID)
		switch {
		case errors.Is(err, approvals.ErrNotFound):
		case err != nil:
			return false, err
		case !e.Pending() && e.Round == c.Request.Round:
			return false, nil // decided, not recorded: the wake-up's work
		}
	}
	return true, nil
}

func firstTaskID(data []byte) string {
	var probe struct {
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal(data, &probe)
	if validTaskID(probe.TaskID) {
		return probe.TaskID
	}
	return ""
}
