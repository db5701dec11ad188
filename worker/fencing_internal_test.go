package worker

import (
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// What a write whose first attempt timed out needs next, by what its
// manifest declares and what its reconcile check answered.
func TestAnUnknownWritesNextActionFollowsItsReconcile(t *testing.T) {
	t.Parallel()
	write := tools.Manifest{Name: "w", Permission: tools.Write, Approval: tools.ApprovalNone, Reconcile: "s"}
	fencing := write
	fencing.ReconcileFences = true
	idempotent := write
	idempotent.Idempotent = true
	none := write
	none.Reconcile = ""
	tests := []struct {
		name       string
		manifest   tools.Manifest
		reconciled *events.ReconciledData
		want       action
	}{
		{"idempotent: retried", idempotent, nil, actRetry},
		{"no reconcile: a human", none, nil, actRequestHuman},
		{"not asked yet", write, nil, actReconcile},
		{"fencing, not asked yet", fencing, nil, actReconcile},
		{"applied", write, &events.ReconciledData{Applied: true}, actObserve},
		{"fenced: a new attempt", fencing, &events.ReconciledData{Fenced: true}, actRetry},
		{"fence asked, not confirmed: a human", fencing, &events.ReconciledData{}, actRequestHuman},
		{"cannot fence, not applied: a human", write, &events.ReconciledData{}, actRequestHuman},
		{"check failed: a human", fencing, &events.ReconciledData{Error: "reconcile failed"}, actRequestHuman},
	}
	for _, tt := range tests {
		c := &events.CallState{
			Validated: &events.ValidatedData{Status: events.ValidOK},
			Executing: []events.ExecutingData{{Attempt: 1}},
			Executed:  []events.ExecutedData{{Status: events.ExecTimeout, Attempt: 1}},
		}
		if tt.reconciled != nil {
			r := *tt.reconciled
			r.Attempt = 1
			c.Reconciled = []events.ReconciledData{r}
		}
		if got := nextAction(c, tt.manifest, false, false); got != tt.want {
			t.Errorf("%s: next action %s, want %s", tt.name, got, tt.want)
		}
	}
	// After a fence the next attempt's operation id is the successor.
	c := &events.CallState{Call: events.ToolCall{ID: "s1c1"}, Reconciled: []events.ReconciledData{{Fenced: true}}}
	if got, want := operationID("run-1", c), events.FencedOperationID("run-1", "s1c1", 1); got != want {
		t.Errorf("operation id after a fence: %s, want %s", got, want)
	}
}
