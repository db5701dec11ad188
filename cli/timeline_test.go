package cli

import (
	"encoding/json"
	"testing"

	"github.com/loopgate/loopgate/events"
)

// A reconcile's answer reads as what it settles: applied, fenced (a new
// attempt is safe) or not applied by a check that cannot fence, with why.
func TestTimelineSaysWhatAReconcileSettled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		given events.ReconciledData
		want  string
	}{
		{given: events.ReconciledData{Via: "draft_status", Attempt: 1, Applied: true},
			want: "draft_escalation APPLIED, says draft_status (attempt 1 took effect)"},
		{given: events.ReconciledData{Via: "draft_status", Attempt: 1, Fenced: true},
			want: "draft_escalation NOT APPLIED, FENCED, says draft_status (attempt 1 can no longer take effect: a new attempt is safe)"},
		{given: events.ReconciledData{Via: "ticket_status", Attempt: 2, Why: "the check cannot fence: a human decides"},
			want: "draft_escalation NOT APPLIED, says ticket_status (attempt 2): the check cannot fence: a human decides"},
		{given: events.ReconciledData{Via: "draft_status", Attempt: 1},
			want: "draft_escalation NOT APPLIED, says draft_status (attempt 1 did not take effect)"},
	} {
		data, _ := json.Marshal(tc.given)
		tl := &timeline{width: 200}
		got := tl.detail(events.Event{Type: events.TypeReconciled, Tool: "draft_escalation", Data: data})
		if got != tc.want {
			t.Errorf("reconciled %+v:\n got  %s\n want %s", tc.given, got, tc.want)
		}
	}
}
