package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	trailcheck "github.com/loopgate/loopgate/trail"
)

// A decision that arrives after its run has finished (a second approver,
// a double click, a replay) is recorded as approval_rejected after the
// run's finished event, where its approver looks; the trail stays sound
// (trail.Check, as make soak and loopgate bench check it: it used to call
// such a run broken, found by review).
func TestAnAnswerAfterTheRunFinishedIsRecordedAndBreaksNoTrail(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "after-finish-1")
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	b.waitEnd(runID)
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok") // a double click
	b.waitType(runID, events.TypeApprovalRejected, 1)
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	assertTrail(t, evs, append(oneDraftApproved(), "approval_rejected:not_pending"))
	c := trailcheck.New("cityops", runID)
	for i, e := range evs {
		c.Add(trailcheck.Stored{Event: e, StreamSeq: uint64(i + 1), Subject: events.EventSubject("cityops", runID, e.Type), MsgID: fmt.Sprintf("%s/%d", runID, e.Seq)})
	}
	if v := c.Verdict(); len(v.Problems) > 0 || v.Reason != events.ReasonDone {
		t.Fatalf("trail.Check: %+v", v)
	}
	time.Sleep(time.Second) // past the projector's quarter-second writes
	rec, ok, err := b.env.Journal.Run(t.Context(), "cityops", runID)
	if err != nil || !ok || rec.Status != journal.RunFinished {
		t.Fatalf("projection record %+v (%v, %v): want the run finished", rec, ok, err)
	}
}
