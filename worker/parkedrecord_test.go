package worker_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// A worker that dies just after a run's parked event, before the
// projector writes the parked record, leaves the task's message
// unacknowledged; the worker that takes it next finds the run parked and
// writes the record (README, "loopgate runs"). It used to only schedule
// the expiry again, so the record said "running" until the run next moved.
func TestARedeliveredParkedRunRewritesItsRecord(t *testing.T) {
	t.Parallel()
	var died atomic.Bool
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 5, AckWait: 500 * time.Millisecond}
	o.retry = 20 * time.Millisecond
	o.crash = func(point string) {
		if point == "after:parked" && died.CompareAndSwap(false, true) {
			runtime.Goexit() // parked, record not queued, message never acknowledged
		}
	}
	b := setup(t, o)
	runID, _ := draftRun(t, b, "parked-record-1")
	parked := b.waitType(runID, events.TypeParked, 1)

	// Wait until the redelivered task has been handled and settled.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := b.env.JS.Consumer(t.Context(), journal.StreamWork, journal.ConsumerWorkers)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 && info.NumRedelivered == 0 && info.Delivered.Consumer >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task's message was not redelivered and settled: %+v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitRecord(t, b, runID, func(r journal.RunRecord) bool {
		return r.Status == journal.RunParked && r.LastSeq == parked.Seq
	})
}
