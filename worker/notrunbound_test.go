package worker_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// Attempts whose tool never started do not use up a call's retries, so a
// bound of their own keeps a call from being begun for ever: at most 3
// per call (README, failure modes). A write whose three attempts each
// ended not run is not begun a fourth time; the model hears the failure.
// The bound used to let a fourth attempt begin.
func TestACallIsNotBegunAfterThreeAttemptsThatNeverRan(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := ungated("create_ticket", &runs, nil)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents: map[string]config.Profile{"ticketer": profile("create_ticket")},
		// Step 1 is the seeded one; the model answers step 2.
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"gave up on the ticket"}}`)},
	})
	tk := task("notrun-bound-1", "ticketer")
	runID := events.RunID(tk.Tenant, tk.TaskID)
	canonical, hash, _ := tools.CanonicalHash([]byte(`{"n":1}`))
	op := events.OperationID(runID, "s1c1")
	at := time.Now().Add(-time.Minute).UTC()
	trailOf := []seeded{
		{events.TypeStarted, 0, "", events.StartedData{Task: tk, Profile: "ticketer", Model: "scripted", Limits: withDefaults(events.Limits{}), Tools: []string{"create_ticket"}}},
		{events.TypeProposed, 1, "", events.ProposedData{Decision: &events.Decision{ToolCalls: []events.ToolCall{{ID: "s1c1", Tool: "create_ticket", Args: canonical}}}}},
		{events.TypeValidated, 1, "s1c1", events.ValidatedData{Status: events.ValidOK, Args: canonical, ArgsHash: hash, Permission: "write"}},
	}
	for n := 1; n <= 3; n++ {
		trailOf = append(trailOf,
			seeded{events.TypeExecuting, 1, "s1c1", events.ExecutingData{OperationID: op, Attempt: n, Deadline: at.Add(time.Second), ArgsHash: hash}},
			seeded{events.TypeExecuted, 1, "s1c1", events.ExecutedData{Status: events.ExecTransient, ErrorClass: events.DeadlinePassed, OperationID: op, Attempt: n,
				Message: "the attempt's worker was gone before it started the tool: not run"}})
	}
	seedTrail(t, b, runID, at, trailOf...)
	b.submit(tk) // the redelivery of the dead workers' task
	evs := b.waitEnd(runID)
	want := []string{"started", "proposed", "validated:ok(create_ticket)"}
	for range 3 {
		want = append(want, "executing(create_ticket)", "executed:transient(create_ticket)")
	}
	assertTrail(t, evs, append(want, "observed(create_ticket)", "proposed:final", "finished:done"))
	if n := runs.Load(); n != 0 {
		t.Errorf("the write ran %d times after three attempts not run, want never", n)
	}
}
