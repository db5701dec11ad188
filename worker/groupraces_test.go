package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// Two pools, each with its own journal and group commit (two processes, as
// serve runs them), drive many runs at once, and every run is woken on the
// other pool while the first drives it: the appends of both drivers of a
// run ride in their journals' batches. Every run must end as a lone driver
// would have it, and every write must run once.
func TestTwoGroupCommitPoolsRacingOnManyRuns(t *testing.T) {
	t.Parallel()
	const runs = 12
	var (
		mu  sync.Mutex
		ops = map[string]int{}
	)
	m := fakeTool("create_ticket", tools.Write, false)
	m.Approval = tools.ApprovalNone
	fns := tools.Builtins{"create_ticket": func(ctx context.Context, c tools.Call) (any, error) {
		mu.Lock()
		ops[c.OperationID]++
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		return map[string]string{"ticket": "T-" + c.OperationID[:8]}, nil
	}}
	script := scripted(t,
		`{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`,
		`{"final_answer":{"summary":"one ticket"}}`)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents: map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			time.Sleep(10 * time.Millisecond)
			return script.Propose(ctx, req)
		})},
		retry:       50 * time.Millisecond,
		workers:     runs,
		groupCommit: 2,
	})
	b.secondPool()
	var ids []string
	for i := range runs {
		ids = append(ids, b.submit(task(fmt.Sprintf("jrnl-race-%d", i), "ticketer")))
	}
	for _, id := range ids {
		b.waitType(id, events.TypeStarted, 1)
		if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", id), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		evs := b.waitEnd(id)
		assertTrail(t, evs, concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	}
	logs := b.logs.String()
	t.Logf("races lost and reloaded: %d; contended: %d; busy: %d", strings.Count(logs, "lost an append race"),
		strings.Count(logs, "run contended"), strings.Count(logs, "run busy"))
	mu.Lock()
	defer mu.Unlock()
	if len(ops) != runs {
		t.Errorf("%d operations ran for %d runs", len(ops), runs)
	}
	for op, n := range ops {
		if n != 1 {
			t.Errorf("operation %s ran %d times", op, n)
		}
	}
}
