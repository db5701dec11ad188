package worker_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
)

// wakeUps counts the messages published on a run's wake-up subject from
// now on (core NATS sees every publish to the stream's subjects).
func wakeUps(t *testing.T, b *bundle, runID string) func() int {
	t.Helper()
	sub, err := b.env.Conn.SubscribeSync(events.ResumeSubject("cityops", runID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int {
		if err := b.env.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, err := sub.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// approvedOnce checks how an approved one-draft run ended: its exact
// trail, its one draft, every approval message settled, and wakes
// wake-ups published on its resume subject (why: which ones).
func approvedOnce(t *testing.T, b *bundle, evs []events.Event, woken func() int, wakes int, why string) {
	t.Helper()
	assertTrail(t, evs, oneDraftApproved())
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Errorf("outbox = %v, want the one approved draft", files)
	}
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	if n := woken(); n != wakes {
		t.Errorf("%d wake-ups published, want %d (%s)", n, wakes, why)
	}
}

// A decision's run goes on at once in the process that decided it, under
// the approval message's lease: no wake-up is published for the queue
// (two writes of the work stream, a delivery and a second read of the run
// saved per approval), and the approval message is acknowledged once the
// run lets go.
func TestADecidedRunGoesOnWithoutAWakeUp(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID := events.RunID("cityops", "continue-1")
	woken := wakeUps(t, b, runID)
	if got, q := draftRun(t, b, "continue-1"); got != runID {
		t.Fatalf("run id %s, want %s", got, runID)
	} else {
		b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "")
	}
	approvedOnce(t, b, b.waitEnd(runID), woken, 0, "none: the decision continued the run")
}

// A run that cannot go on after its decision (here its model panics once)
// is handed to the queue with the wake-up it would have had: another
// delivery continues it from its events, and the write is not run twice.
func TestARunThatCannotGoOnAfterItsDecisionIsHandedToTheQueue(t *testing.T) {
	t.Parallel()
	var proposals atomic.Int32
	draft := `{"tool_calls":[{"tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}}]}`
	b := setup(t, options{
		agents: map[string]config.Profile{"one-draft": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"one-draft": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			switch proposals.Add(1) {
			case 1:
				return model.Response{Output: []byte(draft)}, nil
			case 2:
				panic("model adapter bug after the approval")
			}
			return model.Response{Output: []byte(`{"final_answer":{"summary":"drafted"}}`)}, nil
		})},
		retry: 20 * time.Millisecond,
	})
	runID := events.RunID("cityops", "handover-1")
	woken := wakeUps(t, b, runID)
	_, q := draftRun(t, b, "handover-1")
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "")
	approvedOnce(t, b, b.waitEnd(runID), woken, 1, "the one that handed the run over")
	if n := proposals.Load(); n != 3 {
		t.Errorf("model asked %d times, want 3 (the panic, then once more from the queue)", n)
	}
	if !strings.Contains(b.logs.String(), "handed to the queue") {
		t.Errorf("the hand-over is not logged:\n%s", b.logs.String())
	}
}

// A worker that dies while it continues a run after its decision leaves
// the approval message unacknowledged: its redelivery finds the entry
// decided by itself and wakes the run, which goes on from its events.
func TestARunWhoseWorkerDiesAfterItsDecisionIsWokenByTheRedelivery(t *testing.T) {
	t.Parallel()
	var proposed, deaths atomic.Int32
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{AckWait: 300 * time.Millisecond}
	o.retry = 20 * time.Millisecond
	o.crash = func(point string) {
		// The second proposal is the first thing after the approval.
		if point == "before:proposed" && proposed.Add(1) == 2 && deaths.Add(1) == 1 {
			runtime.Goexit() // this worker is gone, the approval message unsettled
		}
	}
	b := setup(t, o)
	runID := events.RunID("cityops", "continue-dies-1")
	woken := wakeUps(t, b, runID)
	_, q := draftRun(t, b, "continue-dies-1")
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "")
	evs := b.waitEnd(runID)
	if deaths.Load() != 1 {
		t.Fatalf("the worker died %d times after the decision, want once", deaths.Load())
	}
	approvedOnce(t, b, evs, woken, 1, "the redelivered approval's one")
}

// A pool told to stop (SIGTERM) while it continues a run after its
// decision waits for the step in hand; when its drain time runs out the
// run is handed to the queue with its wake-up and the approval message is
// acknowledged, so the next process goes on with it and the write is not
// run twice.
func TestADecidedRunCaughtByAStopIsHandedToTheQueue(t *testing.T) {
	t.Parallel()
	reached, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	o := oneDraft(t, "drafted")
	o.crash = func(point string) {
		// The executing event is the first thing after the approval.
		if point == "before:executing" && once.CompareAndSwap(false, true) {
			close(reached)
			<-release
		}
	}
	b := setup(t, o)
	runID := events.RunID("cityops", "continue-stopped-1")
	woken := wakeUps(t, b, runID)
	_, q := draftRun(t, b, "continue-stopped-1")
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "")
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the decided run never went on")
	}

	drain, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- b.pool.Stop(drain) }()
	<-drain.Done()
	// The drain time is over: Stop cancels the pool's context as it sees it.
	time.Sleep(200 * time.Millisecond)
	close(release)
	select {
	case err := <-stopped:
		if err == nil {
			t.Error("Stop returned nil, want its drain time exceeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return once the continuation let go")
	}
	if !strings.Contains(b.logs.String(), "handed to the queue") {
		t.Fatalf("the stopped continuation did not hand the run over; logs:\n%s", b.logs.String())
	}

	b.startPool() // the next process
	approvedOnce(t, b, b.waitEnd(runID), woken, 1, "the one that handed the run over")
}

// A pool that stops while a run's step is longer than the drain hands the
// run back to the queue. Each stop (a rolling restart) must not spend one
// of the message's deliveries: as many stops as MaxDeliver allows
// deliveries, during one long step, must not stop a healthy run as a
// poison message. The run is handed over as a wake-up of its own.
func TestStopsDuringALongStepDoNotSpendTheRunsDeliveries(t *testing.T) {
	t.Parallel()
	const stops = 3
	var calls atomic.Int32
	b := setup(t, options{
		layout:  journal.Layout{MaxDeliver: stops, AckWait: time.Second},
		retry:   20 * time.Millisecond,
		workers: 1,
		agents:  map[string]config.Profile{"slow": profile("lookup_complaints")},
		scripts: map[string]model.Model{"slow": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			if calls.Add(1) <= stops {
				<-ctx.Done() // longer than the drain: the pool's stop cancels it
				return model.Response{}, ctx.Err()
			}
			return model.Response{Output: []byte(`{"final_answer":{"summary":"ok"}}`), Name: "slow"}, nil
		})},
	})
	runID := b.submit(task("stops-1", "slow"))
	for i := int32(1); i <= stops; i++ {
		deadline := time.Now().Add(30 * time.Second)
		for calls.Load() < i {
			if time.Now().After(deadline) {
				t.Fatalf("the model was asked %d times, want %d\n%s", calls.Load(), i, b.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		_ = b.pool.Stop(ctx) // the drain runs out mid-step
		cancel()
		b.startPool()
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed:final", "finished:done"})
	if n := calls.Load(); n != stops+1 {
		t.Errorf("the model was asked %d times, want %d", n, stops+1)
	}
}

// A pool holds no work it is not working on. A task waiting in a pool's
// buffer when the pool stops (or dies) would spend a delivery without a
// worker ever looking at it, and after a kill -9 wait out AckWait while
// other workers sit idle: a few rolling restarts while the queue is backed
// up would stop a healthy task as a poison message before any worker
// started it. Here two workers are offered a quick task and three held
// ones: once the quick one is done, both workers are busy and the third
// held task waits in the stream, not in the pool; and after two stops
// (MaxDeliver is 2) every task ends done.
func TestAPoolTakesNoMoreWorkThanItsWorkersCanDo(t *testing.T) {
	t.Parallel()
	const workers = 2
	var held atomic.Int32
	release := make(chan struct{})
	answer := model.Response{Output: []byte(`{"final_answer":{"summary":"ok"}}`), Name: "held"}
	b := setup(t, options{
		layout:  journal.Layout{MaxDeliver: 2, AckWait: time.Second},
		retry:   20 * time.Millisecond,
		workers: workers,
		agents:  map[string]config.Profile{"held": profile("lookup_complaints"), "quick": profile("lookup_complaints")},
		scripts: map[string]model.Model{
			"quick": model.Func(func(context.Context, model.Request) (model.Response, error) { return answer, nil }),
			"held": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
				held.Add(1)
				select {
				case <-release:
					return answer, nil
				case <-ctx.Done(): // the pool's stop, past its drain
					return model.Response{}, ctx.Err()
				}
			}),
		},
	})
	runs := []string{b.submit(task("held-0", "held")), b.submit(task("quick-1", "quick"))}
	b.waitEnd(runs[1])
	for i := 2; i <= 3; i++ {
		runs = append(runs, b.submit(task(fmt.Sprintf("held-%d", i), "held")))
	}
	waitHeld := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for held.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the held model was asked %d times, want %d\n%s", held.Load(), n, b.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for stop := int32(0); stop <= 2; stop++ {
		waitHeld(workers * (stop + 1)) // both workers busy
		// Longer than a nakked message's delay (1s), and than the pool's
		// pulls take to fill a buffer.
		time.Sleep(1200 * time.Millisecond)
		c, err := b.env.JS.Consumer(t.Context(), journal.StreamWork, journal.ConsumerWorkers)
		if err != nil {
			t.Fatal(err)
		}
		if info := c.CachedInfo(); info.NumAckPending != workers {
			t.Fatalf("after %d stops: %d work messages delivered and unacknowledged, want %d (the busy workers'); %d waiting",
				stop, info.NumAckPending, workers, info.NumPending)
		}
		if stop == 2 {
			break
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		_ = b.pool.Stop(ctx) // the drain runs out mid-step
		cancel()
		b.startPool()
	}
	close(release)
	for _, runID := range runs {
		assertTrail(t, b.waitEnd(runID), []string{"started", "proposed:final", "finished:done"})
	}
}
