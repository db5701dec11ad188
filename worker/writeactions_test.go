package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// DESIGN bounds a run's write actions; max_write_actions is that bound. A
// run whose model asks for a third write under a bound of two runs two,
// reads on, and stops with max_tool_calls, its detail naming the bound,
// before the third write runs. The count comes from the events: the
// finished event's totals say two.
func TestTheWriteActionBoundStopsTheRunBeforeTheWriteOverIt(t *testing.T) {
	t.Parallel()
	var writes atomic.Int32
	m := fakeTool("create_ticket", tools.Write, false)
	m.Approval = tools.ApprovalNone
	p := profile("create_ticket", "lookup_complaints")
	p.Limits.MaxWriteActions = 2
	b := setup(t, options{
		tools: []tools.Manifest{m},
		builtins: tools.Builtins{"create_ticket": func(context.Context, tools.Call) (any, error) {
			writes.Add(1)
			return map[string]string{"ticket": "T-1"}, nil
		}},
		roles:  writerRoles("create_ticket"),
		agents: map[string]config.Profile{"ticketer": p},
		scripts: map[string]model.Model{"ticketer": scripted(t,
			`{"tool_calls":[{"tool":"create_ticket","args":{"n":1}},{"tool":"lookup_complaints","args":{}}]}`,
			`{"tool_calls":[{"tool":"create_ticket","args":{"n":2}}]}`,
			`{"tool_calls":[{"tool":"lookup_complaints","args":{"category":"noise"}},{"tool":"create_ticket","args":{"n":3}}]}`,
			`{"final_answer":{"summary":"three tickets"}}`)},
	})
	runID := b.submit(task("write-bound-1", "ticketer"))
	// lookup_complaints says untrusted_output: the second write, proposed
	// after its output, waits for a human.
	b.autoApprove(runID, "supervisor@cityops", "approve", "checked")
	evs := b.waitEnd(runID)
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	if fin.Reason != events.ReasonMaxToolCalls || !strings.Contains(fin.Detail, "the budget of 2 write actions is used up") {
		t.Errorf("finished %s (%q), want max_tool_calls naming the write bound", fin.Reason, fin.Detail)
	}
	if n := writes.Load(); n != 2 {
		t.Errorf("the write tool ran %d times, want 2", n)
	}
	if fin.Totals.WriteActions != 2 || fin.Totals.ToolCalls != 4 {
		t.Errorf("totals: %d write actions of %d calls, want 2 of 4 (the third decision's lookup ran)", fin.Totals.WriteActions, fin.Totals.ToolCalls)
	}
}
