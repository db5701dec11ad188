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
	var paid paidCalls
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents: map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": paid.model(model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			if req.Step == 1 {
				meet.meet(ctx)
			}
			return script.Propose(ctx, req)
		}))},
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
	assertTrail(t, without(evs, events.TypeDiscarded), concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	meet.forced(t)
	if writes.Load() != 1 {
		t.Fatalf("the write ran %d times", writes.Load())
	}
	paid.charged(t, evs)
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
	var paid paidCalls
	script := scripted(t,
		`{"tool_calls":[{"tool":"email_resident","args":{"to":"r@example.org"}}]}`,
		`{"final_answer":{"summary":"nothing sent"}}`)
	b := setup(t, options{
		agents: map[string]config.Profile{"caller": profile("lookup_complaints")},
		scripts: map[string]model.Model{"caller": paid.model(model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
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
		}))},
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
	assertTrail(t, without(evs, events.TypeDiscarded), []string{"started", "proposed", "validated:unknown_tool(email_resident)", "observed(email_resident)", "proposed:final", "finished:done"})
	paid.charged(t, evs)
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

// paidCalls counts the model calls of a run and gives each a usage of
// its own, so a run's totals say which calls they count.
type paidCalls struct{ n atomic.Int32 }

func (p *paidCalls) model(m model.Model) model.Model {
	return model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
		resp, err := m.Propose(ctx, req)
		if err == nil {
			resp.Usage = events.Usage{InputTokens: 1000, OutputTokens: 1 << p.n.Add(1)}
		}
		return resp, err
	})
}

// charged fails t unless the run's finished totals count every model call
// made, each once: the one the forced race's loser paid for in vain
// among them, recorded in one discarded event.
func (p *paidCalls) charged(t *testing.T, evs []events.Event) {
	t.Helper()
	n := int(p.n.Load())
	want := events.Usage{InputTokens: 1000 * n}
	for i := 1; i <= n; i++ {
		want.OutputTokens += 1 << i
	}
	totals := last[events.FinishedData](t, evs, events.TypeFinished).Totals
	if totals.Usage != want {
		t.Errorf("the run's totals count usage %+v, want %+v: all %d model calls, each once", totals.Usage, want, n)
	}
	if totals.Events != len(evs) {
		t.Errorf("the run's totals count %d events, its trail has %d", totals.Events, len(evs))
	}
	if d := all(evs, events.TypeDiscarded); len(d) != 1 {
		t.Errorf("%d discarded events, want 1: the model call the race's loser lost", len(d))
	}
}

// without returns evs without the events of type typ.
func without(evs []events.Event, typ events.Type) []events.Event {
	var out []events.Event
	for _, e := range evs {
		if e.Type != typ {
			out = append(out, e)
		}
	}
	return out
}
