package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
	trailcheck "github.com/loopgate/loopgate/trail"
)

// The tests here kill a worker where a crash costs the run something the
// model did not do, and assert that the run is charged nothing for it and
// its trail stays sound (trail.Check, as make soak and loopgate bench
// check it). Found by review of budgets across restarts.

// death is a crash hook (its hook method) that ends the worker at the
// nth passage of point, once, and says whether it did.
type death struct {
	point  string
	nth    int32
	passed atomic.Int32
	died   chan struct{} // closed as the worker dies
}

// dieAt returns a death at the nth passage of point.
func dieAt(point string, nth int32) *death {
	return &death{point: point, nth: nth, died: make(chan struct{})}
}

func (d *death) hook(p string) {
	if p == d.point && d.passed.Add(1) == d.nth {
		close(d.died)
		runtime.Goexit() // this worker is gone, its message unsettled
	}
}

// happened fails t unless the worker died at the point. A test whose
// point the run never reached (the hook call gone, the path changed)
// would otherwise check a run no crash touched, and pass. It waits a
// little for the death: with a step's events stored together, the point
// after a step's event comes only once the whole step is stored, the
// run's end too when the step ends the run.
func (d *death) happened(t *testing.T) {
	t.Helper()
	select {
	case <-d.died:
	case <-time.After(10 * time.Second):
		t.Fatalf("no worker died at passage %d of %s (passed %d times): the crash this test is about never happened", d.nth, d.point, d.passed.Load())
	}
}

// soundTrail fails t with what trail.Check finds wrong in evs.
func soundTrail(t *testing.T, runID string, evs []events.Event) {
	t.Helper()
	c := trailcheck.New("cityops", runID)
	for i, e := range evs {
		c.Add(trailcheck.Stored{Event: e, StreamSeq: uint64(i + 1), Subject: events.EventSubject("cityops", runID, e.Type), MsgID: fmt.Sprintf("%s/%d", runID, e.Seq)})
	}
	if v := c.Verdict(); len(v.Problems) > 0 {
		t.Errorf("trail.Check: %q", v.Problems)
	}
}

// A write of a tool that dedupes by operation id took effect, and its
// worker died before recording the end. The next worker records the
// outcome unknown and runs the write again, as the manifest allows; the
// tool dedupes it. The trail is sound: it used to be called broken (an
// attempt begun while an earlier one's outcome was unknown), because
// nothing in it said the tool was idempotent.
func TestAnIdempotentWriteRunAgainAfterItsWorkerDiedLeavesASoundTrail(t *testing.T) {
	t.Parallel()
	var (
		runs    atomic.Int32
		mu      sync.Mutex
		applied = map[string]bool{}
	)
	m, fns := ungated("create_ticket", &runs, func(ctx context.Context, c tools.Call) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		applied[c.OperationID] = true // once per operation, however often called
		return map[string]string{"ticket": "T-" + c.OperationID[:8]}, nil
	})
	m.Idempotent = true
	m.Timeout = events.Duration(500 * time.Millisecond)
	die := dieAt("after:side_effect", 1)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		crash:   die.hook,
		layout:  journal.Layout{AckWait: 500 * time.Millisecond},
		workers: 2,
	})
	runID := b.submit(task("idem-unknown-1", "ticketer"))
	evs := b.waitEnd(runID)
	die.happened(t)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(create_ticket)",
		"executing(create_ticket)", "executed:unknown(create_ticket)",
		"executing(create_ticket)", "executed:ok(create_ticket)", "observed(create_ticket)",
		"proposed:final", "finished:done",
	})
	if v := last[events.ValidatedData](t, evs, events.TypeValidated); !v.Idempotent {
		t.Errorf("validated = %+v, want it to say the tool is idempotent", v)
	}
	soundTrail(t, runID, evs)
	mu.Lock()
	defer mu.Unlock()
	if runs.Load() != 2 || len(applied) != 1 {
		t.Errorf("the tool was called %d times for %d operations, want 2 calls of one", runs.Load(), len(applied))
	}
}

// sensitive is a write whose arguments the redactor masks in the stored
// events (the contact is an email address).
func sensitive(t *testing.T, runs *atomic.Int32) (tools.Manifest, tools.Builtins) {
	t.Helper()
	m, fns := ungated("create_ticket", runs, nil)
	m.Timeout = events.Duration(500 * time.Millisecond)
	m.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"contact":{"type":"string"}},"required":["contact"]}`)
	return m, fns
}

// A worker died between proposed and validated of a call whose arguments
// were redacted. The next worker cannot know them and refuses the call
// (validated invalid_arguments, redacted) so the model proposes it again.
// That refusal is loopgate's loss, not the model's mistake: with
// max_corrections 1 and one real mistake already made, it used to stop
// the run invalid_decisions.
func TestARefusalOfArgumentsACrashLostIsNoCorrection(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := sensitive(t, &runs)
	const good = `{"tool_calls":[{"tool":"create_ticket","args":{"contact":"jane.roe@example.com"}}]}`
	die := dieAt("after:proposed", 2)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents: map[string]config.Profile{"ticketer": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"create_ticket"}, Roles: []string{"operator"},
			Limits: events.Limits{MaxCorrections: 1},
		}},
		scripts: map[string]model.Model{"ticketer": scripted(t,
			`{"tool_calls":[{"tool":"create_ticket","args":{}}]}`, // the model's own mistake
			good, good, `{"final_answer":{"summary":"ok"}}`)},
		crash:   die.hook,
		layout:  journal.Layout{AckWait: 500 * time.Millisecond},
		workers: 2,
	})
	runID := b.submit(task("redacted-refusal-1", "ticketer"))
	evs := b.waitEnd(runID)
	die.happened(t)
	if runs.Load() != 1 {
		t.Errorf("the write ran %d times, want once", runs.Load())
	}
	soundTrail(t, runID, evs)
	if batchedModes() {
		// A step's events go to the stream together: no kill falls
		// between proposed and validated. The kill after them loses the
		// arguments of an attempt begun (the next test's case).
		assertTrail(t, evs, []string{"started",
			"proposed", "validated:invalid_arguments(create_ticket)", "observed(create_ticket)",
			"proposed", "validated:ok(create_ticket)", "executing(create_ticket)", "executed:transient(create_ticket)", "executed:args_lost(create_ticket)", "observed(create_ticket)",
			"proposed", "validated:ok(create_ticket)", "executing(create_ticket)", "executed:ok(create_ticket)", "observed(create_ticket)",
			"proposed:final", "finished:done"})
		return
	}
	assertTrail(t, evs, []string{"started",
		"proposed", "validated:invalid_arguments(create_ticket)", "observed(create_ticket)",
		"proposed", "validated:invalid_arguments(create_ticket)", "observed(create_ticket)",
		"proposed", "validated:ok(create_ticket)", "executing(create_ticket)", "executed:ok(create_ticket)", "observed(create_ticket)",
		"proposed:final", "finished:done"})
	refused := all(evs, events.TypeValidated)[1]
	var v events.ValidatedData
	if err := refused.Decode(&v); err != nil || !v.Redacted {
		t.Errorf("the refusal of the lost arguments = %+v (%v), want it marked redacted", v, err)
	}
	st, err := events.Fold(evs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Corrections["create_ticket"] != 1 || st.Rejected != 2 {
		t.Errorf("corrections %v, rejected %d: want the model's one mistake counted a correction, both refusals rejected", st.Corrections, st.Rejected)
	}
}

// A worker died after the executing of a write whose arguments were
// redacted, before the tool started. The next worker records the attempt
// not run, and, not knowing the arguments, ends the call args_lost; the
// model proposes it again, the same call. That is no repeat of the
// model's: with max_repeated_calls 1 it used to stop the run
// repeated_call.
func TestACallWhoseArgumentsACrashLostIsNoRepeat(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := sensitive(t, &runs)
	const call = `{"tool_calls":[{"tool":"create_ticket","args":{"contact":"jane.roe@example.com"}}]}`
	die := dieAt("after:executing", 1)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents: map[string]config.Profile{"ticketer": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"create_ticket"}, Roles: []string{"operator"},
			Limits: events.Limits{MaxRepeatedCalls: 1},
		}},
		scripts: map[string]model.Model{"ticketer": scripted(t, call, call, `{"final_answer":{"summary":"ok"}}`)},
		crash:   die.hook,
		layout:  journal.Layout{AckWait: 500 * time.Millisecond},
		workers: 2,
	})
	runID := b.submit(task("args-lost-repeat-1", "ticketer"))
	evs := b.waitEnd(runID)
	die.happened(t)
	assertTrail(t, evs, []string{"started",
		"proposed", "validated:ok(create_ticket)",
		"executing(create_ticket)", "executed:transient(create_ticket)", "executed:args_lost(create_ticket)", "observed(create_ticket)",
		"proposed", "validated:ok(create_ticket)", "executing(create_ticket)", "executed:ok(create_ticket)", "observed(create_ticket)",
		"proposed:final", "finished:done"})
	if runs.Load() != 1 {
		t.Errorf("the write ran %d times, want once", runs.Load())
	}
	soundTrail(t, runID, evs)
}
