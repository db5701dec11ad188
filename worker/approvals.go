package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaptinlin/jsonschema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/wait"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/schemas"
)

// maxApprovalBytes bounds an approval message: above the largest that
// schemas/approval.schema.json admits, a reason of 2048 characters each
// written as a \uXXXX surrogate pair (12 bytes; Python's json.dumps writes
// non-ASCII so) with every other member at its longest. At 16 KiB such a
// message, valid by the published schema, was refused as not matching it.
const maxApprovalBytes = 32 << 10

// consumeApprovals decides approval messages in lanes, one goroutine per
// lane and one lane per run (by a hash of the run id): the decisions of one
// run stay in the order the stream holds them, those of different runs go
// on at once. A decision is a few sequential KV and stream round trips; one
// at a time, a process decided about 12-15 a second on a cluster, and a
// burst of questions queued behind each other for seconds (make soak).
//
// The dispatcher never waits for a lane: each lane's queue takes whatever
// comes (the consumer's MaxAckPending bounds them all), so a slow decision
// holds up only the messages queued behind it in its own lane. With queues
// of 8, a burst of 9 messages for one run whose decision was slow stopped
// every other lane until it was done (TestABurstForOneRunDoesNotHoldUpOtherRuns).
// Messages waiting in a queue are kept alive (InProgress) as a run's are,
// so AckWait does not hand them to another pool while they wait their
// turn; but not behind a decision that has taken longer than ackWait (a
// lane stuck on it): those are left to come back after AckWait, to be
// decided elsewhere or, once out of deliveries, from the advisory.
//
// taking ends when the pool stops taking messages (Stop), ctx when its
// runs are cancelled.
func (p *Pool) consumeApprovals(ctx, taking context.Context, feed *approvalFeed, cc jetstream.ConsumeContext, ackWait time.Duration) {
	var stuckAfter atomic.Int64 // the consumer's AckWait, which a consumer made again may change
	stuckAfter.Store(int64(ackWait))
	var wg sync.WaitGroup
	for _, l := range feed.queues {
		wg.Go(func() {
			for msg, ok := l.next(p.now); ok; msg, ok = l.next(p.now) {
				p.handleApproval(ctx, msg)
			}
		})
	}
	beating, stopBeating := context.WithCancel(ctx)
	wg.Go(func() {
		t := time.NewTicker(p.opts.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-beating.Done():
				return
			case <-t.C:
				for _, l := range feed.queues {
					l.beat(p.now(), time.Duration(stuckAfter.Load()))
				}
			}
		}
	})
	defer func() {
		stopBeating()
		for _, l := range feed.queues {
			l.close()
		}
		wg.Wait()
	}()
	for {
		// Consuming ends when Stop drained it, or the server ended it for
		// good (the consumer was deleted, a pull was refused as a bad
		// request: the error handler said which). Only the first is an
		// end: otherwise the process would go on taking work and decide
		// no approval again, and say nothing of it.
		select {
		case <-cc.Closed():
		case <-ctx.Done(): // Stop gave up waiting (a drain that never ends)
			cc.Stop()
			return
		}
		var aw time.Duration
		if cc, aw = p.reopenApprovals(taking, feed); cc == nil {
			return
		}
		if aw > 0 {
			stuckAfter.Store(int64(aw))
		}
	}
}

// approvalFeed is where the approvals consumer delivers: the lanes of
// consumeApprovals, which exist before consuming starts. Messages come
// through a handler (jetstream's Consume), not an iterator (Messages): an
// iterator's messages wait in a channel as deep as its batch, with the
// pull's heartbeats, and a burst of more (a process thawed after a stop,
// a connection moved to another server) was dropped as a slow consumer,
// approval messages among them, each back only after AckWait with a
// delivery spent (make soak's freeze test: 13 drops of 7 to 34 messages
// on one subscription). A handler's messages wait in the client's pending
// list, bounded by the subscription's pending limits.
type approvalFeed struct {
	ctx     context.Context // for the trouble log
	queues  []*lane
	trouble *troubleLog
	crash   func(string)
}

func (p *Pool) newApprovalFeed(ctx context.Context, lanes int) *approvalFeed {
	f := &approvalFeed{ctx: ctx, queues: make([]*lane, lanes), trouble: newTroubleLog("fetch approvals", p.log, p.now), crash: p.crash}
	for i := range f.queues {
		f.queues[i] = newLane()
	}
	return f
}

// deliver queues an approval message in its run's lane; it never waits
// for the lane.
func (f *approvalFeed) deliver(msg jetstream.Msg) {
	f.crash("deliver:approval")
	f.trouble.ok(f.ctx)
	f.queues[laneOf(msg.Subject(), len(f.queues))].push(msg)
}

// failed logs a pull's trouble now and then: the consumer pulls again by
// itself (a missed heartbeat every 2s through an outage).
func (f *approvalFeed) failed(_ jetstream.ConsumeContext, err error) {
	f.trouble.failed(f.ctx, err)
}

// openApprovals starts consuming the approvals consumer's messages into
// feed, and says the consumer's AckWait.
func (p *Pool) openApprovals(ctx context.Context, feed *approvalFeed) (jetstream.ConsumeContext, time.Duration, error) {
	cons, err := p.js.Consumer(ctx, journal.StreamApprovals, journal.ConsumerApprovals)
	if err != nil {
		return nil, 0, fmt.Errorf("worker: consumer %s on %s: %w", journal.ConsumerApprovals, journal.StreamApprovals, err)
	}
	cc, err := cons.Consume(feed.deliver, jetstream.PullMaxMessages(p.opts.Workers), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(feed.failed))
	if err != nil {
		return nil, 0, fmt.Errorf("worker: consume %s: %w", journal.StreamApprovals, err)
	}
	return cc, cons.CachedInfo().Config.AckWait, nil
}

// reopenApprovals starts consuming again after the server ended it, and
// makes it the one Stop drains. It waits RetryDelay before each try, the
// first too: a server that refuses every pull (a bad request) ends each
// at once, and starting again at once would loop hot. The trouble is over
// when a message comes, not when the consumer answers. It returns nil once
// taking is done (the pool stops) or the connection is closed, and the
// consumer's AckWait.
func (p *Pool) reopenApprovals(taking context.Context, feed *approvalFeed) (jetstream.ConsumeContext, time.Duration) {
	for wait.For(taking, p.opts.RetryDelay) == nil {
		cc, ackWait, err := p.openApprovals(taking, feed)
		switch {
		case err == nil:
			p.mu.Lock()
			if p.stopped {
				p.mu.Unlock()
				cc.Stop()
				return nil, 0
			}
			p.approvalIter = cc
			p.mu.Unlock()
			return cc, ackWait
		case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed):
			return nil, 0
		}
		feed.trouble.failed(taking, err)
	}
	return nil, 0
}

// lane is the queue of one approvals lane: messages delivered and waiting
// for the lane's goroutine, in the order they came.
type lane struct {
	mu      sync.Mutex
	waiting []jetstream.Msg
	closed  bool
	current jetstream.Msg // the message the lane's goroutine decides now; nil while it waits
	began   time.Time     // when it took current
	ready   chan struct{} // holds a token while something waits
}

func newLane() *lane { return &lane{ready: make(chan struct{}, 1)} }

func (l *lane) push(msg jetstream.Msg) {
	l.mu.Lock()
	l.waiting = append(l.waiting, msg)
	l.mu.Unlock()
	l.signal()
}

func (l *lane) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// next waits for the lane's next message, taken at now(); false once the
// lane is closed and what it held was taken.
func (l *lane) next(now func() time.Time) (jetstream.Msg, bool) {
	for {
		l.mu.Lock()
		if len(l.waiting) > 0 {
			msg := l.waiting[0]
			l.waiting[0] = nil
			l.waiting = l.waiting[1:]
			l.current, l.began = msg, now()
			l.mu.Unlock()
			return msg, true
		}
		l.current, l.began = nil, time.Time{}
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, false
		}
		<-l.ready
	}
}

// close lets the lane's goroutine end once it has taken what waits.
func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.signal()
}

// beat tells JetStream the messages of the lane are being worked on, the
// one being decided and those waiting, unless the current decision began
// stuckAfter or more ago. The one being decided, too: a decision slower
// than two thirds of AckWait (a loaded cluster, a short --ack-wait) had
// its message delivered to another pool while it was still deciding it.
func (l *lane) beat(now time.Time, stuckAfter time.Duration) {
	l.mu.Lock()
	if l.current != nil && now.Sub(l.began) >= stuckAfter {
		l.mu.Unlock()
		return
	}
	msgs := slices.Clone(l.waiting)
	if l.current != nil {
		msgs = append(msgs, l.current)
	}
	l.mu.Unlock()
	for _, msg := range msgs {
		_ = msg.InProgress()
	}
}

// laneOf picks the lane of an approval by its run (the subject's fourth
// token); a malformed subject goes to lane 0, where it is rejected.
func laneOf(subject string, lanes int) int {
	parts := strings.SplitN(subject, ".", 5)
	if len(parts) < 4 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(parts[3]))
	return int(h.Sum32() % uint32(lanes))
}

// approvalMsg is what deciding an approval message needs of it: the
// message as delivered, or as read back from the stream after it ran out
// of deliveries.
type approvalMsg struct {
	subject    string
	data       []byte
	seq        uint64    // its sequence in LOOPGATE_APPROVALS
	received   time.Time // when the stream stored it
	deliveries uint64
	// lease is the message as delivered, which its decision may hand over
	// to the run it woke (continueRun); nil when read back from the stream.
	lease jetstream.Msg
}

func (p *Pool) handleApproval(ctx context.Context, msg jetstream.Msg) {
	if p.stopping() {
		_ = msg.NakWithDelay(time.Second)
		return
	}
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.NakWithDelay(p.opts.RetryDelay)
		return
	}
	am := approvalMsg{subject: msg.Subject(), data: msg.Data(), seq: meta.Sequence.Stream, received: meta.Timestamp, deliveries: meta.NumDelivered, lease: msg}
	// A decision can end its run (expired, or the finished record written
	// again for a run whose finisher died): the message is acknowledged
	// once the projection has the run's record, as a work message is.
	ctx, waits := withProjectionWaits(ctx)
	// JetStream cannot take the decision's writes: hold the message
	// (heartbeat and all) rather than spend its deliveries on the outage
	// and record it undecided, as handle does for a run.
	decide := func() (outcome, string) { return p.decideSafely(ctx, am) }
	o, reason := decide()
	o, reason = p.holdThroughOutage(ctx, msg, "an approval's decision", o, reason, decide)
	if o == handedOver {
		return // its run goes on here, and settles it (continueRun)
	}
	if o == retry && p.lastDelivery(msg) {
		// The message will not come back: its record in the run is the
		// last thing it can leave, so it is held through an outage too.
		undecided := func() (outcome, string) { return p.undecidedSafely(ctx, am) }
		o, reason = undecided()
		o, reason = p.holdThroughOutage(ctx, msg, "an approval message out of deliveries as undecided", o, reason, undecided)
	}
	if o == settled && !waits.none() {
		p.ackAfterProjection(ctx, msg, waits)
		return
	}
	if err := settle(msg, o, reason, p.opts.RetryDelay); err != nil {
		p.log.WarnContext(ctx, "settle approval message", "subject", msg.Subject(), "err", err)
	}
}

// holdThroughOutage is waitOutOutage for a message this pool holds: its
// lease is kept by heartbeats while it waits, so that JetStream neither
// delivers it to another worker nor, after its last delivery, announces
// it out of deliveries meanwhile.
func (p *Pool) holdThroughOutage(ctx context.Context, msg jetstream.Msg, what string, o outcome, reason string, try func() (outcome, string)) (outcome, string) {
	if o != unavailable {
		return o, reason
	}
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	defer stopHeartbeat()
	go p.heartbeat(hbCtx, msg)
	return p.waitOutOutage(ctx, what, msg.Subject(), o, reason, try)
}

func (p *Pool) decideSafely(ctx context.Context, msg approvalMsg) (o outcome, reason string) {
	defer func() {
		if v := recover(); v != nil {
			p.log.ErrorContext(ctx, "approval handling panicked; message will be redelivered", "subject", msg.subject, "panic", v)
			o = retry
		}
	}()
	for range maxReloads {
		if o, reason = p.decide(ctx, msg); o != again {
			return o, reason
		}
	}
	return retry, ""
}

// undecidedSafely is undecided, turning a panic into a logged drop: the
// bug that failed every decision of the message may be met again
// recording it, and uncaught it would end the process. (On the
// max-deliveries advisory, decideDeadLetter, the advisory's callback
// catches it.)
func (p *Pool) undecidedSafely(ctx context.Context, msg approvalMsg) (o outcome, reason string) {
	defer func() {
		if v := recover(); v != nil {
			p.log.ErrorContext(ctx, "approval message dropped: not decided in all its deliveries, and recording it panicked",
				"subject", msg.subject, "approval_seq", msg.seq, "panic", v)
			o, reason = rejected, fmt.Sprintf("recording it as undecided panicked: %v", v)
		}
	}()
	return p.undecided(ctx, msg)
}

// undecided records an approval message that failed its last delivery as
// approval_rejected undecided in its run's trail and settles it. JetStream
// will not deliver it again; without the record it would vanish, and the
// approver would see nothing happen, nowhere. An outage (the run cannot be
// read, or the record stored) is unavailable, for the caller to wait out
// with the message held: dropped then, the answer would be lost in
// silence for a trouble none of its doing.
func (p *Pool) undecided(ctx context.Context, msg approvalMsg) (outcome, string) {
	tenant, runID, callID, err := parseApprovalSubject(msg.subject)
	if err != nil {
		return rejected, err.Error()
	}
	for range maxReloads {
		o, reason, err := p.recordUndecided(ctx, msg, tenant, runID, callID)
		switch {
		case err == nil:
			return o, reason
		case outage(err):
			return unavailable, err.Error()
		case errors.Is(err, context.Canceled):
			return stopping, "" // handed back, out of deliveries: the advisory's pool decides it
		case errors.Is(err, journal.ErrConflict):
			continue // another writer of the run: read it again
		}
		return p.dropUndecided(ctx, msg, err)
	}
	return p.dropUndecided(ctx, msg, errors.New("the run changed under every try to record it"))
}

// undecidedDetail is the detail of an approval_rejected undecided event.
func undecidedDetail(deliveries uint64) string {
	return fmt.Sprintf("no worker could decide this message in %d deliveries (the run or its approval entry could not be read or written, or its worker died each time); publish the decision again", deliveries)
}

// dropUndecided gives up an approval message out of deliveries that could
// not be recorded in its run: logged as an error, the last trace of it.
func (p *Pool) dropUndecided(ctx context.Context, msg approvalMsg, err error) (outcome, string) {
	p.log.ErrorContext(ctx, "approval message dropped: not decided in all its deliveries, and not recorded in its run", "subject", msg.subject, "approval_seq", msg.seq, "err", err)
	return rejected, undecidedDetail(msg.deliveries)
}

// recordUndecided is one try of undecided, on the run as read now.
func (p *Pool) recordUndecided(ctx context.Context, msg approvalMsg, tenant, runID, callID string) (outcome, string, error) {
	evs, st, last, err := p.readRun(ctx, tenant, runID)
	if err != nil {
		return 0, "", err
	}
	if st.Started == nil {
		return p.refuseStranger(ctx, msg, tenant, runID, callID)
	}
	if approved, rejected := recorded(evs, msg.seq); approved || rejected {
		return settled, "", nil // the run says what it did after all (another pool got there)
	}
	if e, _, err := p.approvals.Get(ctx, runID, callID); err == nil && !e.Pending() && e.DecisionSeq == msg.seq {
		// It did decide: the entry holds its decision, which the run's
		// worker records when it wakes (run.wait). Wake it now rather
		// than at the question's expiry.
		p.log.ErrorContext(ctx, "approval message out of deliveries with its decision made but not recorded; waking the run to record it", "subject", msg.subject, "approval_seq", msg.seq)
		if err := p.wake(ctx, tenant, runID, wakeID(e)); err != nil {
			return 0, "", err
		}
		return settled, "", nil
	}
	r := p.ender(st, last)
	m, _, _ := p.parseApproval(msg.data)
	d := events.ApprovalRejectedData{Class: approvals.RejectUndecided, Detail: undecidedDetail(msg.deliveries), ApprovalSeq: msg.seq}
	if err := r.recordRejection(ctx, callID, d, m); err != nil {
		return 0, "", err
	}
	r.log.ErrorContext(ctx, "approval message not decided in all its deliveries; recorded as approval_rejected undecided", "call_id", callID, "approval_seq", msg.seq)
	return settled, "", nil
}

// unansweredExpiry returns the expiry of the run's latest question about
// callID when no person answered it (its expiry decided it, or the run
// ended with it open), as the run's events record it; false when the call
// was never asked or a person answered its latest question.
func unansweredExpiry(evs []events.Event, callID string) (time.Time, bool) {
	var at time.Time
	asked, answered := false, false
	for i := range evs {
		e := &evs[i]
		if e.CallID != callID {
			continue
		}
		switch e.Type {
		case events.TypeApprovalRequested:
			var d events.ApprovalRequestedData
			if e.Decode(&d) != nil {
				return time.Time{}, false
			}
			at, asked, answered = d.ExpiresAt, true, false
		case events.TypeApproved:
			var d events.ApprovedData
			if e.Decode(&d) != nil {
				return time.Time{}, false
			}
			answered = d.Decision != string(approvals.Expired)
		}
	}
	return at, asked && !answered && !at.IsZero()
}

// arrival is when an approval message reached its stream; now when that
// is not known.
func arrival(msg approvalMsg, now time.Time) time.Time {
	if msg.received.IsZero() {
		return now
	}
	return msg.received
}

// recorded reports whether a run's events record what approval message
// seq did: an approved event or an approval_rejected event naming it.
func recorded(evs []events.Event, seq uint64) (approved, rejected bool) {
	for i := range evs {
		e := &evs[i]
		if e.Type != events.TypeApproved && e.Type != events.TypeApprovalRejected {
			continue
		}
		var d struct {
			ApprovalSeq uint64 `json:"approval_seq"`
		}
		if e.Decode(&d) == nil && d.ApprovalSeq == seq {
			approved, rejected = approved || e.Type == events.TypeApproved, rejected || e.Type == events.TypeApprovalRejected
		}
	}
	return approved, rejected
}

// handledSignature returns the stream seq of an approval message of
// callID, other than seq, that carried this signature and that the run's
// trail records as handled (an approved event, or an approval_rejected one
// other than undecided), reading each one back from LOOPGATE_APPROVALS; 0
// when none did. A copy
// of a handled signed message decides nothing: only the ones that had
// decided used to count, so a copy of a signed retry refused as
// not_pending in round 1 decided round 2, unseen by anyone.
func (p *Pool) handledSignature(ctx context.Context, evs []events.Event, callID, signature string, seq uint64) (uint64, error) {
	for i := range evs {
		e := &evs[i]
		if (e.Type != events.TypeApproved && e.Type != events.TypeApprovalRejected) || e.CallID != callID {
			continue
		}
		var d struct {
			ApprovalSeq uint64 `json:"approval_seq"`
			Class       string `json:"class"`
		}
		// A message recorded as undecided was never judged (no worker
		// could handle it): the README's remedy is to send it again.
		if e.Decode(&d) != nil || d.ApprovalSeq == 0 || d.ApprovalSeq == seq || d.Class == approvals.RejectUndecided {
			continue
		}
		raw, err := p.approvalMsgs.GetMsg(ctx, d.ApprovalSeq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		var earlier struct {
			Signature string `json:"signature"`
		}
		if json.Unmarshal(raw.Data, &earlier) == nil && earlier.Signature == signature {
			return d.ApprovalSeq, nil
		}
	}
	return 0, nil
}

// recordRejection appends d, about a message that decided nothing, to the
// run's trail, with what could be read of the message (m; nil: nothing).
func (r *run) recordRejection(ctx context.Context, callID string, d events.ApprovalRejectedData, m *approvals.Message) error {
	if m != nil {
		d.Decision, d.Approver, d.ArgsHash = string(m.Decision), m.Approver.ID, m.ArgsHash
	}
	tool := ""
	if c := r.st.Call(callID); c != nil {
		tool = c.Call.Tool
	}
	return r.append(ctx, events.TypeApprovalRejected, r.st.CurrentStep, callID, tool, d)
}

// again means an append lost a race with another writer of the run (its
// worker parking it, or another approval): decide again from a fresh load.
const again outcome = -1

// decide applies one approval message to its run. Whatever the message
// says, it either decides a pending call (first valid decision wins, by
// compare-and-set) and wakes the run, or is recorded in the run's trail as
// an approval_rejected event naming why, or, addressed to a run its
// subject's tenant does not have, as security records (refuseStranger). It
// never executes anything: the woken run executes exactly the call that
// was approved.
func (p *Pool) decide(ctx context.Context, msg approvalMsg) (outcome, string) {
	tenant, runID, callID, err := parseApprovalSubject(msg.subject)
	if err != nil {
		p.log.WarnContext(ctx, "approval on a malformed subject dropped", "subject", msg.subject, "err", err)
		return rejected, err.Error()
	}
	seq := msg.seq
	evs, st, last, err := p.readRun(ctx, tenant, runID)
	if err != nil {
		return failedOn(err)
	}
	if st.Started == nil {
		// No run of the subject's tenant can hold the refusal: it is a
		// security record of the tenant (and of the run's own tenant, if
		// another has the run).
		o, reason, err := p.refuseStranger(ctx, msg, tenant, runID, callID)
		if err != nil {
			return failedOn(err)
		}
		return o, reason
	}
	spent, done := recorded(evs, seq)
	if done {
		// Its rejection is in the trail already: a redelivery after its
		// handler died before acking, or another pool deciding it after
		// it ran out of deliveries (decideDeadLetter).
		return settled, ""
	}
	var r *run
	if st.Finished != nil {
		r = p.ender(st, last) // only to record the message's rejection
	} else if r, err = p.newRun(st, last, st.Started.Task, st.Started.Limits); err != nil {
		p.log.ErrorContext(ctx, "prepare run", "run_id", runID, "err", err)
		return retry, err.Error()
	}
	reject := func(class, detail string, m *approvals.Message, errs []events.FieldError) (outcome, string) {
		d := events.ApprovalRejectedData{Class: class, Detail: detail, Errors: errs, ApprovalSeq: seq}
		if err := r.recordRejection(ctx, callID, d, m); err != nil {
			return appendFailed(err)
		}
		approver := ""
		if m != nil {
			approver = m.Approver.ID
		}
		r.log.WarnContext(ctx, "approval rejected", "call_id", callID, "class", class, "detail", detail, "approver", approver)
		return settled, ""
	}

	m, detail, errs := p.parseApproval(msg.data)
	if errs != nil {
		return reject(approvals.RejectInvalid, detail, m, errs)
	}
	if m.RunID != runID || m.CallID != callID {
		return reject(approvals.RejectInvalid, fmt.Sprintf("the message names run %s call %s, its subject run %s call %s", m.RunID, m.CallID, runID, callID), m, nil)
	}
	if st.Finished != nil {
		// A run can end with a question pending (stopped as a poison
		// message while parked): its entry stays pending, and listed.
		// Nothing decides for a run that is over, and nothing but
		// approval_rejected may follow its finished event: decided here,
		// the answer would be an approved event after the run's end.
		if spent {
			// It decided a question before the end: a redelivery, its
			// handler or the run it went on with (continueRun) killed
			// before acknowledging it, perhaps before the run's finish
			// reached the projection. Write the record, as a worker
			// handed a finished run does (goOn); the message is
			// acknowledged once it is written (handleApproval).
			p.putRun(ctx, st, st.Started.Task, journal.RunFinished)
			return settled, ""
		}
		if at, ok := unansweredExpiry(evs, callID); ok && !arrival(msg, p.now()).Before(at) {
			return reject(approvals.RejectExpired, fmt.Sprintf("%s; the run has finished (%s)", approvals.ExpiredDetail(at), st.Finished.Reason), m, nil)
		}
		return reject(approvals.RejectNotPending, fmt.Sprintf("the run has finished (%s): no question of it awaits a decision", st.Finished.Reason), m, nil)
	}
	c := st.Call(callID)
	entry, rev, err := p.approvals.Get(ctx, runID, callID)
	switch {
	case errors.Is(err, approvals.ErrNotFound) && c != nil && c.Request != nil:
		// The question was asked, and its entry (written before the
		// question's event, requestHuman) cannot be read: deleted by hand,
		// or read where it is not yet. Try later; past MaxDeliver the
		// message is recorded undecided, and the approver told to send
		// it again.
		return retry, ""
	case errors.Is(err, approvals.ErrNotFound):
		return reject(approvals.RejectNoRequest, "no question was asked about this call", m, nil)
	case err != nil:
		return failedOn(err)
	}
	if entry.Pending() && (c == nil || c.Request == nil || c.Request.Round < entry.Round) {
		// The question's entry is written before its event, so that an
		// approver reacting to the event finds it pending; a worker that
		// stopped in between left an entry (listed by loopgate pending)
		// for a question the run's events do not hold. Deciding it as it
		// is would record an answer to a question never asked: a trail
		// that no longer folds. Ask it first, from the entry, if it is
		// the question the run is waiting to ask.
		asked, err := r.askRecorded(ctx, entry)
		switch {
		case err != nil:
			return appendFailed(err)
		case !asked:
			return reject(approvals.RejectNoRequest, "the run never asked this question and is not about to: its entry was left by a worker that stopped before asking", m, nil)
		}
		c = st.Call(callID)
	}
	awaiting := c != nil && c.Awaiting() && entry.Round == c.Request.Round
	if !entry.Pending() && entry.DecisionSeq == seq {
		// This very message decided the entry, and its handler died before
		// finishing: record the decision if it is not yet, and wake the run.
		if awaiting {
			return p.recordDecision(ctx, r, c, entry, msg.lease)
		}
		if err := p.wake(ctx, tenant, runID, wakeID(entry)); err != nil {
			return decidedButFailed(err)
		}
		return settled, ""
	}
	if spent {
		// The trail records this message's decision of an earlier round
		// of the call. A message decides one question: redelivered (its
		// handler died before acking, the run gone on to ask again), it
		// must not answer the next round, which no human has seen.
		return settled, ""
	}
	if entry.Pending() && seq <= entry.AskedAfterSeq {
		// A message does not name the round it answers. This one reached
		// the stream before this round was asked (a second answer to the
		// last round, decided late: its lane was busy, its handler slow or
		// killed): it must not answer a question no human had seen.
		return reject(approvals.RejectNotPending, fmt.Sprintf("this message was sent before round %d of the question was asked (approvals seq %d, the round asked after seq %d): it answered an earlier round; send a decision again to answer this one",
			entry.Round, seq, entry.AskedAfterSeq), m, nil)
	}
	key := p.app.Policy.Approvers[m.Approver.ID].PublicKey
	if m.Signature != "" && entry.Pending() && key != "" && approvals.VerifySignature(*m, key) == nil {
		// A signature binds run, call, arguments and decision, not the
		// round: a copy of a signed retry sent for round 1, published
		// again while round 2 waits, would run the write once more with
		// no human asked. Only a signature that verifies makes a copy: a
		// handled message's signature lifted onto other bytes used to be
		// recorded as a harmless copy; it is a forgery, and Check says
		// bad_signature.
		earlier, err := p.handledSignature(ctx, evs, callID, m.Signature, seq)
		switch {
		case err != nil:
			return failedOn(err)
		case earlier > 0:
			return reject(approvals.RejectStale, fmt.Sprintf("a copy of approval message %d, handled already: a signed decision answers once, and not round %d of the question", earlier, entry.Round), m, nil)
		}
	}
	roles, known := p.app.ApproverRoles(m.Approver.ID)
	class, detail := approvals.Check(*m, entry, approvals.Policy{
		Known:      known,
		MayApprove: p.app.MayApprove(roles, entry.Tool),
		// A known approver outside the run's tenant; an unknown one is
		// refused as unknown_approver.
		OtherTenant: known && !p.app.ApproverDecidesFor(m.Approver.ID, tenant),
		AllowSelf:   p.app.Policy.AllowSelfApproval,
		// Signatures: verified against the key the config gives the
		// approver id, never one the message brings; freshness is judged
		// against the server's receipt time, which no publisher sets.
		RequireSignature: p.app.Policy.RequireSignatures,
		PublicKey:        key,
		MaxAge:           p.app.Policy.ApprovalMaxAge.D(),
		Received:         msg.received,
	}, p.now())
	if class == approvals.RejectExpired && awaiting {
		if err := r.expire(ctx, c); err != nil && !errors.Is(err, errParked) {
			if errors.Is(err, approvals.ErrLost) {
				return again, "" // decided meanwhile: decide again from fresh reads
			}
			return appendFailed(err)
		}
		if err := p.wake(ctx, tenant, runID, wakeID(entry)); err != nil {
			return failedOn(err)
		}
	}
	if class != "" {
		return reject(class, detail, m, nil)
	}
	entry.State = decidedState(m.Decision)
	// The reason is stored as the approved event stores it: an approver
	// may read every entry of the bucket.
	entry.Decision, entry.DecidedBy, entry.Reason = m.Decision, m.Approver.ID, p.redactString(m.Reason)
	entry.DecidedAt, entry.DecisionSeq = p.now().UTC(), seq
	p.crash("before:decision")
	if err := p.approvals.Decide(ctx, entry, rev); err != nil {
		if errors.Is(err, approvals.ErrLost) {
			cur, _, gerr := p.approvals.Get(ctx, runID, callID)
			switch {
			case gerr != nil:
				return failedOn(gerr)
			case cur.Pending() || cur.DecisionSeq == seq:
				// Our read of the entry was behind its last write: on a
				// cluster a bucket's reads may be answered by a follower.
				// The write may even be this message's own decision, made
				// on an earlier pass whose approved event lost an append
				// race (make soak saw that message rejected as
				// not_pending by itself). Decide again from fresh reads.
				return again, ""
			}
			return reject(approvals.RejectNotPending, approvals.NotPendingDetail(cur), m, nil)
		}
		return failedOn(err)
	}
	return p.recordDecision(ctx, r, c, entry, msg.lease)
}

// recordDecision appends the decided entry as an approved event and wakes
// the run: at once, in this process, under the approval message's lease
// (continueRun), or else through a wake-up on the work stream.
func (p *Pool) recordDecision(ctx context.Context, r *run, c *events.CallState, e approvals.Entry, lease jetstream.Msg) (outcome, string) {
	if err := r.recordEntry(ctx, c, e); err != nil {
		// Retried: the entry names this message, so the retry records it.
		return decidedButFailed(err)
	}
	r.log.InfoContext(ctx, "call decided", "call_id", c.Call.ID, "tool", c.Call.Tool, "decision", e.Decision, "approver", e.DecidedBy)
	p.crash("after:approved")
	// Before the wake-up, on the same connection: the server stores it
	// before anything the woken run does, such as asking again about the
	// same call and scheduling that question's expiry on the same subject.
	p.cancelExpiry(e.Tenant, e.RunID, c.Call.ID)
	if p.continueRun(ctx, r, lease, wakeID(e)) {
		return handedOver, ""
	}
	if err := p.wake(ctx, e.Tenant, e.RunID, wakeID(e)); err != nil {
		return decidedButFailed(err)
	}
	return settled, ""
}

// handedOver is the outcome of an approval message whose run goes on in
// this process under the message's lease: continueRun settles it.
const handedOver outcome = -2

// continueRun goes on at once, in this process, with the run a decision
// has just woken (r, whose state holds the approved event), instead of
// publishing its wake-up for the pool's queue. That wake-up cost each
// approval two writes of the work stream (the message and, once taken,
// its removal), a delivery, and a second read and fold of the run, all in
// the run's chain of waits: without them the happy path with approvals
// does about a quarter more runs/s at sync always (docs/benchmarks.md).
//
// The approval message is the run's lease meanwhile: heartbeated like a
// work message, acknowledged when the worker lets go of the run. A run
// that stops short of parking or finishing (a lost race it could not
// settle, an outage, a panic, the pool stopping) is handed to the queue
// with the wake-up it would have had, so retries, outages and poison runs
// are dealt with as ever, by the work message's deliveries. A process that
// dies meanwhile leaves the approval message unacknowledged: its
// redelivery finds the entry decided by itself and wakes the run.
//
// It reports false, and does nothing, when the pool is stopping, the
// message is not held (read back after its deliveries ran out), or
// Workers runs already go on this way in the process.
func (p *Pool) continueRun(ctx context.Context, r *run, lease jetstream.Msg, wake string) bool {
	if lease == nil || p.stopping() {
		return false
	}
	select {
	case p.continuing <- struct{}{}:
	default:
		return false
	}
	p.wg.Go(func() {
		defer func() { <-p.continuing }()
		ctx, waits := withProjectionWaits(ctx)
		hbCtx, stopHeartbeat := context.WithCancel(ctx)
		defer stopHeartbeat() // even if the worker dies (the crash hook's Goexit)
		go p.heartbeat(hbCtx, lease)
		o, reason := p.driveSafely(ctx, r)
		stopHeartbeat()
		if o == settled && !waits.none() {
			// Its redelivery would wake the run, and the woken worker
			// write the record a death here lost (see ackAfterProjection).
			p.ackAfterProjection(ctx, lease, waits)
			return
		}
		if o != settled {
			// Even when the pool is stopping: the wake-up hands the run
			// to another worker.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handOverTimeout)
			err := p.wake(wctx, r.task.Tenant, r.st.RunID, wake)
			cancel()
			if err != nil {
				r.log.WarnContext(ctx, "run not continued after its decision, nor handed to the queue; its approval message comes back to wake it", "outcome", o.String(), "cause", reason, "err", err)
				_ = lease.NakWithDelay(p.opts.RetryDelay)
				return
			}
			r.log.InfoContext(ctx, "run not continued after its decision; handed to the queue", "outcome", o.String(), "cause", reason)
		}
		if err := lease.Ack(); err != nil {
			p.log.WarnContext(ctx, "settle approval message", "subject", lease.Subject(), "err", err)
		}
	})
	return true
}

// handOverTimeout bounds the wake-up that hands a run continued after its
// decision to the queue.
const handOverTimeout = 5 * time.Second

// driveSafely is drive, turning a panic into a retry, as processSafely.
func (p *Pool) driveSafely(ctx context.Context, r *run) (o outcome, reason string) {
	defer func() {
		if v := recover(); v != nil {
			r.log.ErrorContext(ctx, "worker panicked continuing a run after its decision; handing it to the queue", "panic", v)
			o, reason = retry, fmt.Sprintf("worker panicked: %v", v)
		}
	}()
	return p.drive(ctx, r)
}

// decidedButFailed is the outcome of a message whose decision the entry
// holds but whose approved event or wake-up could not be written. The
// message is held and tried again, whatever the error, as in an outage: if
// it ran out of deliveries, nothing would record the decision until the
// run's next wake-up (see run.wait), and nothing would wake the run.
func decidedButFailed(err error) (outcome, string) {
	if errors.Is(err, journal.ErrConflict) {
		return again, ""
	}
	return unavailable, err.Error()
}

// wakeID is the Nats-Msg-Id of the wake-up after a decision: however often
// it is published, the run is woken once.
func wakeID(e approvals.Entry) string {
	return fmt.Sprintf("wake/%s/%s/%d", e.RunID, e.CallID, e.Round)
}

func appendFailed(err error) (outcome, string) {
	if errors.Is(err, journal.ErrConflict) {
		return again, ""
	}
	return failedOn(err)
}

func decidedState(d approvals.Decision) string {
	switch d {
	case approvals.Approve:
		return "approved"
	case approvals.Deny:
		return "denied"
	}
	return string(d)
}

// parseApproval validates an approval message. On failure it returns what
// it could read of the message (for the audit record) and field errors.
func (p *Pool) parseApproval(data []byte) (m *approvals.Message, detail string, errs []events.FieldError) {
	// Each refusal says what it is: they all used to be "the message does
	// not match schemas/approval.schema.json", a message over the size
	// bound too.
	refuse := func(why string) (*approvals.Message, string, []events.FieldError) {
		return nil, why, []events.FieldError{{Message: why}}
	}
	if len(data) > maxApprovalBytes {
		return refuse(fmt.Sprintf("message is %d bytes, over the limit of %d", len(data), maxApprovalBytes))
	}
	if why := notStrictJSON("message", data); why != "" {
		return refuse(why)
	}
	m = new(approvals.Message)
	_ = json.Unmarshal(data, m)
	if res := p.approvalSchema().ValidateJSON(data); !res.IsValid() {
		errs := schemas.Errors(res)
		if len(errs) == 0 {
			errs = []events.FieldError{{Message: "does not match the approval schema"}}
		}
		return m, "the message does not match schemas/approval.schema.json", errs
	}
	return m, "", nil
}

func (p *Pool) approvalSchema() *jsonschema.Schema { return p.approvalSch }

// parseApprovalSubject splits loopgate.approvals.<tenant>.<run_id>.<call_id>.
func parseApprovalSubject(subject string) (tenant, runID, callID string, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 || parts[0] != "loopgate" || parts[1] != "approvals" ||
		!events.ValidToken(parts[2]) || !events.ValidToken(parts[3]) || !events.ValidToken(parts[4]) {
		return "", "", "", fmt.Errorf("not an approval subject: %q", subject)
	}
	return parts[2], parts[3], parts[4], nil
}
