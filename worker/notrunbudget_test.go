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
	"github.com/loopgate/loopgate/tools"
)

// An attempt whose tool never started (deadline_passed: its worker died
// before the claim) does not use up a call's retry after an unknown
// outcome either. After a second kill (after the claim, before the side
// effect) the reconcile tool, which fences, answers "not applied,
// fenced", and the write is run again; the unknown-outcome branches used
// to count the attempt that never ran, and the run parked on a
// needs_human question (found by review).
func TestAnAttemptNotRunDoesNotUseUpTheRetryAfterReconcile(t *testing.T) {
	t.Parallel()
	var runs, executing, sideEffects atomic.Int32
	m, fns := ungated("create_ticket", &runs, nil)
	m.Timeout = events.Duration(300 * time.Millisecond)
	m.Reconcile = "ticket_status"
	m.ReconcileFences = true
	fns["ticket_status"] = func(ctx context.Context, c tools.Call) (any, error) {
		applied := runs.Load() > 0
		return map[string]bool{"applied": applied, "fenced": !applied}, nil
	}
	b := setup(t, options{
		tools: []tools.Manifest{m, fakeTool("ticket_status", tools.Read, false)}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":7}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{MaxDeliver: 5, AckWait: 300 * time.Millisecond},
		retry:   20 * time.Millisecond,
		workers: 3,
		crash: func(point string) {
			switch {
			case point == "after:executing" && executing.Add(1) == 1:
				runtime.Goexit() // killed after attempt 1's executing, before its claim
			case point == "before:side_effect" && sideEffects.Add(1) == 1:
				runtime.Goexit() // killed after attempt 2's claim, before the tool
			}
		},
	})
	runID := b.submit(task("notrun-budget-1", "ticketer"))
	e := b.waitFor(runID, "finished or a question", func(e events.Event) bool {
		return e.Type == events.TypeFinished || e.Type == events.TypeApprovalRequested
	})
	evs, _, _ := b.env.Journal.Load(t.Context(), "cityops", runID)
	if e.Type != events.TypeFinished || runs.Load() != 1 {
		t.Fatalf("reconcile said the write did not happen, yet it was not run again (tool ran %d times); the run ended at %s\ntrail: %s",
			runs.Load(), e.Type, strings.Join(trail(t, evs), " "))
	}
}
