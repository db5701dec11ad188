package worker_test

import (
	"context"
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

// rendezvous makes the first two callers wait for each other (or for a
// timeout), so two workers are provably inside the same step at once. It
// records whether they were: counting arrivals is not enough, since a
// second caller that comes after the first gave up waiting arrives too.
type rendezvous struct {
	mu     sync.Mutex
	inside int  // callers waiting now
	met    bool // two callers were inside at once
	both   chan struct{}
}

func newRendezvous() *rendezvous { return &rendezvous{both: make(chan struct{})} }

func (r *rendezvous) meet(ctx context.Context) {
	r.mu.Lock()
	r.inside++
	if r.inside == 2 && !r.met {
		r.met = true
		close(r.both)
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inside--
		r.mu.Unlock()
	}()
	select {
	case <-r.both:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
}

// forced fails t unless two callers were inside the rendezvous at once.
func (r *rendezvous) forced(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.met {
		t.Fatal("no two workers were inside step 1's model call at once: the race was not forced")
	}
}

// Two workers of two pools (two processes) are forced onto one run: the
// task goes to one, a wake-up of the same run to the other, and both are
// made to propose the same step at the same moment. Every append is
// conditional on the run's last sequence, so only one of them extends the
// run at each point; the loser reloads and goes on from the winner's
// events, and the tool runs only for whoever won the executing append.
func TestTwoWorkersForcedOntoOneRunNeverBothWrite(t *testing.T) {
	t.Parallel()
	var writes atomic.Int32
	meet := newRendezvous()
	script := scripted(t,
		`{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`,
		`{"final_answer":{"summary":"one ticket"}}`)
	m, fns := ungated("create_ticket", &writes, func(ctx context.Context, c tools.Call) (any, error) {
		time.Sleep(100 * time.Millisecond) // long enough for the other worker to look
		return map[string]string{"ticket": "T-1"}, nil
	})
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents: map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			if req.Step == 1 {
				meet.meet(ctx)
			}
			return script.Propose(ctx, req)
		})},
		retry:   50 * time.Millisecond,
		workers: 1,
	})
	b.secondPool()

	tk := task("race-run-1", "ticketer")
	runID := b.submit(tk)
	b.waitType(runID, events.TypeStarted, 1)
	// The second worker is woken on the same run while the first is in it.
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	meet.forced(t)
	if writes.Load() != 1 {
		t.Fatalf("the write ran %d times", writes.Load())
	}
}

// A worker that loses a race to another driver of the run (one that asked
// the model since it read the run) leaves the run to it: it settles its
// message and looks again an AckWait later, rather than go on beside the
// winner and ask the model at each step the winner asks it, a second
// model call per step that no budget counts. (Where the winner is in a
// tool, the loser already waits out the call's lease: "run busy".)
//
// Both workers are made to propose step 1 at once; its decision names no
// tool, so no lease holds the loser back. Step 2's model call waits up to
// 3 s for a second caller: a loser that went on would come within about a
// second, through its reloads or its contended wake-up.
func TestTheLoserOfARaceLeavesTheRunToItsDriver(t *testing.T) {
	t.Parallel()
	meet := newRendezvous()
	var calls [3]atomic.Int32
	second := make(chan struct{})
	script := scripted(t,
		`{"tool_calls":[{"tool":"email_resident","args":{"to":"r@example.org"}}]}`,
		`{"final_answer":{"summary":"nothing sent"}}`)
	b := setup(t, options{
		agents: map[string]config.Profile{"caller": profile("lookup_complaints")},
		scripts: map[string]model.Model{"caller": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			if req.Step < len(calls) {
				switch calls[req.Step].Add(1) {
				case 1:
					if req.Step == 2 {
						select { // the winner waits here for a second caller
						case <-second:
						case <-time.After(3 * time.Second):
						}
					}
				case 2:
					if req.Step == 2 {
						close(second)
					}
				}
			}
			if req.Step == 1 {
				meet.meet(ctx)
			}
			return script.Propose(ctx, req)
		})},
		retry:   50 * time.Millisecond,
		workers: 1,
	})
	b.secondPool()

	runID := b.submit(task("race-yield-1", "caller"))
	b.waitType(runID, events.TypeStarted, 1)
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:unknown_tool(email_resident)", "observed(email_resident)", "proposed:final", "finished:done"})
	meet.forced(t)
	if got := calls[1].Load(); got != 2 {
		t.Fatalf("step 1 was proposed %d times, want 2: the race was not forced", got)
	}
	if got := calls[2].Load(); got != 1 {
		t.Errorf("the model was asked %d times at step 2, want once: the loser went on beside the winner\n%s", got, b.logs.String())
	}
	if !strings.Contains(b.logs.String(), "leaving it to that worker") {
		t.Errorf("no worker logged that it left the run to its driver:\n%s", b.logs.String())
	}
}
