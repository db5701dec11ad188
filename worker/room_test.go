package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A second approval arrives while the approved write runs (another
// approver, a double click): its handler records it as approval_rejected,
// taking the run's next seq. The worker running the write must still record
// the result it holds, at once and as it was: not reload, wait out the
// attempt's lease and settle the call from its idempotency record, nor,
// for a write that plainly failed, park the run asking a human whether it
// was applied.
func TestARejectedApprovalDuringTheWriteKeepsItsResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fail   bool
		status string
	}{
		{"the write succeeds", false, "ok"},
		{"the write fails", true, "tool_failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			entered, release := make(chan struct{}, 1), make(chan struct{})
			m := fakeTool("gated_write", tools.Write, false)
			m.Approval = tools.ApprovalRequired
			// A lease long enough that waiting it out would show.
			m.Timeout = events.Duration(20 * time.Second)
			b := setup(t, options{
				tools: []tools.Manifest{m},
				builtins: tools.Builtins{"gated_write": func(ctx context.Context, c tools.Call) (any, error) {
					calls.Add(1)
					entered <- struct{}{}
					<-release
					if tc.fail {
						return nil, errors.New("the ticket system said no")
					}
					return map[string]string{"ticket": "T-1"}, nil
				}},
				roles:  writerRoles("gated_write"),
				agents: map[string]config.Profile{"w": profile("gated_write")},
				scripts: map[string]model.Model{"w": scripted(t,
					`{"tool_calls":[{"tool":"gated_write","args":{"n":1}}]}`,
					`{"final_answer":{"summary":"done"}}`)},
			})
			runID := b.submit(task("room-"+tc.status, "w"))
			b.waitType(runID, events.TypeParked, 1)
			q := b.waitType(runID, events.TypeApprovalRequested, 1)
			var req events.ApprovalRequestedData
			if err := q.Decode(&req); err != nil {
				t.Fatal(err)
			}
			b.publishApproval(runID, q.CallID, req.ArgsHash, "approve", "supervisor@cityops", "go")
			<-entered
			b.publishApproval(runID, q.CallID, req.ArgsHash, "approve", "supervisor@cityops", "go (clicked twice)")
			b.waitType(runID, events.TypeApprovalRejected, 1)
			close(release)

			evs := b.waitEnd(runID)
			assertTrail(t, evs, []string{"started", "proposed", "validated:ok(gated_write)",
				"approval_requested(gated_write)", "parked", "approved:approve(gated_write)",
				"executing(gated_write)", "approval_rejected:not_pending(gated_write)",
				"executed:" + tc.status + "(gated_write)", "observed(gated_write)",
				"proposed:final", "finished:done"})
			if n := calls.Load(); n != 1 {
				t.Errorf("the write ran %d times, want once", n)
			}
			x := last[events.ExecutedData](t, evs, events.TypeExecuted)
			if strings.Contains(x.Message, "already completed") {
				t.Errorf("the result came from the idempotency record, not the worker that ran the write: %q", x.Message)
			}
			if logs := b.logs.String(); strings.Contains(logs, "run busy") {
				t.Errorf("the worker waited out its own attempt's lease:\n%s", logs)
			}
		})
	}
}
