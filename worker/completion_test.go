package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// claimingDraft is a profile that proposes one draft of SR-10421, then
// answers claiming the drafts named.
func claimingDraft(t *testing.T, claimed string) options {
	return options{
		agents: map[string]config.Profile{"claimer": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"claimer": scripted(t,
			`{"tool_calls":[{"tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}}]}`,
			`{"final_answer":{"summary":"drafted","drafts_created":`+claimed+`}}`)},
	}
}

// A final answer's drafts_created is checked against the run's events: each
// draft it names must be shown by a write of the run that succeeded. A
// draft claimed after a denial, in a dry run, or never made stops the run
// as completion_unverified, naming the claim, where it used to finish done
// with a claim its own audit trail contradicts.
func TestAFinalAnswerMayClaimOnlyTheDraftsItsWritesMade(t *testing.T) {
	t.Parallel()
	unverified := func(rest ...string) []string {
		return append(rest, "proposed:final", "finished:completion_unverified")
	}
	for _, tc := range []struct {
		name, claimed, decision string
		dryRun                  bool
		want                    []string
		detail                  string
	}{
		{name: "approved, claimed", claimed: `["SR-10421"]`, decision: "approve",
			want: oneDraftApproved()},
		{name: "approved, claimed with spaces around", claimed: `[" SR-10421 "]`, decision: "approve",
			want: oneDraftApproved()},
		{name: "approved, another claimed", claimed: `["SR-10421","SR-99999"]`, decision: "approve",
			want:   unverified(concat([]string{"started"}, gatedStep("draft_escalation"))...),
			detail: `"SR-99999" under drafts_created, which no successful write of this run shows`},
		{name: "denied, claimed", claimed: `["SR-10421"]`, decision: "deny",
			want: unverified("started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
				"approved:deny(draft_escalation)", "observed(draft_escalation)"),
			detail: `"SR-10421" under drafts_created, and no write of this run succeeded`},
		{name: "dry run, claimed", claimed: `["SR-10421"]`, dryRun: true,
			want:   unverified("started", "proposed", "validated:ok(draft_escalation)", "executed:dry_run(draft_escalation)", "observed(draft_escalation)"),
			detail: `no write of this run succeeded`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, claimingDraft(t, tc.claimed))
			tk := task("claims-"+strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), ",", ""), "claimer")
			tk.DryRun = tc.dryRun
			runID := b.submit(tk)
			if tc.decision != "" {
				b.autoApprove(runID, "supervisor@cityops", tc.decision, "checked")
			}
			evs := b.waitEnd(runID)
			assertTrail(t, evs, tc.want)
			fin := last[events.FinishedData](t, evs, events.TypeFinished)
			if tc.detail != "" && !strings.Contains(fin.Detail, tc.detail) {
				t.Errorf("finished %s: %q, want the claim named: %q", fin.Reason, fin.Detail, tc.detail)
			}
			if fin.Reason == events.ReasonCompletionUnverified && fin.Final != nil {
				t.Errorf("an unverified answer was kept as the run's final answer: %+v", fin.Final)
			}
		})
	}
}

// A write whose unknown outcome a human marked done shows no result: the
// values it was asked to write (its arguments) back the claim; a value it
// was not asked for still does not.
func TestADraftAHumanMarkedDoneMayBeClaimed(t *testing.T) {
	t.Parallel()
	for claimed, want := range map[string]events.Reason{`["T-7"]`: events.ReasonDone, `["T-8"]`: events.ReasonCompletionUnverified} {
		t.Run(claimed, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			m, fns := ungated("create_ticket", &runs, func(ctx context.Context, c tools.Call) (any, error) {
				<-ctx.Done() // times out: the outcome is unknown
				return nil, ctx.Err()
			})
			m.Timeout = events.Duration(300 * time.Millisecond)
			m.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}}}`)
			b := setup(t, options{
				tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
				agents: map[string]config.Profile{"ticketer": profile("create_ticket")},
				scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"title":"T-7"}}]}`,
					`{"final_answer":{"summary":"ok","drafts_created":`+claimed+`}}`)},
			})
			runID := b.submit(task("claims-mark-done-"+claimed[2:5], "ticketer"))
			b.autoApprove(runID, "supervisor@cityops", string(approvals.MarkDone), "the ticket is there")
			fin := last[events.FinishedData](t, b.waitEnd(runID), events.TypeFinished)
			if fin.Reason != want {
				t.Fatalf("claimed %s after mark_done: finished %s (%s), want %s", claimed, fin.Reason, fin.Detail, want)
			}
		})
	}
}
