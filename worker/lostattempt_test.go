package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A write whose worker died after its executing event and before it
// claimed the operation never started its tool. The worker that takes the
// run up records that attempt as not run and runs the write as a new
// attempt, with an executing event of its own: its lease is one every
// worker sees. A second driver of the run meanwhile (a wake-up, a
// redelivery) must find the call busy, not take it over, reconcile it
// (the tool has not finished: "not applied") and run it a second time.
func TestAResumedWriteRunsAsANewAttemptUnderALeaseAllSee(t *testing.T) {
	t.Parallel()
	var (
		runs      atomic.Int32
		committed atomic.Bool
		entered   = make(chan struct{})
		release   = make(chan struct{})
		enterOnce sync.Once
		freeOnce  sync.Once
	)
	free := func() { freeOnce.Do(func() { close(release) }) }
	m, fns := ungated("create_ticket", &runs, func(ctx context.Context, c tools.Call) (any, error) {
		enterOnce.Do(func() { close(entered) })
		<-release
		committed.Store(true)
		return map[string]string{"ticket": "T-" + c.OperationID[:8]}, nil
	})
	m.Timeout = events.Duration(20 * time.Second)
	m.Reconcile = "ticket_status"
	m.MaxEffectDelay = events.Duration(time.Second) // ticket_status cannot fence
	fns["ticket_status"] = func(ctx context.Context, c tools.Call) (any, error) {
		return map[string]bool{"applied": committed.Load()}, nil
	}
	b := setup(t, options{
		tools: []tools.Manifest{m, fakeTool("ticket_status", tools.Read, false)}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		workers: 2,
	})
	defer free()

	// The dead worker's trail: its attempt's lease long over, no claim.
	tk := task("lost-unclaimed-1", "ticketer")
	runID := events.RunID(tk.Tenant, tk.TaskID)
	canonical, hash, _ := tools.CanonicalHash([]byte(`{"n":1}`))
	at := time.Now().Add(-time.Minute).UTC()
	seedTrail(t, b, runID, at,
		seeded{events.TypeStarted, 0, "", events.StartedData{Task: tk, Profile: "ticketer", Model: "scripted", Limits: withDefaults(events.Limits{}), Tools: []string{"create_ticket"}}},
		seeded{events.TypeProposed, 1, "", events.ProposedData{Decision: &events.Decision{ToolCalls: []events.ToolCall{{ID: "s1c1", Tool: "create_ticket", Args: canonical}}}}},
		seeded{events.TypeValidated, 1, "s1c1", events.ValidatedData{Status: events.ValidOK, Args: canonical, ArgsHash: hash, Permission: "write"}},
		seeded{events.TypeExecuting, 1, "s1c1", events.ExecutingData{OperationID: events.OperationID(runID, "s1c1"), Attempt: 1, Deadline: at.Add(time.Second), ArgsHash: hash}},
	)
	b.submit(tk) // the redelivery of the dead worker's task
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the write never ran")
	}
	// A second driver while the tool runs: it must see the new lease.
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject(tk.Tenant, runID), nil); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "run busy; looking again when the attempt's lease ends", 1)
	free()

	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, lostThenOKStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	if n := runs.Load(); n != 1 {
		t.Errorf("the write ran %d times, want once", n)
	}
	x := all(evs, events.TypeExecuted)
	var lost events.ExecutedData
	if err := x[0].Decode(&lost); err != nil {
		t.Fatal(err)
	}
	if lost.Attempt != 1 || lost.ErrorClass != events.DeadlinePassed || !strings.Contains(lost.Message, "not run") {
		t.Errorf("the dead attempt's end = %+v, want attempt 1 not run (deadline_passed)", lost)
	}
	second := last[events.ExecutingData](t, evs, events.TypeExecuting)
	if second.Attempt != 2 || second.Deadline.Before(time.Now().Add(10*time.Second)) {
		t.Errorf("the new attempt = %+v, want attempt 2 announcing the tool's 20s deadline", second)
	}
}

// A write whose arguments held a value the redactor masks (so the stored
// trail has only the masked arguments) ran, and its worker died before
// recording the end. The worker that takes the run up cannot run the
// call (it never saw the arguments), but it need not: the operation's
// record says the write completed, with its result. It must not tell the
// model the write was "not run", inviting it to propose the write again.
// Died before the claim, the write is not run, and the next worker, not
// knowing the arguments, says so (args_lost) instead of running it.
func TestARedactedWriteWhoseWorkerDiedIsSettledFromItsRecord(t *testing.T) {
	t.Parallel()
	cases := []struct {
		point string
		runs  int32
		want  []string // the call's events
		obs   string   // in what the model is told
	}{
		{"after:idempotency_record", 1, []string{"executing(create_ticket)", "executed:ok(create_ticket)"}, `"status":"ok"`},
		{"after:executing", 0, []string{"executing(create_ticket)", "executed:transient(create_ticket)", "executed:args_lost(create_ticket)"}, `"error":"args_lost"`},
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			die := dieAt(tc.point, 1)
			m, fns := ungated("create_ticket", &runs, nil)
			m.Timeout = events.Duration(500 * time.Millisecond)
			m.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"contact":{"type":"string"}}}`)
			b := setup(t, options{
				tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
				agents: map[string]config.Profile{"ticketer": profile("create_ticket")},
				scripts: map[string]model.Model{"ticketer": scripted(t,
					`{"tool_calls":[{"tool":"create_ticket","args":{"contact":"jane.roe@example.com"}}]}`,
					`{"final_answer":{"summary":"ok"}}`)},
				crash:   die.hook,
				layout:  journal.Layout{AckWait: 500 * time.Millisecond},
				workers: 2,
			})
			evs := b.waitEnd(b.submit(task("redacted-lost-"+strings.ReplaceAll(tc.point, ":", "-"), "ticketer")))
			die.happened(t)
			if v := last[events.ValidatedData](t, evs, events.TypeValidated); !v.Redacted {
				t.Fatalf("validated = %+v, want the arguments redacted", v)
			}
			assertTrail(t, evs, concat([]string{"started", "proposed", "validated:ok(create_ticket)"}, tc.want,
				[]string{"observed(create_ticket)", "proposed:final", "finished:done"}))
			if n := runs.Load(); n != tc.runs {
				t.Errorf("the write ran %d times, want %d", n, tc.runs)
			}
			if obs := string(dataOf(t, all(evs, events.TypeObserved)[0])); !strings.Contains(obs, tc.obs) {
				t.Errorf("the model was told %s, want %s", obs, tc.obs)
			}
		})
	}
}

// seeded is one event of a trail a test writes as a dead worker left it;
// an event of a call is one of create_ticket's.
type seeded struct {
	typ  events.Type
	step int
	call string
	data any
}

// seedTrail appends evs as run runID's first events, timed at.
func seedTrail(t *testing.T, b *bundle, runID string, at time.Time, evs ...seeded) {
	t.Helper()
	var last uint64
	for i, s := range evs {
		raw, err := json.Marshal(s.data)
		if err != nil {
			t.Fatal(err)
		}
		tool := ""
		if s.call != "" {
			tool = "create_ticket"
		}
		last, err = b.env.Journal.Append(t.Context(), last, events.Event{
			EventID: events.UUIDv7.NewEventID(), RunID: runID, Tenant: "cityops", Seq: uint64(i + 1), Type: s.typ,
			Time: at, Step: s.step, CallID: s.call, Tool: tool, Data: raw,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
