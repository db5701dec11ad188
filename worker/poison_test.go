package worker_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
)

// A task that makes its worker fail on every delivery is stopped after
// MaxDeliver with reason error and the cause, not retried forever.
func TestATaskThatFailsEveryDeliveryIsStoppedWithItsCause(t *testing.T) {
	t.Parallel()
	var proposals int
	b := setup(t, options{
		layout: journal.Layout{MaxDeliver: 3},
		retry:  20 * time.Millisecond,
		agents: map[string]config.Profile{"crashy": profile("lookup_complaints")},
		scripts: map[string]model.Model{"crashy": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			proposals++
			panic("model adapter bug: nil pointer")
		})},
		workers: 1,
	})
	evs := b.waitEnd(b.submit(task("poison-1", "crashy")))
	assertTrail(t, evs, []string{"started", "finished:error"})
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	if !strings.Contains(fin.Detail, "all 3 deliveries") || !strings.Contains(fin.Detail, "model adapter bug") {
		t.Errorf("finished detail = %q, want the delivery count and the cause", fin.Detail)
	}
	if proposals != 3 {
		t.Errorf("model called %d times, want once per delivery (3)", proposals)
	}
}

// A worker that dies on a task cannot settle it; the max-deliveries
// advisory lets any pool stop the run and remove the message.
func TestATaskThatKillsItsWorkersIsDeadLettered(t *testing.T) {
	t.Parallel()
	// Two of three workers die on the task, as if their processes crashed;
	// the third is alive and pulling, as in a pool of processes.
	var deaths atomic.Int32
	b := setup(t, options{
		layout: journal.Layout{MaxDeliver: 2, AckWait: 300 * time.Millisecond},
		crash: func(point string) {
			if point == "before:proposed" && deaths.Add(1) <= 2 {
				runtime.Goexit()
			}
		},
		workers: 3,
	})
	runID := b.submit(task("killer-1", "runaway-assistant"))
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "finished:error"})
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	if !strings.Contains(fin.Detail, "2 deliveries") {
		t.Errorf("finished detail = %q", fin.Detail)
	}
	waitWorkStreamEmpty(t, b) // the message is gone from the work queue
}

// An operator removes an agent profile while one of its runs is parked.
// No worker can drive the run any more; its messages must still be
// settled and the run stopped, not left in the queues for ever: an
// approval is recorded as undecided once its deliveries are spent, and
// the run's wake-up stops it with reason error, naming the cause.
func TestARunWhoseProfileWasRemovedIsStoppedNotStranded(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: 300 * time.Millisecond}
	o.retry = 20 * time.Millisecond
	b := setup(t, o)
	runID, q := draftRun(t, b, "removed-profile-1")
	b.stopPool()
	delete(b.cfg.Agents, "one-draft")
	b.startPool()

	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "fine")
	b.waitType(runID, events.TypeApprovalRejected, 1)
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)

	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
		"approval_rejected:undecided(draft_escalation)", "finished:error"})
	if fin := last[events.FinishedData](t, evs, events.TypeFinished); !strings.Contains(fin.Detail, `agent profile "one-draft" is no longer configured`) {
		t.Errorf("finished detail = %q, want the cause", fin.Detail)
	}
	consumerSettled(t, b, journal.StreamWork, journal.ConsumerWorkers)
	s, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	// (The question's expiry stays scheduled: firing, it finds the run over.)
	if m, err := s.GetLastMsgForSubject(t.Context(), events.ResumeSubject("cityops", runID)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the run's wake-up is still in the work queue: %+v, %v", m, err)
	}
}

// A bug that fails every delivery of a task may be met again recording
// the run's stop (here the append of finished panics while the test
// says so). Neither the last delivery's stop (giveUp) nor the
// max-deliveries advisory's (deadLetter, in every pool at once) may end
// the process: the panics are logged, and the pool goes on working.
func TestAPanicStoppingAPoisonedRunDoesNotKillThePool(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	b := setup(t, options{
		layout: journal.Layout{MaxDeliver: 2},
		retry:  20 * time.Millisecond,
		agents: map[string]config.Profile{"crashy": profile("lookup_complaints")},
		scripts: map[string]model.Model{"crashy": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			panic("model adapter bug: nil pointer")
		})},
		crash: func(point string) {
			if point == "before:finished" && broken.Load() {
				panic("bug recording the stop")
			}
		},
		workers: 1,
	})
	b.submit(task("poison-stop-1", "crashy"))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.logs.String(), "stopping a poisoned run panicked") ||
		!strings.Contains(b.logs.String(), "max-deliveries advisory handling panicked") {
		if time.Now().After(deadline) {
			t.Fatalf("the stop's panics were not both logged:\n%s", b.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	broken.Store(false)
	evs := b.waitEnd(b.submit(task("after-poison-1", "runaway-assistant")))
	if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Reason == "" {
		t.Fatalf("the next task did not finish: %+v", fin)
	}
}
