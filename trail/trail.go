// Package trail checks a run's events as LOOPGATE_EVENTS holds them
// against the wire contract and the rules that make a crash harmless: seq
// gapless from 1, unique UUID v7 event ids, each event on its run's
// subject for its type with Nats-Msg-Id <run_id>/<seq>, started (or
// rejected, or a security record, each alone) first, one finished last,
// the events folding into a state, each end of a write closing an attempt
// its executing event began, and no call taking effect twice.
//
// A Check reads one run's events one at a time, in stream order, so a
// follower can check thousands of runs while they happen without keeping
// their events (loopgate bench); make soak checks its runs with it too.
package trail

import (
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// Stored is one event as the stream holds it.
type Stored struct {
	events.Event
	StreamSeq uint64
	Subject   string
	MsgID     string // the Nats-Msg-Id header
}

// Call is what the events say about one call's attempts.
type Call struct {
	CallID string
	Tool   string
	// OperationID is the one the call's latest executing event names.
	OperationID string
	Executing   int // attempts begun (write-ahead records)
	FreshOK     int // executed ok by running the tool
	ReusedOK    int // executed ok from the recorded result: the tool did not run
	Unknown     int // executed unknown: an attempt's end was lost
	NotRun      int // executed transient deadline_passed: the tool never started
	// Other lists the other statuses the call's attempts ended with.
	Other             []string
	ReconciledApplied int // a reconcile found a lost attempt's effect
	ReconciledNot     int // a reconcile found none
	Approved          int // approvals decided approve
	Observed          int
	// Write: the call's tool is a write (its validated event says so).
	Write bool
	// Idempotent: the write's tool dedupes by operation id (its validated
	// event says so), so an attempt whose outcome was lost may be run again.
	Idempotent bool
	// unsettled: an attempt of the write began and nothing has said yet
	// whether it took effect.
	unsettled bool
	// fences: reconciles that fenced the call's operation id; its next
	// attempt names events.FencedOperationID's.
	fences int
	// open: the attempts begun (executing) and not yet ended (executed),
	// each with the operation id its executing event names.
	open map[int]string
}

// TookEffect is how many times the events show the call's tool taking
// effect: a fresh ok, or a reconcile that found a lost attempt's effect.
func (c *Call) TookEffect() int { return c.FreshOK + c.ReconciledApplied }

// Check checks one run's events as they come. The zero value is not
// usable; use New.
type Check struct {
	tenant, runID string
	state         *events.RunState
	n             int    // events added
	last          uint64 // the highest seq added
	broken        bool   // seq went wrong: the state no longer folds
	ids           map[string]bool
	end           events.Type // rejected, security or finished, once seen
	reason        events.Reason
	detail        string
	calls         map[string]*Call
	problems      []string
}

// New starts the check of run runID of tenant.
func New(tenant, runID string) *Check {
	empty, _ := events.Fold(nil) // a state with its maps made; no event, no error
	return &Check{tenant: tenant, runID: runID, state: empty, ids: map[string]bool{}, calls: map[string]*Call{}}
}

func (c *Check) bad(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// Add checks the run's next event in stream order.
func (c *Check) Add(e Stored) {
	c.n++
	dup := e.Seq <= c.last
	switch {
	case e.Seq == c.last+1:
	case dup:
		c.broken = true
		c.bad("event seq %d (stream seq %d, %s) again after seq %d: a duplicate", e.Seq, e.StreamSeq, e.Type, c.last)
	default:
		c.broken = true
		c.bad("event seq %d (stream seq %d, %s) follows seq %d: a gap", e.Seq, e.StreamSeq, e.Type, c.last)
	}
	c.last = max(c.last, e.Seq)
	if e.RunID != c.runID || e.Tenant != c.tenant {
		c.bad("event %d belongs to %s/%s", e.Seq, e.Tenant, e.RunID)
	}
	if !uuidV7(e.EventID) || c.ids[e.EventID] {
		c.bad("event %d has event id %q: want a UUID v7 used once", e.Seq, e.EventID)
	}
	c.ids[e.EventID] = true
	if s := events.EventSubject(c.tenant, c.runID, e.Type); e.Subject != s {
		c.bad("event %d stored on %s, want %s", e.Seq, e.Subject, s)
	}
	if id := fmt.Sprintf("%s/%d", c.runID, e.Seq); e.MsgID != id {
		c.bad("event %d has Nats-Msg-Id %q, want %q", e.Seq, e.MsgID, id)
	}
	if dup {
		return // named above; counting it again would name it twice more
	}
	switch {
	case c.end != "" && (e.Type == events.TypeApprovalRejected || e.Type == events.TypeCancelRejected):
		// An answer or a cancel that came after the run's end (a second
		// approver, a double click, a replay) is recorded where its sender
		// looks, and changes nothing.
	case c.end != "":
		c.bad("event %d (%s) follows the run's %s event", e.Seq, e.Type, c.end)
	case c.n == 1 && e.Type != events.TypeStarted && e.Type != events.TypeRejected && e.Type != events.TypeSecurity:
		c.bad("first event is %s, not started", e.Type)
	case c.n > 1 && (e.Type == events.TypeStarted || e.Type == events.TypeRejected || e.Type == events.TypeSecurity) && !c.broken:
		c.bad("event %d is a second beginning (%s)", e.Seq, e.Type)
	}
	if c.end == "" && (e.Type == events.TypeRejected || e.Type == events.TypeSecurity || e.Type == events.TypeFinished) {
		c.end = e.Type
		if e.Type == events.TypeFinished {
			var d events.FinishedData
			if err := e.Decode(&d); err != nil {
				c.bad("finished event does not decode: %v", err)
			}
			c.reason, c.detail = d.Reason, d.Detail
		}
	}
	if !c.broken { // past a gap, a duplicate or a bad event every Apply would fail again
		if err := c.state.Apply(&e.Event); err != nil {
			c.broken = true
			c.bad("event %d does not fold: %v", e.Seq, err)
		}
	}
	c.call(e)
}

// call counts what e says about its call.
func (c *Check) call(e Stored) {
	if e.CallID == "" {
		return
	}
	call := c.calls[e.CallID]
	if call == nil {
		call = &Call{CallID: e.CallID, Tool: e.Tool}
		c.calls[e.CallID] = call
	}
	decode := func(v any) bool {
		if err := e.Decode(v); err != nil {
			c.bad("%s event %d of call %s does not decode: %v", e.Type, e.Seq, e.CallID, err)
			return false
		}
		return true
	}
	switch e.Type {
	case events.TypeValidated:
		var d events.ValidatedData
		if decode(&d) && d.Permission == string(tools.Write) {
			call.Write = true
			call.Idempotent = d.Idempotent
		}
	case events.TypeExecuting:
		var d events.ExecutingData
		if !decode(&d) {
			return
		}
		if want := events.FencedOperationID(c.runID, e.CallID, call.fences); d.OperationID != want {
			c.bad("executing %s names operation %s, want %s", e.CallID, d.OperationID, want)
		}
		call.OperationID = d.OperationID
		call.Executing++
		// A write is begun again only once something settled whether the
		// attempt before took effect: its executed event (other than
		// unknown or timeout, unless the tool is idempotent: it dedupes by
		// operation id), a reconcile, or a human's answer to the question.
		if call.Write && call.unsettled {
			c.bad("write %s (%s): attempt %d (event %d) began while an earlier attempt's outcome was unknown", e.CallID, call.Tool, d.Attempt, e.Seq)
		}
		call.unsettled = true
		if call.open == nil {
			call.open = map[int]string{}
		}
		call.open[d.Attempt] = d.OperationID
	case events.TypeExecuted:
		var d events.ExecutedData
		if !decode(&d) {
			return
		}
		// A write runs only once its executing event is stored: a crash
		// inside the tool then leaves an attempt begun and not ended, an
		// unknown outcome, not a write nobody knows of, which a resume
		// would run again. So each of its ends closes an attempt its own
		// executing began, of the same operation. Two ends have no
		// attempt: a dry run's preview, and a call whose arguments a crash
		// lost before it ran (args_lost).
		op, begun := call.open[d.Attempt]
		delete(call.open, d.Attempt)
		if call.Write && d.Status != events.ExecDryRun && d.Status != events.ExecArgsLost && (!begun || op != d.OperationID) {
			c.bad("write %s (%s): executed event %d (attempt %d, operation %s, %s) ends no attempt its executing event began: the tool ran with nothing on record",
				e.CallID, call.Tool, e.Seq, d.Attempt, d.OperationID, d.Status)
		}
		// A timeout (a lost connection too) is an unknown outcome, as
		// unknown is: the write may have taken effect.
		call.unsettled = (d.Status == events.ExecUnknown || d.Status == events.ExecTimeout) && !call.Idempotent
		switch {
		case d.Status == events.ExecOK && d.Message == events.RecordedResultReused:
			call.ReusedOK++
		case d.Status == events.ExecOK:
			call.FreshOK++
		case d.Status == events.ExecUnknown:
			call.Unknown++
		case d.Status == events.ExecTransient && d.ErrorClass == events.DeadlinePassed:
			call.NotRun++
		default:
			call.Other = append(call.Other, d.Status)
		}
	case events.TypeReconciled:
		var d events.ReconciledData
		if !decode(&d) {
			return
		}
		call.unsettled = false
		if d.Fenced && !d.Applied {
			call.fences++ // the next attempt runs under a successor id
		}
		if d.Applied {
			call.ReconciledApplied++
		} else {
			call.ReconciledNot++
		}
	case events.TypeApproved:
		var d events.ApprovedData
		if !decode(&d) {
			return
		}
		switch {
		case d.Kind == string(approvals.KindNeedsHuman):
			call.unsettled = false // a human answered for the unknown outcome
		case d.Decision == string(approvals.Approve):
			call.Approved++
		}
	case events.TypeObserved:
		call.Observed++
	}
}

// Verdict is what the check found.
type Verdict struct {
	RunID  string
	Events int
	// End is finished or rejected; empty while the run goes on.
	End    events.Type
	Reason events.Reason // when finished
	Detail string
	// Parked: the run's last event says it waits for a human.
	Parked   bool
	Calls    map[string]*Call
	Problems []string
}

// Finished reports whether the run reached its end (finished or rejected).
func (v Verdict) Finished() bool { return v.End != "" }

// Verdict returns what the events added so far say. A call that took
// effect more than once is a problem.
func (c *Check) Verdict() Verdict {
	v := Verdict{RunID: c.runID, Events: c.n, End: c.end, Reason: c.reason, Detail: c.detail,
		Parked: c.state.IsParked, Calls: c.calls, Problems: slices.Clone(c.problems)}
	for _, id := range slices.Sorted(maps.Keys(c.calls)) {
		if call := c.calls[id]; call.TookEffect() > 1 {
			v.Problems = append(v.Problems, fmt.Sprintf("call %s (%s, operation %s) took effect %d times (ran ok %d, found applied by a reconcile %d)",
				id, call.Tool, call.OperationID, call.TookEffect(), call.FreshOK, call.ReconciledApplied))
		}
	}
	return v
}

// uuidV7 reports whether s is a UUID of version 7 in its canonical text
// form (uuid.Parse also takes URN, braced and unhyphenated forms).
func uuidV7(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && len(s) == 36 && u.Version() == 7
}
