package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kaptinlin/jsonschema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/wait"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/schemas"
)

// maxCancelBytes bounds a cancel message: above the largest that
// schemas/cancel.schema.json admits with every string at its longest,
// each character written as a 12-byte \uXXXX surrogate pair.
const maxCancelBytes = 64 << 10

// cancelSchema is schemas/cancel.schema.json, compiled once per process.
var cancelSchema = sync.OnceValues(func() (*jsonschema.Schema, error) { return schemas.Compile("cancel") })

// errRunCancelled is the cause of a tool call's context when its run is
// cancelled while the call runs in this process.
var errRunCancelled = errors.New("the run was cancelled")

// halts holds, per run, the contexts of the tool calls this process runs
// now, so that a cancel handled here cancels them. Its zero value is
// ready to use; it is safe for concurrent use.
type halts struct {
	mu   sync.Mutex
	next uint64
	runs map[string]map[uint64]context.CancelCauseFunc
}

// bind returns ctx, cancelled with errRunCancelled as its cause when run
// runID is halted, and the release the caller must call when the call is
// over.
func (h *halts) bind(ctx context.Context, runID string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	h.mu.Lock()
	if h.runs == nil {
		h.runs = map[string]map[uint64]context.CancelCauseFunc{}
	}
	if h.runs[runID] == nil {
		h.runs[runID] = map[uint64]context.CancelCauseFunc{}
	}
	h.next++
	id := h.next
	h.runs[runID][id] = cancel
	h.mu.Unlock()
	return ctx, func() {
		h.mu.Lock()
		delete(h.runs[runID], id)
		if len(h.runs[runID]) == 0 {
			delete(h.runs, runID)
		}
		h.mu.Unlock()
		cancel(nil)
	}
}

// halt cancels the contexts of run runID's calls in flight in this
// process, and says how many there were.
func (h *halts) halt(runID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cancel := range h.runs[runID] {
		cancel(errRunCancelled)
	}
	return len(h.runs[runID])
}

// has reports whether this process runs a call of run runID now.
func (h *halts) has(runID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.runs[runID]) > 0
}

// HaltPrefix is where the pool that handled a running run's cancel tells
// every pool: loopgate.halt.<tenant>.<run_id>, a core NATS message with no
// body and no reply subject, stored nowhere.
const HaltPrefix = "loopgate.halt"

// watchHalts subscribes the pool to every pool's halt notices, so that a
// call of a cancelled run runs on in no process: the pool that handled
// the cancel cancels its own calls itself. A notice is a hint, never the
// truth: it is acted on only when this process runs a call of the run
// and the run's trail holds its cancel (a client allowed to create push
// consumers can deliver stream messages on any subject), and one with a
// reply subject is ignored.
func (p *Pool) watchHalts(ctx context.Context) (*nats.Subscription, error) {
	sub, err := p.js.Conn().Subscribe(HaltPrefix+".*.*", func(m *nats.Msg) {
		parts := strings.Split(m.Subject, ".")
		if m.Reply != "" || len(parts) != 4 || !events.ValidToken(parts[2]) || !events.ValidToken(parts[3]) {
			return
		}
		tenant, runID := parts[2], parts[3]
		if !p.halts.has(runID) {
			return
		}
		go func() {
			_, st, _, err := p.readRun(ctx, tenant, runID)
			if err != nil || st.Cancel == nil {
				return
			}
			if n := p.halts.halt(runID); n > 0 {
				p.log.InfoContext(ctx, "calls of a run cancelled by another pool were cancelled here", "run_id", runID, "tenant", tenant, "calls_halted", n)
			}
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("worker: subscribe to %s.>: %w", HaltPrefix, err)
	}
	return sub, nil
}

// tellHalt publishes run runID's halt notice to every pool. It is best
// effort: a pool that misses it stops the run at its next append all the
// same, once its call ends.
func (p *Pool) tellHalt(ctx context.Context, tenant, runID string) {
	if err := p.js.Conn().Publish(HaltPrefix+"."+tenant+"."+runID, nil); err != nil {
		p.log.WarnContext(ctx, "tell the pools to cancel a cancelled run's calls", "run_id", runID, "err", err)
	}
}

// consumeCancels handles cancel messages one at a time, in the order the
// stream holds them, until taking is done (Stop). A cancel is a few
// reads and one or two appends, and cancels are rare: one goroutine per
// process is enough.
func (p *Pool) consumeCancels(ctx, taking context.Context, cons jetstream.Consumer) {
	trouble := newTroubleLog("fetch cancels", p.log, p.now)
	for taking.Err() == nil {
		msg, err := p.take(taking, cons)
		switch {
		case taking.Err() != nil:
			if msg != nil {
				_ = msg.NakWithDelay(time.Second)
			}
			return
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			continue
		case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed):
			return
		case err != nil:
			trouble.failed(ctx, err)
			_ = wait.For(taking, p.opts.RetryDelay)
			continue
		}
		trouble.ok(ctx)
		p.handleCancel(ctx, msg)
	}
}

// cancelMsg is what deciding a cancel message needs of it.
type cancelMsg struct {
	subject  string
	data     []byte
	seq      uint64    // its sequence in LOOPGATE_CANCELS
	received time.Time // when the stream stored it
}

// handleCancel decides one cancel message and settles it, holding it
// through a JetStream outage. It never panics out: a panic is logged and
// the message redelivered.
func (p *Pool) handleCancel(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.NakWithDelay(p.opts.RetryDelay)
		return
	}
	cm := cancelMsg{subject: msg.Subject(), data: msg.Data(), seq: meta.Sequence.Stream, received: meta.Timestamp}
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	defer stopHeartbeat()
	go p.heartbeat(hbCtx, msg)
	// JetStream cannot take the cancel's writes: hold the message rather
	// than spend its deliveries on the outage, as for an approval.
	decide := func() (outcome, string) { return p.cancelSafely(ctx, cm) }
	o, reason := decide()
	o, reason = p.holdThroughOutage(ctx, msg, "a cancel's record", o, reason, decide)
	if o != settled && o != rejected && p.lastDelivery(msg) {
		p.log.ErrorContext(ctx, "cancel message not handled in all its deliveries; it stays in the cancels stream as published: publish it again",
			"subject", cm.subject, "cancel_seq", cm.seq, "cause", reason)
	}
	if err := settle(msg, o, reason, p.opts.RetryDelay); err != nil {
		p.log.WarnContext(ctx, "settle cancel message", "subject", cm.subject, "err", err)
	}
}

func (p *Pool) cancelSafely(ctx context.Context, msg cancelMsg) (o outcome, reason string) {
	defer func() {
		if v := recover(); v != nil {
			p.log.ErrorContext(ctx, "cancel handling panicked; message will be redelivered", "subject", msg.subject, "panic", v)
			o, reason = retry, fmt.Sprintf("panic: %v", v)
		}
	}()
	for range maxReloads {
		if o, reason = p.decideCancel(ctx, msg); o != again {
			return o, reason
		}
	}
	return retry, "the run changed under every try to record the cancel"
}

// decideCancel applies one cancel message to its run, as read now:
//
//   - malformed, naming another run, or from someone the policy does not
//     let cancel the run: a cancel_rejected record naming why (the field,
//     for a malformed one); the run goes on;
//   - the run finished already: a cancel_rejected record of class
//     finished after its end; nothing else changes;
//   - otherwise a cancel_requested event, appended conditionally on the
//     run's last event, so that its driver's next append fails, and it
//     reloads the run and finishes it cancelled; a call of the run in
//     flight has its context cancelled, in this process at once and in
//     the others by a halt notice (watchHalts). A parked run,
//     which no worker holds, is finished cancelled here at once, and its
//     questions withdrawn.
//
// A message whose outcome the run's trail holds already (a redelivery)
// only finishes what its handler left undone.
func (p *Pool) decideCancel(ctx context.Context, msg cancelMsg) (outcome, string) {
	tenant, runID, err := events.ParseCancelSubject(msg.subject)
	if err != nil {
		p.log.WarnContext(ctx, "cancel on a malformed subject refused; the cancels stream keeps it as published", "subject", msg.subject, "cancel_seq", msg.seq, "err", err)
		return rejected, err.Error()
	}
	evs, st, last, err := p.readRun(ctx, tenant, runID)
	if err != nil {
		return failedOn(err)
	}
	if st.Started == nil {
		p.log.WarnContext(ctx, "cancel for a run its subject's tenant does not have refused; the cancels stream keeps it as published",
			"subject", msg.subject, "cancel_seq", msg.seq)
		return rejected, fmt.Sprintf("tenant %s has no run %s", tenant, runID)
	}
	r := p.ender(st, last)
	if requested, rejected := cancelRecorded(evs, msg.seq); rejected {
		return settled, ""
	} else if requested {
		// This message's cancel is in the trail; its handler may have
		// died before finishing the parked run it stopped.
		if st.Finished == nil && st.Cancel != nil && st.Cancel.Parked && st.Cancel.CancelSeq == msg.seq {
			return p.finishCancelled(ctx, r)
		}
		return settled, ""
	}
	m, errs := parseCancel(msg.data)
	reject := func(class, detail string, errs []events.FieldError) (outcome, string) {
		d := events.CancelRejectedData{Class: class, Detail: detail, Errors: errs, CancelSeq: msg.seq}
		if m != nil {
			if m.RequestedBy.ID != "" {
				d.RequestedBy = &events.Requester{ID: m.RequestedBy.ID}
			}
			d.Reason = p.redactString(m.Reason)
		}
		if err := r.append(ctx, events.TypeCancelRejected, st.CurrentStep, "", "", d); err != nil {
			return appendFailed(err)
		}
		r.log.WarnContext(ctx, "cancel rejected", "class", class, "detail", detail, "cancel_seq", msg.seq)
		return settled, ""
	}
	switch {
	case errs != nil:
		return reject(events.CancelInvalid, "the message does not match schemas/cancel.schema.json: "+fieldList(errs), errs)
	case m.RunID != runID:
		return reject(events.CancelInvalid, fmt.Sprintf("run_id: the message names run %s, its subject run %s", m.RunID, runID),
			[]events.FieldError{{Field: "/run_id", Message: "differs from the subject's run id " + runID}})
	case st.Finished != nil:
		return reject(events.CancelFinished, fmt.Sprintf("the run had finished (%s): the cancel is ignored", st.Finished.Reason), nil)
	case !p.app.MayCancel(m.RequestedBy.ID, tenant, st.Started.Task.Principal.ID, st.Started.Task.Agent):
		return reject(events.CancelNotAuthorized, fmt.Sprintf("%s may not cancel this run: neither its principal nor an approver of tenant %s with a role that may cancel agent %s",
			m.RequestedBy.ID, tenant, st.Started.Task.Agent), nil)
	case st.Cancel != nil:
		return reject(events.CancelAlready, fmt.Sprintf("the run is being cancelled already, by %s (cancel %d)", st.Cancel.RequestedBy.ID, st.Cancel.CancelSeq), nil)
	}
	parked := st.IsParked
	d := events.CancelRequestedData{
		RequestedBy: events.Requester{ID: m.RequestedBy.ID}, Reason: p.redactString(m.Reason),
		CancelSeq: msg.seq, Received: msg.received.UTC(), Parked: parked,
	}
	p.crash("before:cancel")
	if err := r.append(ctx, events.TypeCancelRequested, st.CurrentStep, "", "", d); err != nil {
		return appendFailed(err)
	}
	p.crash("after:cancel_requested")
	halted := p.halts.halt(runID)
	r.log.InfoContext(ctx, "run cancelled", "requested_by", d.RequestedBy.ID, "parked", parked, "calls_halted", halted)
	if parked {
		return p.finishCancelled(ctx, r)
	}
	p.tellHalt(ctx, tenant, runID)
	return settled, ""
}

// finishCancelled finishes a parked run whose cancel r's state holds, and
// cancels its questions' expiry wake-ups.
func (p *Pool) finishCancelled(ctx context.Context, r *run) (outcome, string) {
	var awaiting []string
	for _, c := range r.st.CurrentCalls {
		if c.Awaiting() {
			awaiting = append(awaiting, c.Call.ID)
		}
	}
	if err := r.finish(ctx, r.cancelledStop(), nil); err != nil {
		return appendFailed(err)
	}
	for _, id := range awaiting {
		p.cancelExpiry(r.task.Tenant, r.st.RunID, id)
	}
	return settled, ""
}

// cancelledStop is how a run with a cancel in its state stops: finished
// cancelled, naming who asked and why, and any call whose attempt was in
// flight, whose outcome is unknown and stays so: it is not retried.
func (r *run) cancelledStop() stop {
	detail := events.CancelledDetail(r.st.Cancel)
	for _, c := range r.st.CurrentCalls {
		if !c.InFlight() {
			continue
		}
		ex := c.Executing[len(c.Executing)-1]
		detail += fmt.Sprintf("; call %s (%s) was in flight (operation %s, attempt %d): its outcome is unknown, and it is not retried",
			c.Call.ID, c.Call.Tool, ex.OperationID, ex.Attempt)
	}
	return stop{events.ReasonCancelled, detail}
}

// cancelRecorded reports whether a run's events record what cancel message
// seq did: a cancel_requested or a cancel_rejected event naming it.
func cancelRecorded(evs []events.Event, seq uint64) (requested, rejected bool) {
	for i := range evs {
		e := &evs[i]
		if e.Type != events.TypeCancelRequested && e.Type != events.TypeCancelRejected {
			continue
		}
		var d struct {
			CancelSeq uint64 `json:"cancel_seq"`
		}
		if e.Decode(&d) == nil && d.CancelSeq == seq {
			requested, rejected = requested || e.Type == events.TypeCancelRequested, rejected || e.Type == events.TypeCancelRejected
		}
	}
	return requested, rejected
}

// parseCancel validates a cancel message strictly against
// schemas/cancel.schema.json. On failure it returns what it could read of
// the message (for the record) and field errors.
func parseCancel(data []byte) (*events.CancelMessage, []events.FieldError) {
	refuse := func(why string) (*events.CancelMessage, []events.FieldError) {
		return nil, []events.FieldError{{Message: why}}
	}
	if len(data) > maxCancelBytes {
		return refuse(fmt.Sprintf("message is %d bytes, over the limit of %d", len(data), maxCancelBytes))
	}
	if why := notStrictJSON("message", data); why != "" {
		return refuse(why)
	}
	m := new(events.CancelMessage)
	_ = json.Unmarshal(data, m)
	schema, err := cancelSchema()
	if err != nil {
		return m, []events.FieldError{{Message: "the cancel schema does not compile: " + err.Error()}}
	}
	if res := schema.ValidateJSON(data); !res.IsValid() {
		errs := schemas.Errors(res)
		if len(errs) == 0 {
			errs = []events.FieldError{{Message: "does not match the cancel schema"}}
		}
		return m, errs
	}
	return m, nil
}

// fieldList names each field error as "<field>: <message>".
func fieldList(errs []events.FieldError) string {
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		if e.Field == "" {
			parts = append(parts, e.Message)
			continue
		}
		parts = append(parts, e.Field+": "+e.Message)
	}
	return strings.Join(parts, "; ")
}

// openCancels returns the cancels consumer.
func (p *Pool) openCancels(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := p.js.Consumer(ctx, journal.StreamCancels, journal.ConsumerCancels)
	if err != nil {
		return nil, fmt.Errorf("worker: consumer %s on %s: %w", journal.ConsumerCancels, journal.StreamCancels, err)
	}
	return cons, nil
}

// unsubscribeAll ends several subscriptions as one.
type unsubscribeAll []interface{ Unsubscribe() error }

func (u unsubscribeAll) Unsubscribe() error {
	var errs []error
	for _, s := range u {
		errs = append(errs, s.Unsubscribe())
	}
	return errors.Join(errs...)
}
