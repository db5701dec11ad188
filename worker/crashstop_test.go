package worker_test

import (
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
)

// A stop is decided by the event that crosses its bound (denied, or the
// validated that makes a call one repeat or one refusal too many). A
// worker that dies between that event and finished leaves the run to
// another, which must stop it too: derive the stop from the events, not
// from having appended them. Each case kills the first worker right after
// the deciding event; the trail must be the one without the crash, and
// nothing may run after it.
func TestAStopSurvivesACrashBeforeFinished(t *testing.T) {
	t.Parallel()
	nosy := config.Profile{
		Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
	}
	cases := []struct {
		name  string
		point string // the crash point, at its nth passage
		nth   int32
		agent string
		o     options
		want  []string
	}{
		{
			name: "denied", point: "after:denied", nth: 1, agent: "nosy",
			o: options{
				agents: map[string]config.Profile{"nosy": nosy},
				scripts: map[string]model.Model{"nosy": scripted(t,
					`{"tool_calls":[{"tool":"draft_escalation","args":{"request_id":"SR-20001","reason":"Open 14 days, past the 5-day threshold."}}]}`,
					`{"final_answer":{"summary":"negotiated after a denial"}}`)},
			},
			want: []string{"started", "proposed", "validated:ok(draft_escalation)", "denied(draft_escalation)", "finished:permission_denied"},
		},
		{
			name: "repeated call", point: "after:validated", nth: 3, agent: "repeating-assistant",
			want: concat([]string{"started"},
				okStep("lookup_complaints"), okStep("lookup_complaints"),
				[]string{"proposed", "validated:ok(lookup_complaints)", "finished:repeated_call"}),
		},
		{
			// max_corrections 1: the second refused call of one tool is
			// one too many.
			name: "corrections", point: "after:validated", nth: 2, agent: "fumbling",
			o: options{
				agents: map[string]config.Profile{"fumbling": {
					Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints"}, Roles: []string{"operator"},
					Limits: events.Limits{MaxCorrections: 1},
				}},
				scripts: map[string]model.Model{"fumbling": scripted(t,
					`{"tool_calls":[{"tool":"lookup_complaints","args":{"older_than_days":"old"}}]}`,
					`{"tool_calls":[{"tool":"lookup_complaints","args":{"older_than_days":"older"}}]}`,
					`{"tool_calls":[{"tool":"lookup_complaints","args":{"older_than_days":5}}]}`,
					`{"final_answer":{"summary":"corrected past the bound"}}`)},
			},
			want: []string{"started",
				"proposed", "validated:invalid_arguments(lookup_complaints)", "observed(lookup_complaints)",
				"proposed", "validated:invalid_arguments(lookup_complaints)", "finished:invalid_decisions"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			die := dieAt(tc.point, tc.nth)
			o := tc.o
			o.workers = 2
			o.layout = journal.Layout{AckWait: 500 * time.Millisecond}
			o.crash = die.hook
			b := setup(t, o)
			evs := b.waitEnd(b.submit(task("crash-stop-"+tc.agent, tc.agent)))
			assertTrail(t, evs, tc.want)
			// The worker must have died at the point (a missing death
			// used to be only logged, so a point no run reached passed).
			// With staged events the deciding event and finished are
			// stored together: it dies after both, and the next worker
			// finds the run ended.
			die.happened(t)
		})
	}
}
