package worker

import (
	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// action is what a call needs next. nextAction derives it from the call's
// events alone, so a worker that resumes a run after a crash, an approval
// or an expiry does exactly what the run was about to do.
type action int

const (
	actObserve         action = iota // nothing more will run: observe it
	actWait                          // a human decides: park
	actRequestApproval               // a gated call: ask for approval of its exact arguments
	actRequestHuman                  // a write's outcome is unknown: ask a human
	actExecute                       // first attempt (or a dry-run preview)
	actRetry                         // another attempt, allowed by policy or by a human
	actResume                        // an attempt began and its end was never recorded
	actReconcile                     // ask the reconcile tool whether an unknown outcome took effect
	actStop                          // a denial that stops the run
)

var actionNames = [...]string{"observe", "wait", "request_approval", "request_human", "execute", "retry", "resume", "reconcile", "stop"}

func (a action) String() string { return actionNames[a] }

// nextAction is the write path's state machine for one call.
//
// tainted says the run's context holds flagged or untrusted tool output
// (run.writeGated): then every write is gated, whatever its manifest says.
func nextAction(c *events.CallState, m tools.Manifest, dryRun, tainted bool) action {
	if c.Validated == nil || c.Validated.Status != events.ValidOK || c.Denied != nil {
		return actObserve
	}
	if c.Awaiting() {
		return actWait
	}
	write := m.Permission == tools.Write
	if c.Attempts() == 0 && len(c.Executed) == 0 {
		// Dry run previews writes without approval: a preview is not consent.
		if (m.NeedsApproval() || (tainted && write)) && !(dryRun && write) {
			switch {
			case c.Decision == nil:
				return actRequestApproval
			case c.Decision.Decision == string(approvals.Approve):
				return actExecute
			case m.OnDeny == tools.OnDenyStop:
				return actStop
			default:
				return actObserve // denied or expired: the model hears it
			}
		}
		return actExecute
	}
	if c.InFlight() {
		return actResume
	}
	last := c.LastExecuted()
	switch last.Status {
	case events.ExecTransient:
		if n := notRun(c); c.Attempts()-n < maxAttempts && n < maxNotRun {
			return actRetry
		}
	case events.ExecTimeout, events.ExecUnknown:
		// Attempts whose tool never started do not use up the retry,
		// here as after a transient failure: a kill before the claim and
		// another after it must not stop "not applied" from running the
		// write again.
		ran := c.Attempts() - notRun(c)
		if !write {
			if last.Status == events.ExecUnknown && ran < maxAttempts {
				return actRetry // a read whose worker died: reads are safe to run again
			}
			return actObserve // a read's timeout is reported, not chased
		}
		if r := c.Request; r != nil && r.Kind == string(approvals.KindNeedsHuman) && r.Attempt == c.Attempts() && c.Decision != nil {
			if c.Decision.Decision == string(approvals.Retry) {
				return actRetry
			}
			return actObserve // mark_done or abandon
		}
		if m.Idempotent && ran < maxAttempts {
			return actRetry // the tool dedupes by operation id
		}
		if m.Reconcile != "" {
			rec := reconciledFor(c, c.Attempts())
			switch {
			case rec == nil:
				// A check that cannot fence waits out max_effect_delay
				// first (see reconcile).
				return actReconcile
			case rec.Applied:
				return actObserve
			case rec.Error == "" && rec.Fenced && ran < maxAttempts:
				// Fenced: the attempt can no longer land, so a new one
				// (under an operation id of its own) is safe.
				return actRetry
			}
			// Not applied by a check that cannot fence: true only of the
			// moment it answered. A write that does not dedupe is never
			// run again on it; a human decides.
		}
		return actRequestHuman
	}
	return actObserve
}

// maxNotRun bounds the attempts of one call whose tool never started:
// their worker died, froze or starved before it (deadline_passed). They
// do not use up maxAttempts, which bounds what the tool itself did, so a
// worker's crash does not change what the run does; this keeps a call
// from being begun for ever.
const maxNotRun = 3

// notRun counts the call's attempts whose tool never started.
func notRun(c *events.CallState) int {
	n := 0
	for _, x := range c.Executed {
		if x.Status == events.ExecTransient && x.ErrorClass == events.DeadlinePassed {
			n++
		}
	}
	return n
}

// reconciledFor returns the reconcile answer about the given attempt.
func reconciledFor(c *events.CallState, attempt int) *events.ReconciledData {
	for i := len(c.Reconciled) - 1; i >= 0; i-- {
		if c.Reconciled[i].Attempt == attempt {
			return &c.Reconciled[i]
		}
	}
	return nil
}

// fences counts the call's reconcile answers that fenced an operation id.
func fences(c *events.CallState) int {
	n := 0
	for _, r := range c.Reconciled {
		if r.Fenced && !r.Applied {
			n++
		}
	}
	return n
}

// operationID is the operation id of the call's next attempt: the call's
// own, or a successor once reconcile checks fenced it (see
// events.FencedOperationID).
func operationID(runID string, c *events.CallState) string {
	return events.FencedOperationID(runID, c.Call.ID, fences(c))
}

// attemptOperationID is the operation id of the call's latest attempt, or
// of its next one when none began.
func attemptOperationID(runID string, c *events.CallState) string {
	if n := len(c.Executing); n > 0 {
		return c.Executing[n-1].OperationID
	}
	return operationID(runID, c)
}
