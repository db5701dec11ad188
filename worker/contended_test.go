package worker_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
)

// lockstep makes one pool's appends trail another's, one event at a time:
// the leader stores an event, then the follower tries to append its own
// (and loses the race: the event's place is taken), reloads, and comes
// back for the next, when the leader stores the next. Waits are bounded,
// and end for good once the test turns it off.
type lockstep struct {
	mu    sync.Mutex
	turn  int // leaderTurn, followerTurn or following
	types map[string]bool
	off   atomic.Bool
}

const (
	leaderTurn = iota
	followerTurn
	following // the follower is appending
)

func newLockstep(types ...events.Type) *lockstep {
	l := &lockstep{types: map[string]bool{}}
	for _, t := range types {
		l.types[string(t)] = true
	}
	return l
}

// await waits until it is turn's turn, then makes it next's.
func (l *lockstep) await(turn, next int) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !l.off.Load(); time.Sleep(time.Millisecond) {
		l.mu.Lock()
		if l.turn == turn {
			l.turn = next
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
	}
}

func (l *lockstep) followed(point, prefix string) bool {
	typ, ok := strings.CutPrefix(point, prefix)
	return ok && l.types[typ]
}

func (l *lockstep) lead(point string) {
	switch {
	case l.followed(point, "before:"):
		l.await(leaderTurn, leaderTurn)
	case l.followed(point, "after:"):
		l.mu.Lock()
		l.turn = followerTurn
		l.mu.Unlock()
	}
}

func (l *lockstep) follow(point string) {
	if !l.followed(point, "before:") {
		return
	}
	l.mu.Lock()
	if l.turn == following { // its last append is over: lost, and reloaded
		l.turn = leaderTurn
	}
	l.mu.Unlock()
	l.await(followerTurn, following)
}

// A worker that keeps losing its appends to a second driver of the run
// (after a restart, a run's wake-up and an approval's continuation in one
// process, or two workers) lets that driver go on: it settles its message
// and looks at the run again by a wake-up shortly after (after an AckWait
// when the other driver asked the model: TestTheLoserOfARaceLeavesTheRunToItsDriver). It used to hand
// the message back, spending a delivery of a healthy run, and on the last
// one stop the run as a poison message under the writer driving it: the
// run ended finished:error while its other driver was mid-step.
//
// Pool A takes the task on its last delivery (its first worker died on
// it) and is made to trail pool B, woken on the same run, at every append;
// B is held before its finish until A has let go.
func TestAWorkerOutrunByAnotherDriverLetsItFinish(t *testing.T) {
	t.Parallel()
	if batchedModes() {
		t.Skip("the lockstep needs each event appended on its own")
	}
	steps := []string{
		`{"tool_calls":[{"tool":"email_resident","args":{"to":"r@example.org"}}]}`,
		`{"tool_calls":[{"tool":"fax_resident","args":{"to":"555"}}]}`,
		`{"tool_calls":[{"tool":"page_resident","args":{"to":"555"}}]}`,
		`{"final_answer":{"summary":"nothing sent"}}`,
	}
	var (
		lock      = newLockstep(events.TypeProposed, events.TypeValidated, events.TypeObserved)
		deaths    atomic.Int32
		aStarted  = make(chan struct{})
		bReady    = make(chan struct{})
		release   = make(chan struct{})
		startOnce sync.Once
		calls     atomic.Int32 // model calls, by both pools
	)
	b := setup(t, options{
		layout:  journal.Layout{MaxDeliver: 2, AckWait: 300 * time.Millisecond},
		retry:   20 * time.Millisecond,
		workers: 2,
		agents:  map[string]config.Profile{"caller": profile("lookup_complaints")},
		scripts: map[string]model.Model{"caller": model.Func(func(_ context.Context, req model.Request) (model.Response, error) {
			calls.Add(1)
			return model.Response{Output: []byte(steps[min(req.Step, len(steps))-1]), Name: "caller"}, nil
		})},
		crash: func(point string) { // pool A's
			switch {
			case point == "before:started" && deaths.Add(1) == 1:
				runtime.Goexit() // its first delivery: the worker's process died
			case point == "after:started":
				startOnce.Do(func() { close(aStarted) })
				<-bReady
			default:
				lock.follow(point)
			}
		},
	})
	b.nextCrash = func(point string) { // pool B's
		if point == "before:finished" {
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
		}
		lock.lead(point)
	}
	runID := b.submit(task("contended-1", "caller"))
	<-aStarted
	b.secondPool()
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	close(bReady)
	// A lets go of the run: settled (now), or stopped as poisoned (before).
	deadline := time.Now().Add(30 * time.Second)
	for logs := b.logs.String(); !strings.Contains(logs, "run contended") && !strings.Contains(logs, "leaving it to that worker") && !strings.Contains(logs, "poison message"); logs = b.logs.String() {
		if time.Now().After(deadline) {
			t.Fatalf("pool A never let go of the run:\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	lock.off.Store(true)
	close(release)
	evs := b.waitEnd(runID)
	unknown := func(tool string) []string {
		return []string{"proposed", "validated:unknown_tool(" + tool + ")", "observed(" + tool + ")"}
	}
	assertTrail(t, without(evs, events.TypeDiscarded), concat([]string{"started"}, unknown("email_resident"), unknown("fax_resident"), unknown("page_resident"),
		[]string{"proposed:final", "finished:done"}))
	// Every model call A made in vain is in the trail, charged.
	if lost, stored := len(all(evs, events.TypeDiscarded)), len(all(evs, events.TypeProposed)); int(calls.Load()) != stored+lost || lost == 0 {
		t.Errorf("%d model calls, %d proposed and %d discarded events: want every call recorded once, A's lost one among them", calls.Load(), stored, lost)
	}
	if logs := b.logs.String(); strings.Contains(logs, "poison message") {
		t.Errorf("a healthy run was taken for a poison message:\n%s", logs)
	}
	consumerSettled(t, b, journal.StreamWork, journal.ConsumerWorkers) // the contended wake-up, too
}

// batchedModes reports whether make test's second and third passes run
// the worker package (LOOPGATE_TEST_BATCH, LOOPGATE_TEST_GROUP): a step's
// events then go to the stream together.
func batchedModes() bool {
	return os.Getenv("LOOPGATE_TEST_BATCH") == "1" || os.Getenv("LOOPGATE_TEST_GROUP") == "1"
}
