package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/tools"
)

// requestHuman asks a human about a call: kind approval (may these exact
// arguments run?) or needs_human (the outcome is unknown: mark_done, retry
// or abandon). It records the question, then parks the run.
func (r *run) requestHuman(ctx context.Context, c *events.CallState, kind approvals.Kind) error {
	m := r.manifest(c.Call.Tool)
	if kind == approvals.KindApproval {
		// Do not ask a human for a call no budget would let run.
		if s := beforeCall(r.st, r.limits, m, r.p.now(), r.deadline); !s.ok() {
			return r.finish(ctx, s, nil)
		}
	}
	round := nextRound(c)
	why := r.gateReason(c, m)
	if kind == approvals.KindNeedsHuman {
		last := c.LastExecuted()
		why = fmt.Sprintf("the outcome of attempt %d is unknown (%s): decide mark_done, retry or abandon", c.Attempts(), last.Status)
	}
	ttl := cmp.Or(m.ApprovalTTL, r.profile.ApprovalTTL, events.Duration(24*time.Hour))
	q := events.ApprovalRequestedData{
		Kind:        string(kind),
		Round:       round,
		Tool:        c.Call.Tool,
		Args:        c.Validated.Args,
		ArgsHash:    c.Validated.ArgsHash,
		OperationID: attemptOperationID(r.st.RunID, c),
		Principal:   r.task.Principal.ID,
		Why:         why,
		ExpiresAt:   r.p.now().Add(ttl.D()).UTC(),
		Attempt:     c.Attempts(),
	}
	// The entry exists before anyone can read the question: an approver
	// who reacts to the event finds it pending. The call's events are
	// durable before the entry, which binds the call's arguments.
	if err := r.flush(ctx); err != nil {
		return err
	}
	// The question's expiry is scheduled while its entry is written (they
	// are writes of different streams, each an fsync), and before the
	// question is asked: a run is never parked without its expiry. A
	// schedule whose question is then not asked fires at its expiry and
	// finds the run past it, or not parked (wait).
	scheduled := make(chan error, 1)
	go func() {
		scheduled <- r.p.scheduleWake(ctx, r.task.Tenant, r.st.RunID, c.Call.ID, q.ExpiresAt)
	}()
	stored, err := r.request(ctx, c.Call.ID, q)
	if serr := <-scheduled; err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	if !stored.ExpiresAt.Equal(q.ExpiresAt) {
		// An entry of this round left by a worker that died before asking:
		// ask exactly what it holds, so that its expiry (which decisions
		// are checked against) is the question's, and the wake-up's.
		q.ExpiresAt = stored.ExpiresAt
		if err := r.p.scheduleWake(ctx, r.task.Tenant, r.st.RunID, c.Call.ID, q.ExpiresAt); err != nil {
			return err
		}
	}
	// The question and the parked event go in one append: each prefix of
	// the two is a state the run resumes from (asked and not parked: wait
	// parks it).
	if err := r.append(ctx, events.TypeApprovalRequested, r.st.CurrentStep, c.Call.ID, c.Call.Tool, q); err != nil {
		return err
	}
	return r.parked(ctx, c)
}

// gateReason says why call c of a tool with manifest m needs a human's
// approval, each reason that holds in this order, joined by "; ": the
// manifest's approval; the run's first observation of untrusted output
// before the call's decision, exactly "read untrusted content from <tool>
// at step <n>"; tool output flagged by the phrase checks (guard). A call
// gated by untrusted output alone has exactly that sentence.
func (r *run) gateReason(c *events.CallState, m tools.Manifest) string {
	var why []string
	if m.NeedsApproval() {
		why = append(why, fmt.Sprintf("%s is a %s tool: a human must approve these exact arguments", c.Call.Tool, m.Permission))
	}
	if o, ok := r.untrustedRead(); ok {
		why = append(why, untrustedReason(o))
	}
	if len(r.st.Tainted) > 0 {
		var calls, memory []string
		for _, from := range r.st.Tainted {
			if strings.HasPrefix(from, "session:") {
				memory = append(memory, from)
			} else {
				calls = append(calls, from)
			}
		}
		var taint []string
		if len(calls) > 0 {
			taint = append(taint, fmt.Sprintf("this run read tool output flagged as possible prompt injection (from %s)", strings.Join(calls, ", ")))
		}
		if len(memory) > 0 {
			taint = append(taint, fmt.Sprintf("this run was shown session memory written after flagged or untrusted tool output (from %s)", strings.Join(memory, ", ")))
		}
		if len(why) == 0 {
			why = append(why, "taint: "+strings.Join(taint, "; ")+"; every write now needs a human's approval")
		} else {
			why = append(why, "note the taint: "+strings.Join(taint, "; "))
		}
	}
	return strings.Join(why, "; ")
}

// taintsSession reports whether what the run leaves in its session's
// memory may carry injected text, and so taints the session's next runs:
// the run is tainted by the phrase checks, or it observed, at any step,
// output of a tool whose manifest declares untrusted_output.
func (r *run) taintsSession() bool {
	if len(r.st.Tainted) > 0 {
		return true
	}
	return slices.ContainsFunc(r.st.Outputs, func(o events.Output) bool { return r.manifest(o.Tool).UntrustedOutput })
}

// writesGated reports whether every write of the run's current decision
// needs a human's approval, whatever its manifest says: the run read tool
// output the phrase checks flagged (RunState.Tainted), or, before the
// decision was proposed, output of a tool whose manifest declares
// untrusted_output (untrustedRead).
func (r *run) writesGated() bool {
	if len(r.st.Tainted) > 0 {
		return true
	}
	_, ok := r.untrustedRead()
	return ok
}

// writeGated reports whether call c, if it is a write, needs a human's
// approval whatever its manifest says: writesGated, or c was asked about
// already. Once asked, the answer decides, even where the manifests no
// longer gate the call (a config that dropped the untrusted_output that
// gated it): a denied call never runs.
func (r *run) writeGated(c *events.CallState) bool {
	return c.Request != nil || r.writesGated()
}

// untrustedRead returns the run's first observation of the output of a tool
// whose manifest declares untrusted_output (events.Output says which
// observations hold a tool's output) made at a step before the current
// decision's: only a decision proposed after the model was shown that
// output can have been steered by it. The manifests are read now, so every
// worker that takes the run up with the same config decides the same.
func (r *run) untrustedRead() (events.Output, bool) {
	for _, o := range r.st.Outputs {
		if o.Step < r.st.CurrentStep && r.manifest(o.Tool).UntrustedOutput {
			return o, true
		}
	}
	return events.Output{}, false
}

// untrustedReason is the reason a write is gated by untrusted output o.
func untrustedReason(o events.Output) string {
	return fmt.Sprintf("read untrusted content from %s at step %d", o.Tool, o.Step)
}

// askRecorded appends the question of a pending entry that the run's
// events do not hold yet, when it is exactly the question the run would
// ask next: the entry's call is the run's next call, it needs a human of
// the entry's kind, the entry's round is the next one and its args hash
// is the validated call's. It reports whether it asked.
//
// The entry is written just before the question's event (requestHuman);
// a worker that stopped in between leaves it behind, and an approver may
// answer it before the run's message comes back to a worker. A worker
// still alive in between loses its own append of the question to this one
// (ErrConflict), reloads and finds the question asked.
func (r *run) askRecorded(ctx context.Context, e approvals.Entry) (bool, error) {
	if r.st.Finished != nil || e.Step != r.st.CurrentStep {
		return false, nil
	}
	c, act := r.nextCall()
	want := map[approvals.Kind]action{approvals.KindApproval: actRequestApproval, approvals.KindNeedsHuman: actRequestHuman}[e.Kind]
	if c == nil || c.Call.ID != e.CallID || act != want || e.Round != nextRound(c) || e.ArgsHash != c.Validated.ArgsHash {
		return false, nil
	}
	q := events.ApprovalRequestedData{
		Kind:        string(e.Kind),
		Round:       e.Round,
		Tool:        c.Call.Tool,
		Args:        c.Validated.Args,
		ArgsHash:    e.ArgsHash,
		OperationID: e.OperationID,
		Principal:   e.Principal,
		Why:         e.Why,
		ExpiresAt:   e.ExpiresAt,
		Attempt:     c.Attempts(),
	}
	if err := r.append(ctx, events.TypeApprovalRequested, r.st.CurrentStep, c.Call.ID, c.Call.Tool, q); err != nil {
		return false, err
	}
	r.log.InfoContext(ctx, "asked the question of a pending entry the run did not hold yet", "call_id", c.Call.ID, "round", e.Round)
	return true, nil
}

// nextRound is the round of the next question about call c.
func nextRound(c *events.CallState) int {
	if c.Request == nil {
		return 1
	}
	return c.Request.Round + 1
}

// entry is the pending KV entry of question q about call callID.
func (r *run) entry(callID string, q events.ApprovalRequestedData) approvals.Entry {
	return approvals.Entry{
		Kind:        approvals.Kind(q.Kind),
		Round:       q.Round,
		Tenant:      r.task.Tenant,
		RunID:       r.st.RunID,
		CallID:      callID,
		Step:        r.st.CurrentStep,
		Tool:        q.Tool,
		Args:        r.redactedArgs(q.Args),
		ArgsHash:    q.ArgsHash,
		OperationID: q.OperationID,
		Principal:   q.Principal,
		Why:         q.Why,
		RequestedAt: r.p.now().UTC(),
		ExpiresAt:   q.ExpiresAt,
	}
}

// request writes the pending entry of question q of call callID (see
// approvals.Store.Request), bounded below by the approval messages already
// on the call's subject: none of them can answer it.
func (r *run) request(ctx context.Context, callID string, q events.ApprovalRequestedData) (approvals.Entry, error) {
	e := r.entry(callID, q)
	seq, err := r.p.lastApprovalSeq(ctx, e.Tenant, e.RunID, callID)
	if err != nil {
		return approvals.Entry{}, err
	}
	e.AskedAfterSeq = seq
	return r.p.approvals.Request(ctx, e)
}

// lastApprovalSeq returns the LOOPGATE_APPROVALS sequence of the last
// message on a call's approval subject, 0 for none.
func (p *Pool) lastApprovalSeq(ctx context.Context, tenant, runID, callID string) (uint64, error) {
	m, err := p.approvalMsgs.GetLastMsgForSubject(ctx, events.ApprovalSubject(tenant, runID, callID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("last approval message of %s/%s: %w", runID, callID, err)
	}
	return m.Sequence, nil
}

// errParked ends a worker's hold on a run that now waits for a human.
var errParked = errors.New("run parked")

// wait handles a wake-up of a run whose call c still awaits a human: an
// expired question is decided as expired; a run that was never fully
// parked (its worker died mid-way) is parked now; a premature wake-up
// schedules the expiry again and lets go.
func (r *run) wait(ctx context.Context, c *events.CallState) error {
	if err := r.flush(ctx); err != nil {
		return err
	}
	q := c.Request
	// The entry may hold a decision the run does not: its handler decided
	// and then could not record it (a JetStream outage that outlasted the
	// approval message's deliveries, a handler killed on the last one).
	// Nobody else would ever record it: the run does, as the handler would
	// have, and goes on.
	switch e, _, err := r.p.approvals.Get(ctx, r.st.RunID, c.Call.ID); {
	case err == nil && !e.Pending() && e.Round == q.Round:
		r.log.InfoContext(ctx, "decision found in the approval entry, not in the run: recording it", "call_id", c.Call.ID, "decision", e.Decision, "approval_seq", e.DecisionSeq)
		return r.recordEntry(ctx, c, e)
	case err != nil && !errors.Is(err, approvals.ErrNotFound):
		return err
	}
	if r.due(q.ExpiresAt) {
		return r.expire(ctx, c)
	}
	if !r.st.IsParked {
		if _, err := r.request(ctx, c.Call.ID, *q); err != nil {
			return err
		}
		return r.park(ctx, c)
	}
	if err := r.p.scheduleWake(ctx, r.task.Tenant, r.st.RunID, c.Call.ID, q.ExpiresAt); err != nil {
		return err
	}
	// The worker that parked the run may have died before its record was
	// written: this pass writes it (the projector skips a record the
	// bucket already holds).
	r.p.putRun(ctx, r.st, r.task, journal.RunParked)
	return errParked
}

// due reports whether a question expiring at expires has expired. The
// server's clock says so: an approval is judged by when the approvals
// stream stored it, and the expiry fires by an @at schedule, so the
// scheduled wake-up that began this pass, stored at or after expires,
// decides it. A pass begun by any other message (a lease's end for
// another call, a handover, a redelivery) has only the worker's clock:
// it expires the question only leaseGrace past its time. A worker whose
// clock ran ahead used to expire a question early, and refuse an approval
// the server then stored in time; now it reschedules, and the server's
// clock decides.
func (r *run) due(expires time.Time) bool {
	if !r.fired.IsZero() && !r.fired.Before(expires) {
		return true
	}
	return !r.p.now().Before(expires.Add(leaseGrace))
}

// park schedules the expiry wake-up and records the parked event; then the
// worker lets go (errParked). A parked run is only events, a KV entry and
// a scheduled message: no goroutine, timer or unacked message holds it.
func (r *run) park(ctx context.Context, c *events.CallState) error {
	// A schedule subject holds one schedule: scheduling again replaces it.
	if err := r.p.scheduleWake(ctx, r.task.Tenant, r.st.RunID, c.Call.ID, c.Request.ExpiresAt); err != nil {
		return err
	}
	return r.parked(ctx, c)
}

// parked records the parked event of a run whose expiry wake-up is
// scheduled, and lets go (errParked).
func (r *run) parked(ctx context.Context, c *events.CallState) error {
	q := c.Request
	if err := r.append(ctx, events.TypeParked, r.st.CurrentStep, "", "", events.ParkedData{Awaiting: []string{c.Call.ID}, Until: q.ExpiresAt}); err != nil {
		return err
	}
	if err := r.flush(ctx); err != nil {
		return err
	}
	r.p.putRun(ctx, r.st, r.task, journal.RunParked)
	r.log.InfoContext(ctx, "run parked", "call_id", c.Call.ID, "tool", c.Call.Tool, "kind", q.Kind, "until", q.ExpiresAt)
	return errParked
}

// expire decides a question nobody answered in time. The compare-and-set
// on the entry makes expiry and a late approval exclusive: whoever wins
// records the decision.
func (r *run) expire(ctx context.Context, c *events.CallState) error {
	if err := r.flush(ctx); err != nil {
		return err
	}
	if err := r.p.decideArrivedInTime(ctx, r.task.Tenant, r.st.RunID, c.Call.ID, c.Request.ExpiresAt); err != nil {
		return err
	}
	e, rev, err := r.p.approvals.Get(ctx, r.st.RunID, c.Call.ID)
	if err != nil {
		return err
	}
	if !e.Pending() {
		if e.Round != c.Request.Round {
			return errParked
		}
		// Decided by an approver since: record it (the handler does too;
		// the conditional append lets one of them).
		return r.recordEntry(ctx, c, e)
	}
	e.State, e.Decision, e.DecidedAt = string(approvals.Expired), approvals.Expired, r.p.now().UTC()
	if err := r.p.approvals.Decide(ctx, e, rev); err != nil {
		return err // lost to an approver: redeliver, reload, see their decision
	}
	return r.recordEntry(ctx, c, e)
}

// decideArrivedInTime decides, before a question is expired, the approval
// messages on its call's subject that reached the stream before it expired
// and that the run's trail does not record. A decision stored in time
// decides however long it waits for a handler (approvals.Policy.Received),
// and the expiry's wake-up can come first: the handler died and the message
// waits out AckWait for its redelivery, or a slow decision holds its lane.
// Each is decided as its handler would decide it (decide; the entry's
// compare-and-set and the conditional appends let one of them record it).
// One that cannot be decided now is left to its handler, and the expiry
// goes on: it is what happened before this check.
func (p *Pool) decideArrivedInTime(ctx context.Context, tenant, runID, callID string, expiresAt time.Time) error {
	subject := events.ApprovalSubject(tenant, runID, callID)
	var trail []events.Event
	for seq := uint64(1); ; {
		m, err := p.approvalMsgs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !m.Time.Before(expiresAt) {
			return nil
		}
		seq = m.Sequence + 1
		if trail == nil {
			if trail, _, err = p.journal.Load(ctx, tenant, runID); err != nil {
				return err
			}
		}
		if approved, rejected := recorded(trail, m.Sequence); approved || rejected {
			continue
		}
		p.log.InfoContext(ctx, "an approval stored before its question expired is not decided yet; deciding it first",
			"run_id", runID, "call_id", callID, "approval_seq", m.Sequence, "stored", m.Time)
		if o, reason := p.decideSafely(ctx, approvalMsg{subject: m.Subject, data: m.Data, seq: m.Sequence, received: m.Time}); o == retry || o == unavailable {
			p.log.WarnContext(ctx, "could not decide an approval before expiring its question; its handler will",
				"run_id", runID, "call_id", callID, "approval_seq", m.Sequence, "cause", reason)
		}
		trail = nil // the trail has moved on
	}
}

// recordEntry appends the decision of a decided entry as the call's
// approved event.
func (r *run) recordEntry(ctx context.Context, c *events.CallState, e approvals.Entry) error {
	err := r.append(ctx, events.TypeApproved, e.Step, c.Call.ID, c.Call.Tool, approvedData(e))
	if err == nil {
		r.p.metrics().ApprovalDecided(string(e.Decision), e.DecidedAt.Sub(e.RequestedAt))
	}
	return err
}

// approvedData is the approved event of a decided entry: whoever records
// it (the approvals handler, the run's own worker) records the same.
func approvedData(e approvals.Entry) events.ApprovedData {
	reason := e.Reason
	if e.Decision == approvals.Expired && reason == "" {
		reason = "no decision before " + e.ExpiresAt.Format(time.RFC3339)
	}
	return events.ApprovedData{
		Kind:        string(e.Kind),
		Round:       e.Round,
		Decision:    string(e.Decision),
		Approver:    e.DecidedBy,
		ArgsHash:    e.ArgsHash,
		Reason:      reason,
		ApprovalSeq: e.DecisionSeq,
	}
}

// leaseSuffix ends the schedule subject token of a lease's wake-up
// (<call_id>-lease), apart from the call's approval expiry (<call_id>).
const leaseSuffix = "-lease"

// scheduleWake asks JetStream to publish the run's wake-up at t: the
// expiry of a parked run costs a stored message, not a timer.
func (p *Pool) scheduleWake(ctx context.Context, tenant, runID, callID string, t time.Time) error {
	m := nats.NewMsg(scheduleSubject(tenant, runID, callID))
	// @at has second precision: round up so the wake-up is never early.
	at := t.UTC().Add(time.Second - time.Nanosecond).Truncate(time.Second)
	m.Header.Set("Nats-Schedule", "@at "+at.Format(time.RFC3339))
	m.Header.Set("Nats-Schedule-Target", events.ResumeSubject(tenant, runID))
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("schedule wake-up of run %s at %s: %w", runID, at, err)
	}
	return nil
}

// cancelExpiry replaces the expiry schedule of a decided question with a
// message that is no schedule and ages out a second later: the server
// forgets the schedule now, not when it would have fired, an approval TTL
// (24 h by default) later. Until then each schedule held about 500 bytes
// of server heap and a stored message, so a day of answered questions
// piled up in the server (docs/benchmarks.md, sixth round). It is sent
// without waiting for the stream's answer and may be lost: a schedule that
// stays fires, and its wake-up finds the run past the question.
func (p *Pool) cancelExpiry(tenant, runID, callID string) {
	m := nats.NewMsg(scheduleSubject(tenant, runID, callID))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(jetstream.MsgTTLHeader, "1s")
	_ = p.js.Conn().PublishMsg(m)
}

func scheduleSubject(tenant, runID, callID string) string {
	return journal.SchedulesPrefix + "." + tenant + "." + runID + "." + callID
}

// wake publishes a run's wake-up now. Its message id makes repeated
// wake-ups for one decision one message.
func (p *Pool) wake(ctx context.Context, tenant, runID, id string) error {
	_, err := p.js.Publish(ctx, events.ResumeSubject(tenant, runID), nil, jetstream.WithMsgID(id))
	if err != nil {
		return fmt.Errorf("wake run %s: %w", runID, err)
	}
	return nil
}

// redactedArgs are the arguments as approvers may see them.
func (r *run) redactedArgs(args []byte) []byte {
	out, _ := r.p.redactor.JSON(args)
	return out
}
