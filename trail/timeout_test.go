package trail_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/events"
)

// A write attempt that timed out has an unknown outcome (DESIGN: "a
// timeout means outcome unknown, never failed"; the worker records the
// idempotency record Unknown and does not re-run a non-idempotent write
// without a reconcile or a human, worker/action.go). A trail in which a
// second attempt begins right after a timed-out one is named, as it is
// after an executed "unknown". Check used to treat only "unknown" as
// unsettled, so this double execution passed unnoticed.
func TestAWriteBegunAgainAfterATimeoutIsNamed(t *testing.T) {
	evs := happyRun(t)
	evs = slices.Delete(evs, 16, 18) // s3c1's executing and executed
	at := slices.Concat(attempt(t, evs[16], "s3c1", 1, events.ExecTimeout), attempt(t, evs[16], "s3c1", 2, events.ExecOK))
	v := check(renumber(slices.Insert(evs, 16, at...)))
	got := strings.Join(v.Problems, "\n")
	want := "write s3c1 (draft_escalation): attempt 2 (event 19) began while an earlier attempt's outcome was unknown"
	if !strings.Contains(got, want) {
		t.Errorf("problems:\n%s\nwant one containing %q", got, want)
	}
}
