package trail_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/trail"
)

// After a reconcile that fenced a write's operation id, the next attempt
// names the successor id (events.FencedOperationID): that trail is sound.
// The same attempt under the fenced id, or a successor id with no fence
// before it, is flagged.
func TestTheAttemptAfterAFenceNamesTheSuccessorOperationID(t *testing.T) {
	cases := []struct {
		name    string
		fenced  bool
		fences  int // the fences the second attempt's id counts
		problem string
	}{
		{name: "fenced, successor id", fenced: true, fences: 1},
		{name: "fenced, the fenced id again", fenced: true, fences: 0, problem: "names operation"},
		{name: "not fenced, a successor id", fenced: false, fences: 1, problem: "names operation"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs := happyRun(t)
			evs = slices.Delete(evs, 16, 18) // s3c1's executing and executed
			like := evs[16]
			first := attempt(t, like, "s3c1", 1, events.ExecTimeout)
			rec := like
			rec.Type, rec.CallID, rec.Tool = events.TypeReconciled, "s3c1", "draft_escalation"
			rec.Data = mustJSON(t, events.ReconciledData{OperationID: events.OperationID(like.RunID, "s3c1"), Attempt: 1, Via: "draft_status", Fenced: tc.fenced})
			second := attempt(t, like, "s3c1", 2, events.ExecOK)
			op := events.FencedOperationID(like.RunID, "s3c1", tc.fences)
			second[0].Data = mustJSON(t, events.ExecutingData{OperationID: op, Attempt: 2, Deadline: like.Time, ArgsHash: "sha256:x"})
			second[1].Data = mustJSON(t, events.ExecutedData{Status: events.ExecOK, OperationID: op, Attempt: 2})
			v := check(renumber(slices.Insert(evs, 16, slices.Concat(first, []trail.Stored{rec}, second)...)))
			var got []string
			for _, p := range v.Problems {
				if strings.Contains(p, "s3c1") {
					got = append(got, p)
				}
			}
			switch {
			case tc.problem == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tc.problem != "" && (len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.problem)):
				t.Errorf("problems %q, want one saying %q", got, tc.problem)
			}
			if c := v.Calls["s3c1"]; tc.problem == "" && (c.OperationID != op || c.TookEffect() != 1) {
				t.Errorf("s3c1: %+v, want operation %s and one effect", *c, op)
			}
		})
	}
}
