package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// skewed is a clock that can be moved ahead while a test runs: a worker
// that reads a lease after the move reads it as a worker whose clock is
// that far ahead of the one that stamped it.
type skewed struct{ ahead atomic.Int64 }

func (s *skewed) now() time.Time          { return time.Now().Add(time.Duration(s.ahead.Load())) }
func (s *skewed) set(ahead time.Duration) { s.ahead.Store(int64(ahead)) }

// liveWrite starts a run whose write (1.5 s timeout) stays in its tool until
// released, past its deadline if need be, and returns once the tool has
// been entered.
func liveWrite(t *testing.T, clock *skewed, id string) (b *bundle, runID string, runs *atomic.Int32, release func()) {
	t.Helper()
	runs = new(atomic.Int32)
	entered, released := make(chan struct{}), make(chan struct{})
	var enter, free sync.Once
	m, fns := ungated("create_ticket", runs, func(ctx context.Context, c tools.Call) (any, error) {
		enter.Do(func() { close(entered) })
		<-released
		return map[string]string{"ticket": "T-" + c.OperationID[:8]}, nil
	})
	m.Timeout = events.Duration(1500 * time.Millisecond)
	b = setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":7}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		clock:   clock.now,
		workers: 2,
	})
	release = func() { free.Do(func() { close(released) }) }
	t.Cleanup(release)
	runID = b.submit(task(id, "ticketer"))
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the write's tool was never entered")
	}
	return b, runID, runs, release
}

// The README asks for worker clocks in sync to well under the lease grace
// (2 s). A worker whose clock is ahead by less than that (1.6 s), woken on
// a run whose write is still in its tool (0.5 s into 1.5 s), reads the
// attempt 0.6 s past its deadline, and only the grace keeps the lease
// live: it schedules the run's wake-up for the lease's end and lets go, and
// the write runs once, recorded by the worker that began it. With a 0.5 s
// grace the same worker would take the write over. The test has 1 s to
// see the wake-up handled and release the tool before the attempt's own
// deadline (0.1 s once failed CI on a slow machine), and the waking
// worker 1.4 s to read the lease.
func TestAWorkerAheadByLessThanTheGraceLeavesALiveWriteAlone(t *testing.T) {
	t.Parallel()
	clock := new(skewed)
	b, runID, runs, release := liveWrite(t, clock, "skew-within-1")
	began := b.waitType(runID, events.TypeExecuting, 1).Time
	time.Sleep(time.Until(began.Add(500 * time.Millisecond)))
	clock.set(1600 * time.Millisecond)
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "run busy; looking again when the attempt's lease ends", 1)
	release()

	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	if n := runs.Load(); n != 1 {
		t.Errorf("the write ran %d times, want once", n)
	}
}

// Past the grace the lease no longer protects the write, as the README
// warns: a worker 4 s ahead reads a live attempt as one whose worker is
// gone and takes it over. It still never runs the write blindly a second
// time: the attempt's outcome is unknown and goes to a human (needs_human),
// and the worker that began it, finding the run moved on, records nothing.
func TestAWorkerAheadByMoreThanTheGraceTakesALiveWriteOverAsUnknown(t *testing.T) {
	t.Parallel()
	clock := new(skewed)
	b, runID, runs, release := liveWrite(t, clock, "skew-beyond-1")
	clock.set(4 * time.Second)
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	q := b.waitType(runID, events.TypeApprovalRequested, 1)
	release()
	waitLogged(t, b, "lost an append race; reloaded the run", 1)

	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(create_ticket)",
		"executing(create_ticket)", "executed:unknown(create_ticket)",
		"approval_requested(create_ticket)", "parked",
	})
	var d events.ApprovalRequestedData
	if err := q.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Kind != "needs_human" {
		t.Errorf("the taken-over write asks a %s question, want needs_human", d.Kind)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the write ran %d times, want once", n)
	}
}
