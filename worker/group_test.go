package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// barrier holds its callers until n have arrived (or a timeout passes),
// then lets them all go at once.
type barrier struct {
	n       int32
	arrived atomic.Int32
	open    chan struct{}
	once    sync.Once
}

func (b *barrier) wait(ctx context.Context) {
	if b.arrived.Add(1) >= b.n {
		b.once.Do(func() { close(b.open) })
	}
	select {
	case <-b.open:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
}

// oneTicket is a pool with group commit (batching from two waiting
// appends) whose agent "ticketer" calls the write tool m once, then
// answers.
func oneTicket(t *testing.T, m tools.Manifest, fns tools.Builtins) options {
	return options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents: map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t,
			`{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`,
			`{"final_answer":{"summary":"one ticket"}}`)},
		groupCommit: 2,
	}
}

// With group commit, the events of runs that append at the same moment are
// stored in shared atomic batches. Sixteen runs of a write tool are held in
// the tool until all sixteen are there, then released together, so their
// executed and observed events wait at once. Every run must end exactly as
// without group commit: its own trail, its write executed once, and its
// events in order with no gap.
func TestGroupCommitKeepsEveryRunExact(t *testing.T) {
	t.Parallel()
	const runs = 16
	var writes atomic.Int32
	together := &barrier{n: runs, open: make(chan struct{})}
	m, fns := ungated("create_ticket", &writes, func(ctx context.Context, c tools.Call) (any, error) {
		together.wait(ctx)
		return map[string]string{"ticket": "T-" + c.OperationID[:8]}, nil
	})
	o := oneTicket(t, m, fns)
	o.workers = runs
	b := setup(t, o)
	var ids []string
	for i := range runs {
		ids = append(ids, b.submit(task(fmt.Sprintf("group-%d", i), "ticketer")))
	}
	for _, id := range ids {
		evs := b.waitEnd(id)
		assertTrail(t, evs, concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("run %s: event %d has seq %d", id, i, e.Seq)
			}
		}
	}
	if n := writes.Load(); n != runs {
		t.Errorf("the write ran %d times for %d runs", n, runs)
	}
	st := b.journal.GroupStats()
	t.Logf("group commit: %+v", st)
	if st.Batches == 0 || st.MaxShare < 2 {
		t.Errorf("group stats = %+v: no run shared a batch", st)
	}
	if st.Refused != 0 {
		t.Errorf("group stats = %+v: a batch was refused", st)
	}
}

// With group commit a pool stages each step's events and makes them
// durable with one Append when the step ends (the next action outside the
// run), so under load they ride in one share of a batch. The crash points
// show it: every event of a step passes its "before" point before any
// passes its "after" point, and the executing event is durable before the
// tool runs (the write-ahead rule).
func TestGroupCommitStagesEachStep(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		points []string
	)
	record := func(p string) {
		mu.Lock()
		defer mu.Unlock()
		points = append(points, p)
	}
	var writes atomic.Int32
	m, fns := ungated("create_ticket", &writes, func(ctx context.Context, c tools.Call) (any, error) {
		record("tool")
		return map[string]string{"ticket": "T-1"}, nil
	})
	o := oneTicket(t, m, fns)
	o.crash = record
	b := setup(t, o)
	evs := b.waitEnd(b.submit(task("staged-1", "ticketer")))
	assertTrail(t, evs, concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	mu.Lock()
	got := strings.Join(points, " ")
	mu.Unlock()
	// The step up to its write-ahead record, in one append.
	step := "before:proposed before:validated before:executing after:proposed after:validated after:executing"
	if !strings.Contains(got, step) {
		t.Fatalf("crash points:\n %s\nwant the step staged and appended together:\n %s", got, step)
	}
	if i, j := strings.Index(got, "after:executing"), strings.Index(got, "tool"); i < 0 || j < i {
		t.Fatalf("crash points:\n %s\nwant executing durable before the tool ran", got)
	}
	end := "before:executed before:observed after:executed after:observed"
	if !strings.Contains(got, end) {
		t.Fatalf("crash points:\n %s\nwant the outcome staged and appended together:\n %s", got, end)
	}
}
