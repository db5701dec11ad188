package worker_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// lostAfterEnd matches the warning of a worker whose model calls lost to
// a driver that finished the run, and the number of calls it names.
var lostAfterEnd = regexp.MustCompile(`lost to another worker that finished the run meanwhile.* calls=(\d+)`)

// Two pools, each with its own journal and group commit (two processes, as
// serve runs them), drive many runs at once, and every run is woken on the
// other pool while the first drives it: the appends of both drivers of a
// run ride in their journals' batches. Every run must end as a lone driver
// would have it, and every write must run once. A race's loser may have
// asked the model in vain: each such call must be on record once, as a
// discarded event, or, when the winner finished the run meanwhile (nothing
// follows finished), in a warning that says so.
func TestTwoGroupCommitPoolsRacingOnManyRuns(t *testing.T) {
	t.Parallel()
	const runs = 12
	var (
		mu    sync.Mutex
		ops   = map[string]int{}
		calls atomic.Int32
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
			calls.Add(1)
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
	discarded := 0
	for _, id := range ids {
		evs := b.waitEnd(id)
		assertTrail(t, without(evs, events.TypeDiscarded), concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
		discarded += len(all(evs, events.TypeDiscarded))
		if totals := last[events.FinishedData](t, evs, events.TypeFinished).Totals; totals.Events != len(evs) {
			t.Errorf("run %s: its totals count %d events, its trail has %d", id, totals.Events, len(evs))
		}
	}
	logs := b.logs.String()
	afterEnd := 0
	for _, m := range lostAfterEnd.FindAllStringSubmatch(logs, -1) {
		n, _ := strconv.Atoi(m[1])
		afterEnd += n
	}
	if made, stored := int(calls.Load()), 2*runs; made != stored+discarded+afterEnd {
		t.Errorf("%d model calls; %d proposed and %d discarded events, %d lost after the run finished: every call must be on record once\n%s",
			made, stored, discarded, afterEnd, logs)
	}
	t.Logf("races lost and reloaded: %d; contended: %d; busy: %d; calls discarded: %d, lost after the end: %d", strings.Count(logs, "lost an append race"),
		strings.Count(logs, "run contended"), strings.Count(logs, "run busy"), discarded, afterEnd)
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
