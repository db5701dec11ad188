package worker_test

import (
	"strings"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
)

// A principal of one tenant touching another tenant's complaint is denied
// at the resource check, before any human is asked and before anything
// runs; the run stops.
func TestAnotherTenantsResourceIsDeniedAndStopsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		agents: map[string]config.Profile{"nosy": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"nosy": scripted(t,
			`{"tool_calls":[{"tool":"draft_escalation","args":{"request_id":"SR-20001","reason":"Open 14 days, past the 5-day threshold."}}]}`,
			`{"final_answer":{"summary":"never"}}`)},
	})
	evs := b.waitEnd(b.submit(task("nosy-1", "nosy")))
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "denied(draft_escalation)", "finished:permission_denied"})
	d := last[events.DeniedData](t, evs, events.TypeDenied)
	if d.Check != "resource" || !strings.Contains(d.Reason, "SR-20001") {
		t.Errorf("denied = %+v, want the resource check naming SR-20001", d)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Errorf("outbox = %v", files)
	}
}

// Argument constraints in the policy bound what a role may pass, after
// the schema has allowed it.
func TestConstrainedArgumentsAreDenied(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		roles: map[string]config.Role{"sanitation-desk": {
			Call: []string{"lookup_complaints"},
			Args: map[string]map[string][]jsonRaw{"lookup_complaints": {"category": {jsonRaw(`"sanitation"`)}}},
		}},
		agents: map[string]config.Profile{"desk": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints"}, Roles: []string{"sanitation-desk"},
		}},
		scripts: map[string]model.Model{"desk": scripted(t,
			`{"tool_calls":[{"tool":"lookup_complaints","args":{"category":"sanitation"}}]}`,
			`{"tool_calls":[{"tool":"lookup_complaints","args":{"category":"noise"}}]}`,
			`{"final_answer":{"summary":"never"}}`)},
	})
	tk := task("desk-1", "desk")
	tk.Principal = events.Principal{ID: "sam@cityops", Roles: []string{"sanitation-desk"}}
	evs := b.waitEnd(b.submit(tk))
	assertTrail(t, evs, concat([]string{"started"}, okStep("lookup_complaints"),
		[]string{"proposed", "validated:ok(lookup_complaints)", "denied(lookup_complaints)", "finished:permission_denied"}))
	if d := last[events.DeniedData](t, evs, events.TypeDenied); d.Check != "arguments" {
		t.Errorf("denied = %+v, want the arguments check", d)
	}
}
