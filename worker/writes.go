package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/idempotency"
	"github.com/loopgate/loopgate/tools"
)

// runWrite runs one attempt of a write at most once per operation id. The
// idempotency record is claimed by an atomic create bound to the arguments'
// hash; an operation already completed returns its recorded result without
// running the tool, one bound to other arguments is a conflict, and one
// whose earlier attempt may have taken effect is not re-run unless a.rerun
// (the tool is idempotent, reconcile said it did not happen, or a human
// said retry).
func (r *run) runWrite(ctx context.Context, a *attempt) (events.ExecutedData, error) {
	rec := idempotency.Record{
		OperationID: a.ex.OperationID,
		ArgsHash:    a.c.Validated.ArgsHash,
		RunID:       r.st.RunID,
		CallID:      a.c.Call.ID,
		Tool:        a.c.Call.Tool,
		Attempt:     a.ex.Attempt,
		Updated:     r.p.now().UTC(),
	}
	out := events.ExecutedData{OperationID: a.ex.OperationID, Attempt: a.ex.Attempt}
	if late, ok := r.pastDeadline(ctx, a); ok {
		// Not even the record is touched: by now another worker may own
		// the call and have written it in a later attempt's name.
		return late, nil
	}
	r.p.crash("before:claim")
	prior, rev, fresh, err := r.p.idem.Claim(ctx, rec)
	switch {
	case errors.Is(err, idempotency.ErrConflict):
		out.Status, out.ErrorClass = events.ExecConflict, "conflict"
		out.Message = fmt.Sprintf("operation id %s is bound to arguments %s, not %s; not executed", rec.OperationID, prior.ArgsHash, rec.ArgsHash)
		r.log.WarnContext(ctx, "idempotency conflict; call not executed", "operation_id", rec.OperationID, "call_id", rec.CallID)
		return out, nil
	case err != nil:
		return out, err
	case !fresh && prior.Attempt > a.ex.Attempt:
		// A later attempt owns the operation: this one's lease ran out
		// (its worker was frozen past it, between the deadline check above
		// and the claim) and another worker took the call over. Writing this
		// attempt over that record would make a crash of the live attempt
		// read as "never started" (lostAttempt), and the write run twice.
		r.log.WarnContext(ctx, "a later attempt owns the operation; this attempt's tool not run",
			"operation_id", rec.OperationID, "attempt", a.ex.Attempt, "record_attempt", prior.Attempt, "record_state", prior.State)
		out.Status, out.ErrorClass = events.ExecTransient, events.DeadlinePassed
		out.Message = fmt.Sprintf("attempt %d of the operation began after this one; this attempt's tool was not run", prior.Attempt)
		return out, nil
	case !fresh:
		switch prior.State {
		case idempotency.Completed:
			out.Status, out.Result, out.ResultBytes = events.ExecOK, prior.Result, prior.ResultBytes
			out.Message = events.RecordedResultReused
			return out, nil
		case idempotency.Abandoned:
			out.Status, out.ErrorClass, out.Message = events.ExecUnknown, "unknown_outcome", "the operation was abandoned by a human"
			return out, nil
		case idempotency.InFlight, idempotency.Unknown, idempotency.Failed:
			if !a.rerun {
				out.Status, out.ErrorClass = events.ExecUnknown, "unknown_outcome"
				out.Message = fmt.Sprintf("attempt %d may have taken effect (record: %s); not re-run without reconciliation", prior.Attempt, prior.State)
				return out, nil
			}
		}
		rec.State = idempotency.InFlight
		if rev, err = r.p.idem.Set(ctx, rec, rev); err != nil {
			return out, err
		}
	}
	r.p.crash("before:side_effect")
	out, err = r.invoke(ctx, a)
	if err != nil {
		return out, err // stopping: the record stays in flight, an unknown outcome for whoever resumes
	}
	r.p.crash("after:side_effect")
	switch out.Status {
	case events.ExecOK:
		rec.State, rec.Result, rec.ResultBytes = idempotency.Completed, out.Result, out.ResultBytes
	case events.ExecTimeout:
		rec.State = idempotency.Unknown
	case events.ExecTransient:
		rec.State = idempotency.Retryable
	default:
		rec.State = idempotency.Failed
	}
	rec.Updated = r.p.now().UTC()
	r.recordOutcome(ctx, rec, rev)
	r.p.crash("after:idempotency_record")
	return out, nil
}

// lostAttempt says how an attempt whose end was never recorded ended, as
// far as anyone can tell: its worker died, or gave the attempt up when
// JetStream did not answer (a claim that timed out may have been stored). A read's end is unknown (it is
// run again). A write's is what its idempotency record says: runWrite
// writes the record in this attempt's name before it starts the tool, so
// without one the tool never started.
func (r *run) lostAttempt(ctx context.Context, m tools.Manifest, lost events.ExecutingData) (events.ExecutedData, error) {
	out := events.ExecutedData{OperationID: lost.OperationID, Attempt: lost.Attempt}
	ended := func(status, class, msg string) (events.ExecutedData, error) {
		out.Status, out.ErrorClass, out.Message = status, class, msg
		return out, nil
	}
	if m.Permission != tools.Write {
		return ended(events.ExecUnknown, "unknown_outcome", "this attempt's end was not recorded (its worker stopped, or JetStream did not answer it); the read is run again")
	}
	rec, _, err := r.p.idem.Get(ctx, lost.OperationID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && rec.Attempt < lost.Attempt):
		return ended(events.ExecTransient, events.DeadlinePassed,
			fmt.Sprintf("attempt %d was given up before its tool started (its worker stopped, or JetStream did not answer it: the operation record never named the attempt); the tool was not run", lost.Attempt))
	case err != nil:
		return out, err
	case rec.ArgsHash != lost.ArgsHash:
		r.log.WarnContext(ctx, "idempotency conflict; call not executed", "operation_id", lost.OperationID, "call_id", rec.CallID)
		return ended(events.ExecConflict, "conflict",
			fmt.Sprintf("operation id %s is bound to arguments %s, not %s; not executed", lost.OperationID, rec.ArgsHash, lost.ArgsHash))
	}
	switch rec.State {
	case idempotency.Completed:
		out.Result, out.ResultBytes = rec.Result, rec.ResultBytes
		return ended(events.ExecOK, "", events.RecordedResultReused)
	case idempotency.Retryable:
		return ended(events.ExecTransient, "transient", "the tool failed transiently (the operation record says so); its end was not recorded")
	case idempotency.Abandoned:
		return ended(events.ExecUnknown, "unknown_outcome", "the operation was abandoned by a human")
	}
	return ended(events.ExecUnknown, "unknown_outcome",
		fmt.Sprintf("attempt %d may have taken effect (record: %s); its end was not recorded (its worker stopped, or JetStream did not answer it); not re-run without reconciliation", lost.Attempt, rec.State))
}

// settleByHuman writes a human's answer to a write's unknown outcome into
// its operation record, before the call is observed: mark_done completes
// it, abandon abandons it. The record used to stay in flight or unknown
// for ever, so an operator looking in loopgate_idempotency for operations
// nobody settled found ones a human had. Best effort, as recordOutcome:
// the approved event is the truth, and a run resumed before its observed
// event writes the record again (an unchanged record is not rewritten).
func (r *run) settleByHuman(ctx context.Context, c *events.CallState) {
	d, x := c.Decision, c.LastExecuted()
	if d == nil || d.Kind != string(approvals.KindNeedsHuman) || x == nil || x.OperationID == "" {
		return
	}
	state := map[approvals.Decision]idempotency.State{
		approvals.MarkDone: idempotency.Completed,
		approvals.Abandon:  idempotency.Abandoned,
	}[approvals.Decision(d.Decision)]
	if state == "" {
		return
	}
	rec, rev, err := r.p.idem.Get(ctx, x.OperationID)
	switch {
	case err != nil:
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			r.log.WarnContext(ctx, "operation record not read; the human's decision is in the approved event only", "operation_id", x.OperationID, "err", err)
		}
		return
	case rec.RunID != r.st.RunID || rec.State == state:
		return
	}
	rec.State, rec.Updated = state, r.p.now().UTC()
	r.recordOutcome(ctx, rec, rev)
}

// outcomePatience is how long a worker keeps trying to record an
// operation's outcome while JetStream does not answer: a few times the
// longest a cluster takes to elect new leaders after losing a server
// (4 to 9 s), each try bounded by the client's request timeout.
const outcomePatience = 30 * time.Second

// recordOutcome writes the outcome of an attempt that ran (rec) over the
// in-flight record at rev. It tries again while JetStream does not
// answer (up to outcomePatience), and takes a revision mismatch for success when the record
// already holds this outcome (an earlier try stored it, its answer lost).
// If it still fails, the tool ran all the same: the executed event that
// follows is the truth, and without the record only a crash before that
// event could make the outcome unknown. (make soak's random kills found
// records left in flight when a server died during the write.)
func (r *run) recordOutcome(ctx context.Context, rec idempotency.Record, rev uint64) {
	deadline := time.Now().Add(outcomePatience) // wall time: the pool's clock may be a test's
	for try := 1; ; try++ {
		_, err := r.p.idem.Set(ctx, rec, rev)
		if err == nil {
			return
		}
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			cur, curRev, gerr := r.p.idem.Get(ctx, rec.OperationID)
			switch {
			case gerr == nil && cur.State == rec.State && cur.Attempt == rec.Attempt && cur.RunID == rec.RunID:
				return
			case gerr == nil && curRev == rev:
				// The record is still the one this attempt claimed: the
				// mismatch was the server's, not another writer's (a
				// stream leader just elected refusing the write against
				// state it had not caught up with yet). Try again.
				err = fmt.Errorf("record at revision %d refused as changed: %w", rev, err)
			case gerr != nil:
				// Refused as changed, and not readable back: the cluster
				// is still electing. The refusal may be this attempt's own
				// earlier try, stored with its answer lost; only a read
				// tells. Try again. (Giving up here left a completed
				// write's record in flight: make test, a failover with two
				// of three servers down; the warning said the read failed
				// with 503.)
				err = fmt.Errorf("record at revision %d refused as changed, and not readable back (%w): %w", rev, gerr, err)
			default:
				r.log.WarnContext(ctx, "operation record changed under this attempt; outcome not recorded there",
					"operation_id", rec.OperationID, "state", rec.State, "revision", rev,
					"record_state", cur.State, "record_revision", curRev, "err", gerr)
				return
			}
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			r.log.WarnContext(ctx, "record operation outcome", "operation_id", rec.OperationID, "state", rec.State, "tries", try, "err", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(try)*250*time.Millisecond, 2*time.Second)):
		}
	}
}

// reconcile asks the tool's reconcile tool whether the call's last attempt
// took effect, and records the answer.
//
// A check whose manifest says reconcile_fences is asked at once, with
// {"operation_id": ..., "fence": true}: its "not applied" must come with
// "fenced": true, the operation id abandoned in the backend, and then a
// new attempt is safe. Any other check is asked only once the attempt's
// deadline plus the tool's max_effect_delay has passed, when a late effect
// of the attempt would have landed; until then the run waits as for a
// lease (a busyError: the message is settled and a wake-up scheduled), no
// worker held.
func (r *run) reconcile(ctx context.Context, c *events.CallState) error {
	if err := r.flush(ctx); err != nil {
		return err
	}
	m := r.manifest(c.Call.Tool)
	opID := attemptOperationID(r.st.RunID, c)
	d := events.ReconciledData{OperationID: opID, Attempt: c.Attempts(), Via: m.Reconcile}
	if !m.ReconcileFences && len(c.Executing) > 0 {
		until := c.Executing[len(c.Executing)-1].Deadline.Add(m.MaxEffectDelay.D())
		if r.p.now().Before(until) {
			r.log.InfoContext(ctx, "waiting out the tool's max_effect_delay before its reconcile check: the attempt may still land",
				"call_id", c.Call.ID, "tool", c.Call.Tool, "max_effect_delay", m.MaxEffectDelay.D(), "until", until)
			return &busyError{callID: c.Call.ID, until: until}
		}
		d.MaxEffectDelay = m.MaxEffectDelay
	}
	rt, ok := r.p.registry.Lookup(m.Reconcile)
	if !ok {
		d.Error = "reconcile tool is not registered"
	} else {
		req := map[string]any{"operation_id": opID}
		if m.ReconcileFences {
			req["fence"] = true
		}
		args, _ := json.Marshal(req)
		// The check is a tool call like any other: held to its timeout and
		// to the run's active time.
		cctx, cancel := context.WithDeadline(ctx, callDeadline(r.p.now(), r.deadline, rt.Manifest().Timeout.D()))
		b, err := callTool(cctx, rt.Func(), tools.Call{
			Tool: m.Reconcile, OperationID: opID, RunID: r.st.RunID, CallID: c.Call.ID,
			Tenant: r.task.Tenant, Principal: r.task.Principal.ID, Args: args,
		})
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var answer struct {
			Applied *bool           `json:"applied"`
			Fenced  bool            `json:"fenced"`
			Result  json.RawMessage `json:"result"`
		}
		switch {
		case err != nil:
			d.Error = "reconcile failed"
			r.log.WarnContext(ctx, "reconcile failed", "tool", m.Reconcile, "operation_id", opID, "err", r.p.redactString(err.Error()))
		case json.Unmarshal(b, &answer) != nil || answer.Applied == nil:
			d.Error = `reconcile answer is not {"applied": bool, "result": ...}`
		default:
			// Kept as an executed result is: the event, and the operation
			// record it completes, must fit in a message.
			d.Applied = *answer.Applied
			if len(answer.Result) > 0 {
				d.Result, d.ResultBytes = r.recordable(answer.Result)
			}
			d.Fenced = m.ReconcileFences && !d.Applied && answer.Fenced
		}
	}
	d.Why = reconciledWhy(m, d)
	state := idempotency.State("")
	switch {
	case d.Applied:
		state = idempotency.Completed
	case d.Fenced:
		state = idempotency.Abandoned
	}
	if state != "" {
		if rec, rev, err := r.p.idem.Get(ctx, opID); err == nil {
			rec.State, rec.Updated = state, r.p.now().UTC()
			if d.Applied {
				rec.Result, rec.ResultBytes = d.Result, d.ResultBytes
			}
			r.recordOutcome(ctx, rec, rev)
		}
	}
	return r.append(ctx, events.TypeReconciled, r.st.CurrentStep, c.Call.ID, c.Call.Tool, d)
}

// reconciledWhy says, for the trail and whoever reads it, what a reconcile
// answer settles and on what grounds.
func reconciledWhy(m tools.Manifest, d events.ReconciledData) string {
	waited := "asked right after the attempt's deadline"
	if d.MaxEffectDelay > 0 {
		waited = fmt.Sprintf("asked %s after the attempt's deadline, its max_effect_delay", d.MaxEffectDelay.D())
	}
	switch {
	case d.Error != "":
		return "the check gave no answer: a human decides"
	case d.Applied && m.ReconcileFences:
		return "applied"
	case d.Applied:
		return "applied (" + waited + ")"
	case d.Fenced:
		return "not applied, fenced: the operation id is abandoned in the backend and a late attempt cannot land; a new attempt under an operation id of its own is safe"
	case m.ReconcileFences:
		return "not applied, but the check did not confirm the fence: a late attempt may still land, so a human decides"
	}
	return "not applied (" + waited + "), but the check cannot fence: a late effect is still possible, so a human decides"
}
