package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
)

// policy.approvers.<id>.tenants: an approver whose tenants do not include
// the run's decides nothing there, whatever its roles and signature (NATS
// permissions were the only fence: a signed approval from a supervisor of
// one tenant decided another tenant's write wherever its sender could
// publish); the refusal is not_authorized, naming the setting, and the
// entry stays pending for an approver who may decide it.
func TestAnApproverOfOtherTenantsDecidesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	b.stopPool()
	sup := b.cfg.Policy.Approvers["supervisor@cityops"]
	sup.Tenants = []string{"elsewhere"}
	b.cfg.Policy.Approvers["supervisor@cityops"] = sup
	dev := b.cfg.Policy.Approvers["dev@cityops"]
	dev.Tenants = []string{"elsewhere", "cityops"}
	b.cfg.Policy.Approvers["dev@cityops"] = dev
	b.startPool()

	tk := task("approver-tenants-1", "one-draft")
	tk.Principal.ID = "ops@cityops" // not dev@cityops, who approves below
	runID := b.submit(tk)
	b.waitType(runID, events.TypeParked, 1)
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	m := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", exampleKey(t, "supervisor@cityops"), time.Now())
	c, d := b.outcomeOf(runID, b.publishMessage(m, runID, "s1c1"))
	if c != approvals.RejectNotAllowed || !strings.Contains(d, "tenant cityops: not among the approver's tenants in policy.approvers") {
		t.Fatalf("a supervisor of another tenant approving: %s (%s); want %s naming the setting", c, d, approvals.RejectNotAllowed)
	}
	if e := pendingEntry(t, b, runID, "s1c1"); !e.Pending() {
		t.Fatalf("the refused approval decided the entry: %+v", e)
	}
	m = signedApproval(t, runID, "s1c1", q, "dev@cityops", exampleKey(t, "dev@cityops"), time.Now())
	if c, d := b.outcomeOf(runID, b.publishMessage(m, runID, "s1c1")); c != "approved" {
		t.Fatalf("an approver whose tenants include the run's: %s (%s)", c, d)
	}
	assertTrail(t, b.waitEnd(runID), concat([]string{"started", "proposed", "validated:ok(draft_escalation)",
		"approval_requested(draft_escalation)", "parked", "approval_rejected:not_authorized(draft_escalation)", "approved:approve(draft_escalation)",
		"executing(draft_escalation)", "executed:ok(draft_escalation)", "observed(draft_escalation)"}, []string{"proposed:final", "finished:done"}))
}
