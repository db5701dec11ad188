package worker_test

import (
	"context"
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
	// The message is gone from the work queue.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		s, err := b.env.JS.Stream(ctx, journal.StreamWork)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().State.Msgs; n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the poisoned message stayed in the work stream")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
