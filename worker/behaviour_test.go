package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// Fake tools, each with a manifest, for the failure classes the CityOps
// tools do not show.
const openSchema = `{"type":"object","properties":{"n":{"type":"integer"}}}`

func fakeTool(name string, perm tools.Permission, parallel bool) tools.Manifest {
	return tools.Manifest{
		Name: name, Description: "test tool " + name, Permission: perm,
		ArgsSchema: json.RawMessage(openSchema), Timeout: events.Duration(2 * time.Second), ParallelSafe: parallel,
	}
}

func profile(toolNames ...string) config.Profile {
	return config.Profile{Model: config.Model{Provider: "scripted"}, Tools: toolNames, Roles: []string{"operator"}}
}

func TestTransientFailureIsRetriedOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("flaky", tools.Read, false)},
		builtins: tools.Builtins{"flaky": func(ctx context.Context, c tools.Call) (any, error) {
			if calls.Add(1) == 1 {
				return nil, fmt.Errorf("%w: upstream 503", tools.ErrTransient)
			}
			return map[string]int{"ok": 1}, nil
		}},
		roles:   map[string]config.Role{"operator": {Call: []string{"flaky", "lookup_complaints", "get_procedure", "draft_escalation", "slow_lookup"}}},
		agents:  map[string]config.Profile{"flaky-agent": profile("flaky")},
		scripts: map[string]model.Model{"flaky-agent": scripted(t, `{"tool_calls":[{"tool":"flaky","args":{}}]}`, `{"final_answer":{"summary":"done"}}`)},
	})
	evs := b.waitEnd(b.submit(task("flaky-1", "flaky-agent")))
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(flaky)",
		"executing(flaky)", "executed:transient(flaky)",
		"executing(flaky)", "executed:ok(flaky)", "observed(flaky)",
		"proposed:final", "finished:done",
	})
	if n := calls.Load(); n != 2 {
		t.Errorf("tool ran %d times, want 2 (one bounded retry)", n)
	}
	if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Totals.ToolCalls != 1 {
		t.Errorf("a retry counted as another call: %d tool calls", fin.Totals.ToolCalls)
	}
}

func TestUnexpectedToolErrorQuarantinesTheToolAndHidesTheError(t *testing.T) {
	t.Parallel()
	const secret = "pq: password authentication failed for user \"cityops_admin\" at 10.0.0.7"
	var calls atomic.Int32
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("broken", tools.Read, false)},
		builtins: tools.Builtins{"broken": func(ctx context.Context, c tools.Call) (any, error) {
			calls.Add(1)
			return nil, errors.New(secret)
		}},
		roles:  map[string]config.Role{"operator": {Call: []string{"broken", "lookup_complaints", "get_procedure", "draft_escalation", "slow_lookup"}}},
		agents: map[string]config.Profile{"broken-agent": profile("broken")},
		scripts: map[string]model.Model{"broken-agent": scripted(t,
			`{"tool_calls":[{"tool":"broken","args":{"n":1}}]}`,
			`{"tool_calls":[{"tool":"broken","args":{"n":2}}]}`,
			`{"final_answer":{"summary":"gave up"}}`)},
	})
	runID := b.submit(task("broken-1", "broken-agent"))
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{
		"started",
		"proposed", "validated:ok(broken)", "executing(broken)", "executed:tool_failed(broken)", "observed(broken)",
		"proposed", "validated:quarantined(broken)", "observed(broken)",
		"proposed:final", "finished:done",
	})
	if n := calls.Load(); n != 1 {
		t.Errorf("quarantined tool ran %d times, want 1", n)
	}
	for _, e := range evs {
		if strings.Contains(string(e.Data), "password") || strings.Contains(string(e.Data), "10.0.0.7") {
			t.Errorf("%s event leaks the raw error: %s", e.Type, e.Data)
		}
	}
	if !strings.Contains(b.logs.String(), "10.0.0.7") {
		t.Errorf("the operator's log lacks the full error")
	}
}

func TestParallelSafeCallsRunConcurrentlyAndAreObservedTogether(t *testing.T) {
	t.Parallel()
	// Each call waits until both have started: sequential execution would
	// time out.
	var started atomic.Int32
	both := make(chan struct{})
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("meet", tools.Read, true)},
		builtins: tools.Builtins{"meet": func(ctx context.Context, c tools.Call) (any, error) {
			if started.Add(1) == 2 {
				close(both)
			}
			select {
			case <-both:
				return map[string]string{"call": c.CallID}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}},
		roles:  map[string]config.Role{"operator": {Call: []string{"meet", "lookup_complaints", "get_procedure", "draft_escalation", "slow_lookup"}}},
		agents: map[string]config.Profile{"meet-agent": profile("meet")},
		scripts: map[string]model.Model{"meet-agent": scripted(t,
			`{"tool_calls":[{"tool":"meet","args":{"n":1}},{"tool":"meet","args":{"n":2}}]}`,
			`{"final_answer":{"summary":"met"}}`)},
	})
	evs := b.waitEnd(b.submit(task("meet-1", "meet-agent")))
	assertTrail(t, evs, []string{
		"started", "proposed",
		"validated:ok(meet)", "validated:ok(meet)",
		"executing(meet)", "executing(meet)",
		"executed:ok(meet)", "executed:ok(meet)",
		"observed(meet)", "observed(meet)",
		"proposed:final", "finished:done",
	})
	obs := all(evs, events.TypeObserved)
	if obs[0].CallID != "s1c1" || obs[1].CallID != "s1c2" {
		t.Errorf("observations out of call order: %s, %s", obs[0].CallID, obs[1].CallID)
	}
}

func TestPermissionDeniedStopsTheRun(t *testing.T) {
	t.Parallel()
	var wrote atomic.Int32
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("erase", tools.Write, false)},
		builtins: tools.Builtins{"erase": func(ctx context.Context, c tools.Call) (any, error) {
			wrote.Add(1)
			return nil, nil
		}},
		roles: map[string]config.Role{"analyst": {Call: []string{"lookup_complaints"}}},
		agents: map[string]config.Profile{"analyst-agent": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "erase"}, Roles: []string{"analyst"},
		}},
		scripts: map[string]model.Model{"analyst-agent": scripted(t,
			`{"tool_calls":[{"tool":"erase","args":{"n":1}}]}`,
			`{"final_answer":{"summary":"never"}}`)},
	})
	tk := task("deny-1", "analyst-agent")
	tk.Principal = events.Principal{ID: "ana@cityops", Roles: []string{"analyst"}}
	evs := b.waitEnd(b.submit(tk))
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(erase)", "denied(erase)", "finished:permission_denied"})
	if started := last[events.StartedData](t, evs, events.TypeStarted); strings.Contains(strings.Join(started.Tools, ","), "erase") {
		t.Errorf("the model was shown a tool the principal may not call: %v", started.Tools)
	}
	if wrote.Load() != 0 {
		t.Errorf("a denied call executed")
	}
}

func TestObservationsAreBoundedAndStayValidJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("flood", tools.Read, false)},
		builtins: tools.Builtins{"flood": func(ctx context.Context, c tools.Call) (any, error) {
			rows := make([]map[string]any, 500)
			for i := range rows {
				rows[i] = map[string]any{"id": i, "text": strings.Repeat("lorem ipsum ", 5)}
			}
			return rows, nil
		}},
		roles: map[string]config.Role{"operator": {Call: []string{"flood", "lookup_complaints", "get_procedure", "draft_escalation", "slow_lookup"}}},
		agents: map[string]config.Profile{"flood-agent": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"flood"}, Roles: []string{"operator"},
			Limits: events.Limits{MaxObservationBytes: 1024},
		}},
		scripts: map[string]model.Model{"flood-agent": scripted(t, `{"tool_calls":[{"tool":"flood","args":{}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	evs := b.waitEnd(b.submit(task("flood-1", "flood-agent")))
	obs := last[events.ObservedData](t, evs, events.TypeObserved)
	if !obs.Truncated || obs.Bytes > 1024 || len(obs.Observation) != obs.Bytes {
		t.Fatalf("observation of %d bytes (truncated=%v), want at most 1024 and marked", obs.Bytes, obs.Truncated)
	}
	var v struct {
		Status string `json:"status"`
		Data   struct {
			Truncated bool `json:"truncated"`
			Total     int  `json:"total"`
		} `json:"data"`
	}
	if err := json.Unmarshal(obs.Observation, &v); err != nil {
		t.Fatalf("truncated observation is not JSON: %v\n%s", err, obs.Observation)
	}
	if v.Status != "ok" || !v.Data.Truncated || v.Data.Total != 500 {
		t.Errorf("truncated view = %s, want status ok, truncated true, total 500", obs.Observation)
	}
}

func TestActiveDeadlineBoundsCallsAndStopsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	tk := task("deadline-1", "slow-lookup-assistant")
	tk.Limits = &events.Limits{MaxActive: events.Duration(time.Second)}
	evs := b.waitEnd(b.submit(tk))
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(slow_lookup)", "executing(slow_lookup)", "executed:timeout(slow_lookup)", "observed(slow_lookup)",
		"finished:deadline",
	})
	ex := last[events.ExecutingData](t, evs, events.TypeExecuting)
	started := evs[0].Time
	if d := ex.Deadline.Sub(started); d > time.Second+100*time.Millisecond {
		t.Errorf("call deadline %s after start, want min(tool timeout 2s, time left 1s)", d)
	}
}

func TestToolCallBudgetStopsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	tk := task("calls-1", "escalation-assistant")
	tk.Limits = &events.Limits{MaxToolCalls: 2}
	evs := b.waitEnd(b.submit(tk))
	assertTrail(t, evs, concat(
		[]string{"started"},
		okStep("get_procedure"), okStep("lookup_complaints"),
		[]string{"proposed", "validated:ok(draft_escalation)", "finished:max_tool_calls"},
	))
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Errorf("a call past the budget wrote %v", files)
	}
}
