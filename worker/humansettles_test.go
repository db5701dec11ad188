package worker_test

import (
	"testing"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/idempotency"
)

// A human's answer to a write's unknown outcome settles the operation's
// record in loopgate_idempotency: mark_done completes it, abandon abandons
// it (the record used to say unknown for ever, so the bucket listed as
// unsettled operations a human had settled); retry leaves it to the
// attempt it begins.
func TestAHumansAnswerSettlesTheOperationRecord(t *testing.T) {
	t.Parallel()
	for decision, want := range map[approvals.Decision]idempotency.State{
		approvals.MarkDone: idempotency.Completed,
		approvals.Abandon:  idempotency.Abandoned,
	} {
		t.Run(string(decision), func(t *testing.T) {
			t.Parallel()
			b, runs, runID, sign := signedUnknownWrite(t, "human-settles-"+string(decision))
			opID := events.OperationID(runID, "s1c1")
			if rec := idemRecord(t, b, opID); rec.State != idempotency.Unknown {
				t.Fatalf("before the answer the record is %s, want %s", rec.State, idempotency.Unknown)
			}
			if c, d := b.outcomeOf(runID, b.publishMessage(sign(decision, "checked by hand"), runID, "s1c1")); c != "approved" {
				t.Fatalf("the human's %s: %s %s", decision, c, d)
			}
			b.waitEnd(runID)
			if rec := idemRecord(t, b, opID); rec.State != want || rec.RunID != runID {
				t.Errorf("after %s the record is %s (run %s), want %s", decision, rec.State, rec.RunID, want)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the tool ran %d times, want once", n)
			}
		})
	}
}

func idemRecord(t *testing.T, b *bundle, opID string) idempotency.Record {
	t.Helper()
	rec, _, err := idemStore(t, b).Get(t.Context(), opID)
	if err != nil {
		t.Fatalf("operation record %s: %v", opID, err)
	}
	return rec
}
