package trail_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/trail"
)

// DESIGN.md: the write-ahead executing event is appended before a tool
// runs; a crash between executing and executed is an unknown outcome,
// which is what keeps a write from running twice. A write whose executed
// event has no executing before it ran with nothing on record: a crash
// inside the tool would have left no trace, and a resume would run it
// again. The checker (soak, loopgate bench) used to say nothing about it
// and count the call as run once; now each end of a write must close an
// attempt its own executing began, of the same attempt and operation.
func TestAWriteExecutedWithoutItsWriteAheadIsAProblem(t *testing.T) {
	cases := map[string]func(t *testing.T, evs []trail.Stored, i int) []trail.Stored{
		// s3c1's executing event (seq 17) is gone and its executed ok stays.
		"no executing": func(t *testing.T, evs []trail.Stored, i int) []trail.Stored {
			return slices.Delete(evs, i, i+1)
		},
		// The executed ok names attempt 2; only attempt 1 began.
		"another attempt": func(t *testing.T, evs []trail.Stored, i int) []trail.Stored {
			evs[i+1].Data = mustJSON(t, events.ExecutedData{Status: events.ExecOK, OperationID: events.OperationID(evs[i].RunID, "s3c1"), Attempt: 2})
			return evs
		},
		// The executed ok names another call's operation.
		"another operation": func(t *testing.T, evs []trail.Stored, i int) []trail.Stored {
			evs[i+1].Data = mustJSON(t, events.ExecutedData{Status: events.ExecOK, OperationID: events.OperationID(evs[i].RunID, "s4c1"), Attempt: 1})
			return evs
		},
		// Attempt 1 ended twice, the second time with no attempt open.
		"a second end": func(t *testing.T, evs []trail.Stored, i int) []trail.Stored {
			again := evs[i+1]
			return slices.Insert(evs, i+2, again)
		},
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			evs := happyRun(t)
			i := slices.IndexFunc(evs, func(e trail.Stored) bool { return e.Type == events.TypeExecuting && e.CallID == "s3c1" })
			if i < 0 || evs[i+1].Type != events.TypeExecuted {
				t.Fatal("no executing event of s3c1 followed by its executed in the happy run")
			}
			v := check(renumber(breakIt(t, evs, i)))
			for _, p := range v.Problems {
				if strings.Contains(p, "s3c1") && strings.Contains(p, "ends no attempt") {
					return
				}
			}
			t.Fatalf("a write executed with no executing event of its own before it: verdict problems %q, want one naming s3c1", v.Problems)
		})
	}
}

// Two ends of a write are recorded with no attempt, as the worker
// records them (worker/calls.go executeGroup): a dry run's preview, and
// the end of a call whose arguments (sensitive, so never stored) a crash
// lost before it ran. Neither is a write run off the record.
func TestAWriteEndedWithoutAnAttemptIsFineWhenNothingRan(t *testing.T) {
	for _, status := range []string{events.ExecDryRun, events.ExecArgsLost} {
		t.Run(status, func(t *testing.T) {
			evs := happyRun(t)
			i := slices.IndexFunc(evs, func(e trail.Stored) bool { return e.Type == events.TypeExecuting && e.CallID == "s3c1" })
			if i < 0 {
				t.Fatal("no executing event of s3c1 in the happy run")
			}
			evs[i+1].Data = mustJSON(t, events.ExecutedData{Status: status, OperationID: events.OperationID(evs[i].RunID, "s3c1")})
			v := check(renumber(slices.Delete(evs, i, i+1)))
			for _, p := range v.Problems {
				if strings.Contains(p, "s3c1") {
					t.Errorf("problem %q", p)
				}
			}
		})
	}
}
