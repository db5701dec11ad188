package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/journal"
)

// decide runs under decideSafely, which turns a panic into a retry; what
// handleApproval does on a message's last delivery (undecided) and what
// every pool does on the max-deliveries advisory (decideDeadLetter ->
// undecided) did not (found by review). A bug that panics on
// some message while recording its rejection (here: the append of
// approval_rejected; in real life, say, the redactor or the encoder on
// what a hostile message carries) panics again there, on the lane's
// goroutine or the advisory's subscription callback, and kills the
// process: every pool at once, from the advisory.
func TestAPanicRecordingAnUndecidedApprovalDoesNotKillThePool(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: time.Second}
	o.retry = 20 * time.Millisecond
	o.crash = func(point string) {
		if point == "before:approval_rejected" {
			panic("bug recording this message's rejection")
		}
	}
	b := setup(t, o)
	runID, q := draftRun(t, b, "undecided-panic-1")
	stale := "sha256:" + strings.Repeat("0", 64)
	b.publishApproval(runID, "s1c1", stale, "approve", "supervisor@cityops", "wrong hash: rejected")
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	// The worker is still there: a valid answer decides the run.
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	// The stale message's last delivery may come after the run's end
	// (consumerSettled sees a nakked message as settled).
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(b.logs.String(), "recording it panicked"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the dropped message was not logged as such:\n%s", b.logs.String())
		}
	}
}
