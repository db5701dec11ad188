package worker_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/journal"
)

// An approval's handler goes on with the run it decided (continueRun) and
// may drive it to its end; killed right after the finished event, before
// the projection has the run's finished record, it leaves the approval
// message unacknowledged. Its redelivery finds the run finished and the
// decision its own, and must write the record, as a worker handed a
// finished run does: it used to acknowledge the message and leave
// loopgate runs saying parked for good (make soak's random-kills and
// cluster tests found 28 and 5 such records).
func TestARedeliveredApprovalOfAFinishedRunWritesItsRecord(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{AckWait: 500 * time.Millisecond}
	var died *atomic.Bool
	o.crash, died = dieOnce("after:finished")
	b := setup(t, o)
	runID, q := draftRun(t, b, "finish-record-1")
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	if !died.Load() {
		t.Fatal("the run's finisher never reached after:finished")
	}
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	end := evs[len(evs)-1].Seq
	waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == journal.RunFinished && r.LastSeq == end })
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Errorf("drafts %v, want exactly one", files)
	}
}
