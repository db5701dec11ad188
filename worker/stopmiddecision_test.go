package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// A pool stopped while its approvals handler is in the middle of a
// decision, whose drain runs out there, loses neither the approval nor
// the write: the decision's remaining writes fail with the cancelled
// context, the message is handed back, and the next process decides (or
// records) it and the run goes on, the draft written once.
func TestAStopMidDecisionLosesNoApproval(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"before:decision", "after:approved"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			reached, release := make(chan struct{}), make(chan struct{})
			var once atomic.Bool
			o := oneDraft(t, "drafted")
			o.layout = journal.Layout{AckWait: time.Second}
			o.crash = func(p string) {
				if p == point && once.CompareAndSwap(false, true) {
					close(reached)
					<-release
				}
			}
			b := setup(t, o)
			runID, q := draftRun(t, b, "stop-mid-decision")
			b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "")
			select {
			case <-reached:
			case <-time.After(30 * time.Second):
				t.Fatal("the decision never reached " + point)
			}
			drain, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			stopped := make(chan error, 1)
			go func() { stopped <- b.pool.Stop(drain) }()
			<-drain.Done()
			time.Sleep(200 * time.Millisecond) // Stop has cancelled the pool's context
			close(release)
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("Stop did not return")
			}
			b.startPool() // the next process
			evs := b.waitEnd(runID)
			assertTrail(t, evs, oneDraftApproved())
			if files := outboxFiles(t, b.outbox); len(files) != 1 {
				t.Errorf("outbox = %v, want the one approved draft", files)
			}
			if n := len(all(evs, events.TypeApproved)); n != 1 {
				t.Errorf("%d approved events, want 1", n)
			}
		})
	}
}
