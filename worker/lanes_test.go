package worker_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/worker"
)

// Approvals of different runs are decided at once: the first decision is
// held inside the approvals handler (at after:approved) until a second
// run's decision gets there too. Decided one at a time, the second never
// would, and the first is let go only by the timeout.
func TestApprovalsOfDifferentRunsAreDecidedConcurrently(t *testing.T) {
	t.Parallel()
	const workers = 4
	b, timedOut := setupHeldLanes(t, workers)

	// Two runs in different lanes (the lane is a hash of the run id).
	var (
		runs   []string
		hashes = map[string]string{}
	)
	lanes := map[int]bool{}
	for i := 0; len(runs) < 2; i++ {
		id := fmt.Sprintf("lanes-%d", i)
		runID := events.RunID("cityops", id)
		lane := worker.LaneOf(events.ApprovalSubject("cityops", runID, "s1c1"), workers)
		if lanes[lane] {
			continue
		}
		lanes[lane] = true
		got, q := draftRun(t, b, id)
		if got != runID {
			t.Fatalf("run id %s, want %s", got, runID)
		}
		runs, hashes[runID] = append(runs, runID), q.ArgsHash
	}
	for _, runID := range runs {
		b.publishApproval(runID, "s1c1", hashes[runID], "approve", "supervisor@cityops", "ok")
	}
	for _, runID := range runs {
		assertTrail(t, b.waitEnd(runID), oneDraftApproved())
	}
	if timedOut() {
		t.Fatal("the second run's approval was decided only after the first's was let go: approvals are decided one at a time")
	}
}

// setupHeldLanes is a pool of workers lanes running the one-draft agent,
// whose first decision is held until a second one arrives
// (holdFirstDecisionUntilSecond).
func setupHeldLanes(t *testing.T, workers int) (b *bundle, timedOut func() bool) {
	o := oneDraft(t, "drafted")
	o.workers = workers
	timedOut = holdFirstDecisionUntilSecond(&o)
	return setup(t, o), timedOut
}

// holdFirstDecisionUntilSecond holds the first decision inside the
// approvals handler (at after:approved) until a second one gets there,
// for at most 10 s; timedOut reports whether the second never came.
func holdFirstDecisionUntilSecond(o *options) (timedOut func() bool) {
	var (
		mu      sync.Mutex
		arrived int
		second  = make(chan struct{})
		late    bool
	)
	o.crash = func(point string) {
		if point != "after:approved" {
			return
		}
		mu.Lock()
		arrived++
		if arrived == 2 {
			close(second)
		}
		first := arrived == 1
		mu.Unlock()
		if !first {
			return
		}
		select {
		case <-second:
		case <-time.After(10 * time.Second):
			mu.Lock()
			late = true
			mu.Unlock()
		}
	}
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return late
	}
}

// A run whose decision takes long holds up only its own lane: with the
// first run's decision held (at after:approved), a second run's approval
// queued behind it in the same lane, and a third run's in another lane,
// the third is decided while the first is still held. With lanes that
// take one message at a time, handing the second to its busy lane stopped
// the dispatcher, and the third waited for the first.
func TestABusyLaneDoesNotHoldUpTheOthers(t *testing.T) {
	t.Parallel()
	const workers = 4
	b, timedOut := setupHeldLanes(t, workers)

	// Runs A and B in one lane, C in another (the lane is a hash of the
	// run id).
	lane := func(id string) int { return laneOfTask(id, workers) }
	ids := []string{"busy-lane-0"}
	for i := 1; len(ids) < 3; i++ {
		id := fmt.Sprintf("busy-lane-%d", i)
		if same := lane(id) == lane(ids[0]); (len(ids) == 1) == same {
			ids = append(ids, id) // B: the same lane as A; then C: another
		}
	}
	type drafted struct{ runID, hash string }
	var a, bb, c *drafted
	for i, id := range ids {
		runID, q := draftRun(t, b, id)
		d := &drafted{runID, q.ArgsHash}
		switch i {
		case 0:
			a = d
		case 1:
			bb = d
		default:
			c = d
		}
	}
	for _, d := range []*drafted{a, bb, c} {
		b.publishApproval(d.runID, "s1c1", d.hash, "approve", "supervisor@cityops", "ok")
	}
	for _, d := range []*drafted{a, bb, c} {
		assertTrail(t, b.waitEnd(d.runID), oneDraftApproved())
	}
	if timedOut() {
		t.Fatal("the third run's approval waited for the first's, queued behind the second in the first's lane")
	}
}

// A burst of approval messages for one run whose decision is slow holds
// up only that run's lane: with the first run's decision held, twelve
// more messages for it (a client retrying, say, with a wrong hash) and
// then a second run's approval in another lane, the second run is decided
// while the first is held. With lane queues of 8, the dispatcher waited
// for the first run's full lane, and the second run for the first.
func TestABurstForOneRunDoesNotHoldUpOtherRuns(t *testing.T) {
	t.Parallel()
	const workers = 4
	b, timedOut := setupHeldLanes(t, workers)
	other := ""
	for i := 1; other == ""; i++ {
		if id := fmt.Sprintf("burst-%d", i); laneOfTask(id, workers) != laneOfTask("burst-0", workers) {
			other = id
		}
	}
	slow, slowQ := draftRun(t, b, "burst-0")
	quick, quickQ := draftRun(t, b, other)
	b.publishApproval(slow, "s1c1", slowQ.ArgsHash, "approve", "supervisor@cityops", "ok")
	for range 12 {
		b.publishApproval(slow, "s1c1", "sha256:"+strings.Repeat("0", 64), "approve", "supervisor@cityops", "again")
	}
	b.publishApproval(quick, "s1c1", quickQ.ArgsHash, "approve", "supervisor@cityops", "ok")
	assertTrail(t, b.waitEnd(quick), oneDraftApproved())
	if fin := last[events.FinishedData](t, b.waitEnd(slow), events.TypeFinished); fin.Reason != events.ReasonDone {
		t.Errorf("the run with the burst finished %s (%s), want done", fin.Reason, fin.Detail)
	}
	if timedOut() {
		t.Fatal("the second run's approval, in another lane, waited for the first run's slow decision: the dispatcher waited for the first run's lane")
	}
}

// laneOfTask is the approvals lane of the first call of task id's run.
func laneOfTask(id string, workers int) int {
	return worker.LaneOf(events.ApprovalSubject("cityops", events.RunID("cityops", id), "s1c1"), workers)
}

// A decision slower than AckWait keeps its message: the lane beats the
// message it is deciding, as it beats those waiting behind it, until the
// decision has taken AckWait (a lane stuck on it). Beating only the
// waiting ones, a decision held for 1.2 × AckWait had its message
// delivered again while it was still being decided. (The lane's last beat
// comes at least 2/3 AckWait into the decision, so the message is kept
// until 5/3 AckWait: the check at 1.2 × AckWait after the hook has a
// margin of about 0.9 s for reaching the hook and asking.)
func TestADecisionSlowerThanAckWaitKeepsItsMessage(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{AckWait: ackWait}
	var (
		b           *bundle
		held        sync.Once
		mu          sync.Mutex
		redelivered = -1
	)
	o.crash = func(point string) {
		if point != "after:approved" {
			return
		}
		// Once: the point is passed twice, the event's append and then
		// the decision's.
		held.Do(func() {
			time.Sleep(ackWait * 12 / 10)
			c, err := b.env.JS.Consumer(t.Context(), journal.StreamApprovals, journal.ConsumerApprovals)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			redelivered = c.CachedInfo().NumRedelivered
			mu.Unlock()
		})
	}
	b = setup(t, o)
	runID, q := draftRun(t, b, "slow-decision-1")
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	assertTrail(t, b.waitEnd(runID), oneDraftApproved())
	mu.Lock()
	defer mu.Unlock()
	if redelivered != 0 {
		t.Errorf("%d approval messages delivered again while their decision took 1.2 × AckWait, want 0", redelivered)
	}
}
