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
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A worker frozen between its retry's deadline check and its claim (a
// SIGSTOP, a frozen VM) wakes after another worker took the call over
// and claimed the operation for a later attempt. It must leave that
// record alone. It used to write its own attempt over it (a retry may
// take over an in-flight record): when the live attempt's worker then
// died after the side effect, the record named an attempt older than the
// lost one, lostAttempt read that as "the tool never started", and the
// write ran a second time (found by review).
func TestAStaleRetryLeavesALaterAttemptsRecordAlone(t *testing.T) {
	t.Parallel()
	var (
		calls, effects       atomic.Int32
		claims, sideEffects  atomic.Int32
		frozen, wake, staleA = make(chan struct{}), make(chan struct{}), make(chan struct{})
		woken, killed        atomic.Bool
	)
	m, fns := ungated("create_ticket", &calls, func(ctx context.Context, c tools.Call) (any, error) {
		if calls.Load() == 1 {
			return nil, fmt.Errorf("%w: upstream 503", tools.ErrTransient)
		}
		effects.Add(1)
		return map[string]string{"ticket": "T-" + c.OperationID[:8]}, nil
	})
	m.Timeout = events.Duration(2 * time.Second)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":7}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		workers: 2,
		crash: func(point string) {
			switch point {
			case "before:claim":
				if claims.Add(1) == 2 {
					// Attempt 2, a retry after the transient failure:
					// its deadline checked, its worker frozen until
					// another worker's attempt has claimed the operation.
					close(frozen)
					<-wake
					woken.Store(true)
				}
			case "before:side_effect":
				if sideEffects.Add(1) == 2 {
					// Attempt 3, by the worker that took the call over:
					// claimed. The frozen worker wakes and does what it
					// does with the operation before the tool goes on.
					close(wake)
					select {
					case <-staleA:
					case <-time.After(20 * time.Second):
					}
				}
			case "before:executed":
				if woken.Load() && !killed.Load() {
					select {
					case <-staleA:
					default:
						close(staleA) // the stale attempt is through runWrite
					}
				}
			case "after:side_effect":
				// The first tool run that took effect is attempt 3's (the
				// stale attempt, if it gets this far, never runs its tool).
				if effects.Load() == 1 && killed.CompareAndSwap(false, true) {
					runtime.Goexit() // attempt 3's worker dies after the side effect
				}
			}
		},
	})
	tk := task("stale-retry-1", "ticketer")
	runID := b.submit(tk)
	select {
	case <-frozen:
	case <-time.After(20 * time.Second):
		t.Fatal("attempt 2 never began")
	}
	// Another worker comes to the run while the first is frozen (after a
	// real SIGSTOP: the message redelivered past AckWait; here a wake-up).
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject(tk.Tenant, runID), nil); err != nil {
		t.Fatal(err)
	}
	// Attempt 3's outcome is unknown after its worker died, and the tool
	// has no reconcile: the run asks a human. It must not run again.
	b.waitFor(runID, "finished or a question", func(e events.Event) bool {
		return e.Type == events.TypeFinished || e.Type == events.TypeApprovalRequested
	})
	evs, _, _ := b.env.Journal.Load(t.Context(), "cityops", runID)
	rec, _, err := idemStore(t, b).Get(t.Context(), events.OperationID(runID, "s1c1"))
	if err != nil {
		t.Fatal(err)
	}
	var ends []string
	for _, e := range all(evs, events.TypeExecuted) {
		var x events.ExecutedData
		_ = e.Decode(&x)
		ends = append(ends, fmt.Sprintf("attempt %d %s/%s", x.Attempt, x.Status, x.ErrorClass))
	}
	if n := effects.Load(); n != 1 || rec.Attempt != 3 {
		t.Fatalf("the write took effect %d times, want once; the record names attempt %d (%s), want 3\ntrail: %s\nexecuted: %s",
			n, rec.Attempt, rec.State, strings.Join(trail(t, evs), " "), strings.Join(ends, "; "))
	}
	if !strings.Contains(b.logs.String(), "a later attempt owns the operation") {
		t.Errorf("the stale attempt did not say why it left the operation alone:\n%s", b.logs.String())
	}
}
