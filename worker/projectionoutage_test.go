package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/loopgate/loopgate/journal"
)

// A run's message is acknowledged only once its record in loopgate_runs
// is written, so a kill does not leave the projection behind for good.
// The acknowledgement waits for the record at most ProjectionAckWait (30 s
// by default): when the runs bucket took no writes for longer (a full
// store, its stream without a leader), the messages used to be
// acknowledged with the record only in the projector's memory, and a
// process stopped then (killed, or restarted to fix the outage) took it
// along: the finished run had no record, for good (found by review). Now
// the message is handed back, to come back that long later.
func TestAFinishedRunKeepsItsRecordAcrossALongOutageAndARestart(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	o := oneDraft(t, "drafted")
	o.projectionAckWait = ackWait
	b := setup(t, o)
	deleteRunsBucket(t, b)
	runID, evs := approvedDraftRun(t, b, "review-long-outage")
	time.Sleep(ackWait + ackWait/2) // the bucket still gone: past ProjectionAckWait
	for _, name := range [][2]string{{journal.StreamWork, journal.ConsumerWorkers}, {journal.StreamApprovals, journal.ConsumerApprovals}} {
		c, err := b.env.JS.Consumer(t.Context(), name[0], name[1])
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d unacknowledged with the record unwritten", name[1], info.NumAckPending)
	}
	// The process goes away (a kill, or a stop whose last flush the
	// bucket does not take either), then the bucket is back and a new
	// process starts.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = b.pool.Stop(ctx)
	cancel()
	bringBackRunsBucket(t, b)
	b.startPool()
	// Any message handed back comes again within its delay (at most
	// ProjectionAckWait) and the worker that takes it writes the record.
	var (
		rec journal.RunRecord
		ok  bool
		err error
	)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		rec, ok, err = b.env.Journal.Run(t.Context(), "cityops", runID)
		if err != nil {
			t.Fatal(err)
		}
		if ok && rec.Status == journal.RunFinished {
			break
		}
	}
	if !ok || rec.Status != journal.RunFinished || rec.LastSeq != evs[len(evs)-1].Seq {
		t.Errorf("run %s finished at seq %d; its projection record 30s after the restart: present %v, %+v", runID, evs[len(evs)-1].Seq, ok, rec)
	}
}
