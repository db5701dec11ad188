package worker_test

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/worker"
)

// counts is a worker.Metrics that counts what it is told, by method and
// labels.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(key string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key] += n
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func (c *counts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *counts) RunStarted(agent string) { c.add("started "+agent, 1) }
func (c *counts) RunFinished(agent string, reason events.Reason) {
	c.add("finished "+agent+" "+string(reason), 1)
}
func (c *counts) Step(agent string) { c.add("step "+agent, 1) }
func (c *counts) ToolCall(tool, status string, _ time.Duration) {
	c.add("tool "+tool+" "+status, 1)
}
func (c *counts) ModelCall(agent, model string, _ time.Duration, u events.Usage, _ float64) {
	c.add("model "+agent+" "+model, 1)
}
func (c *counts) ApprovalRequested(tool string) { c.add("asked "+tool, 1) }
func (c *counts) ApprovalDecided(outcome string, waited time.Duration) {
	c.add("decided "+outcome, 1)
	if waited < 0 {
		c.add("negative wait", 1)
	}
}
func (c *counts) EventsAppended(n int, _ time.Duration) { c.add("events", n) }
func (c *counts) Outage()                               { c.add("outage", 1) }
func (c *counts) Retry()                                { c.add("retry", 1) }
func (c *counts) Redelivered()                          { c.add("redelivered", 1) }
func (c *counts) PoisonStop()                           { c.add("poison", 1) }

// A pool holding a run's events through a full store is not ready, and
// says it met an outage and tried again; once there is room and the run
// goes on it is ready again. Its metrics count the run as its trail holds
// it, every event once. Stopped, it is not ready: draining.
func TestAPoolIsNotReadyWhileItHoldsARunThroughAnOutage(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	m := fakeTool("slow_read", tools.Read, false)
	c := &counts{}
	b := setup(t, options{
		maxFileStore: 8 << 20,
		tools:        []tools.Manifest{m}, roles: writerRoles("slow_read"),
		builtins: tools.Builtins{"slow_read": func(ctx context.Context, _ tools.Call) (any, error) {
			close(entered)
			<-release
			return map[string]int{"n": 1}, nil
		}},
		agents:  map[string]config.Profile{"slow": profile("slow_read")},
		scripts: map[string]model.Model{"slow": scripted(t, `{"tool_calls":[{"tool":"slow_read","args":{}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{MaxDeliver: 2},
		retry:   20 * time.Millisecond,
		workers: 1,
		metrics: c,
	})
	if err := b.pool.Ready(); err != nil {
		t.Fatalf("a started pool: Ready() = %v, want nil", err)
	}
	store := fillStore(t, b.env.JS, 4)
	runID := b.submit(task("ready-1", "slow"))
	<-entered
	err := store.top()
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "JetStream cannot store the run's events", 2)
	if err := b.pool.Ready(); !errors.Is(err, worker.ErrOutage) {
		t.Errorf("holding a run through a full store: Ready() = %v, want ErrOutage", err)
	}
	if c.get("outage") != 1 || c.get("retry") < 1 {
		t.Errorf("through the outage: %d outages, %d retries; want 1 and at least 1", c.get("outage"), c.get("retry"))
	}
	store.purge(t)
	evs := b.waitEnd(runID)
	// The hold ended before the run's next event was stored.
	if err := b.pool.Ready(); err != nil {
		t.Errorf("after the outage: Ready() = %v, want nil", err)
	}
	// Stopped, the pool has counted everything it did.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.pool.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.Ready(); !errors.Is(err, worker.ErrDraining) {
		t.Errorf("a stopped pool: Ready() = %v, want ErrDraining", err)
	}
	want := map[string]int{
		"started slow":        1,
		"finished slow done":  1,
		"step slow":           2,
		"model slow scripted": 2,
		"tool slow_read ok":   1,
		"events":              len(evs),
		"outage":              1,
	}
	got := c.snapshot()
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if got["redelivered"] != 0 || got["poison"] != 0 {
		t.Errorf("a run held through an outage was redelivered or stopped: %v", got)
	}
}

// A task whose worker fails on every delivery is counted: each delivery
// after the first as a redelivery, and its stop as a poison stop.
func TestPoisonStopsAndRedeliveriesAreCounted(t *testing.T) {
	t.Parallel()
	c := &counts{}
	b := setup(t, options{
		layout: journal.Layout{MaxDeliver: 3},
		retry:  20 * time.Millisecond,
		agents: map[string]config.Profile{"crashy": profile("lookup_complaints")},
		scripts: map[string]model.Model{"crashy": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			panic("model adapter bug")
		})},
		workers: 1,
		metrics: c,
	})
	evs := b.waitEnd(b.submit(task("poison-metrics-1", "crashy")))
	assertTrail(t, evs, []string{"started", "finished:error"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.pool.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"redelivered": 2, "poison": 1, "started crashy": 1, "finished crashy error": 1, "step crashy": 0, "events": len(evs)}
	got := c.snapshot()
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
}
