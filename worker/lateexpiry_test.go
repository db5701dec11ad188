package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// An approval that reaches the stream after its question expired, the
// expiry having decided it, is refused as expired: once its run has
// finished, and while the run goes on (here parked on a later question).
// It used to be not_pending ("the run has finished"), as though someone
// had decided the question.
func TestALateApprovalAfterTheExpiryIsExpiredOnceTheRunHasFinished(t *testing.T) {
	t.Parallel()
	b, ran := expiringWrite(t)
	runID := b.submit(task("late-expired-1", "expiring"))
	evs := b.waitEnd(runID)
	q := last[events.ApprovalRequestedData](t, evs, events.TypeApprovalRequested)
	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "late")
	class, detail := b.outcomeOf(runID, seq)
	want := approvals.ExpiredDetail(q.ExpiresAt) + "; the run has finished (done)"
	if class != approvals.RejectExpired || detail != want {
		t.Fatalf("late approval: %s (%q), want %s (%q)", class, detail, approvals.RejectExpired, want)
	}
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	checkEnvelopes(t, runID, evs)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(slow_approver)", "approval_requested(slow_approver)", "parked",
		"approved:expired(slow_approver)", "observed(slow_approver)", "proposed:final", "finished:done",
		"approval_rejected:expired", // on call s1c1, of a decision the run has moved past
	})
	if d := last[events.ApprovalRejectedData](t, evs, events.TypeApprovalRejected); d.ApprovalSeq != seq || d.Approver != "supervisor@cityops" || d.Decision != "approve" {
		t.Errorf("approval_rejected = %+v, want approvals seq %d by supervisor@cityops, approve", d, seq)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the expired write ran %d times", n)
	}
}

func TestALateApprovalAfterTheExpiryIsExpiredWhileTheRunGoesOn(t *testing.T) {
	t.Parallel()
	brief := fakeTool("slow_approver", tools.Write, false)
	brief.ApprovalTTL = events.Duration(time.Second)
	patient := fakeTool("patient_write", tools.Write, false)
	patient.ApprovalTTL = events.Duration(time.Hour)
	var ranBrief, ranPatient atomic.Int32
	b := setup(t, options{
		tools: []tools.Manifest{brief, patient},
		builtins: tools.Builtins{
			"slow_approver": func(context.Context, tools.Call) (any, error) { ranBrief.Add(1); return "ok", nil },
			"patient_write": func(context.Context, tools.Call) (any, error) { ranPatient.Add(1); return "ok", nil },
		},
		roles: map[string]config.Role{
			"operator":   {Call: []string{"slow_approver", "patient_write"}},
			"supervisor": {Approve: []string{"slow_approver", "patient_write"}},
		},
		agents: map[string]config.Profile{"two-writes": profile("slow_approver", "patient_write")},
		scripts: map[string]model.Model{"two-writes": scripted(t,
			`{"tool_calls":[{"tool":"slow_approver","args":{"n":1}}]}`,
			`{"tool_calls":[{"tool":"patient_write","args":{"n":2}}]}`,
			`{"final_answer":{"summary":"one write expired, one approved"}}`)},
	})
	runID := b.submit(task("late-expired-2", "two-writes"))
	b.waitType(runID, events.TypeParked, 2) // on patient_write, s1c1 expired
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	var first, second events.ApprovalRequestedData
	for _, e := range all(evs, events.TypeApprovalRequested) {
		switch e.CallID {
		case "s1c1":
			_ = e.Decode(&first)
		case "s2c1":
			_ = e.Decode(&second)
		}
	}
	seq := b.publishApproval(runID, "s1c1", first.ArgsHash, "approve", "supervisor@cityops", "late")
	if class, detail := b.outcomeOf(runID, seq); class != approvals.RejectExpired || detail != approvals.ExpiredDetail(first.ExpiresAt) {
		t.Fatalf("late approval while the run is parked on another question: %s (%q), want %s", class, detail, approvals.RejectExpired)
	}
	if c, d := b.outcomeOf(runID, b.publishApproval(runID, "s2c1", second.ArgsHash, "approve", "supervisor@cityops", "ok")); c != "approved" {
		t.Fatalf("the pending question's approval: %s (%s)", c, d)
	}
	assertTrail(t, b.waitEnd(runID), []string{
		"started", "proposed", "validated:ok(slow_approver)", "approval_requested(slow_approver)", "parked",
		"approved:expired(slow_approver)", "observed(slow_approver)",
		"proposed", "validated:ok(patient_write)", "approval_requested(patient_write)", "parked",
		"approval_rejected:expired", "approved:approve(patient_write)",
		"executing(patient_write)", "executed:ok(patient_write)", "observed(patient_write)",
		"proposed:final", "finished:done",
	})
	if ranBrief.Load() != 0 || ranPatient.Load() != 1 {
		t.Errorf("slow_approver ran %d times (want 0: it expired), patient_write %d (want 1)", ranBrief.Load(), ranPatient.Load())
	}
}
