package worker

import (
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

func TestBudgets(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	limits := events.Limits{MaxSteps: 4, MaxToolCalls: 3, MaxActive: events.Duration(time.Minute), MaxInvalidDecisions: 2, MaxCorrections: 2, MaxRepeatedCalls: 2, MaxWriteActions: 2}
	state := func(mod func(s *events.RunState)) *events.RunState {
		s := &events.RunState{PerTool: map[string]int{}, Corrections: map[string]int{}, Repeats: map[string]int{}}
		if mod != nil {
			mod(s)
		}
		return s
	}
	lookup := tools.Manifest{Name: "lookup", MaxCallsPerRun: 2}
	draft := tools.Manifest{Name: "draft", Permission: tools.Write}
	cases := []struct {
		name  string
		check func() stop
		want  events.Reason
	}{
		{"steps left", func() stop {
			return beforeStep(state(func(s *events.RunState) { s.Steps = 3 }), limits, now, now.Add(time.Second))
		}, ""},
		{"steps used up", func() stop {
			return beforeStep(state(func(s *events.RunState) { s.Steps = 4 }), limits, now, now.Add(time.Second))
		}, events.ReasonMaxSteps},
		{"deadline reached before a step", func() stop { return beforeStep(state(nil), limits, now, now) }, events.ReasonDeadline},
		{"calls left", func() stop {
			return beforeCall(state(func(s *events.RunState) { s.ToolCalls = 2 }), limits, lookup, now, now.Add(time.Second))
		}, ""},
		{"run's calls used up", func() stop {
			return beforeCall(state(func(s *events.RunState) { s.ToolCalls = 3 }), limits, lookup, now, now.Add(time.Second))
		}, events.ReasonMaxToolCalls},
		{"tool's calls used up", func() stop {
			return beforeCall(state(func(s *events.RunState) { s.PerTool["lookup"] = 2 }), limits, lookup, now, now.Add(time.Second))
		}, events.ReasonMaxToolCalls},
		{"unbounded tool", func() stop {
			return beforeCall(state(func(s *events.RunState) { s.PerTool["other"] = 9 }), limits, tools.Manifest{Name: "other"}, now, now.Add(time.Second))
		}, ""},
		{"writes left", func() stop {
			return beforeCall(state(func(s *events.RunState) { s.ToolCalls, s.WriteActions = 1, 1 }), limits, draft, now, now.Add(time.Second))
		}, ""},
		{"writes used up", func() stop {
			return beforeCall(state(func(s *events.RunState) { s.ToolCalls, s.WriteActions = 2, 2 }), limits, draft, now, now.Add(time.Second))
		}, events.ReasonMaxToolCalls},
		{"writes used up, a read left", func() stop {
			return beforeCall(state(func(s *events.RunState) { s.ToolCalls, s.WriteActions = 2, 2 }), limits, tools.Manifest{Name: "other", Permission: tools.Read}, now, now.Add(time.Second))
		}, ""},
		{"limits of a run started before the write bound", func() stop {
			old := limits
			old.MaxWriteActions = 0
			return beforeCall(state(func(s *events.RunState) { s.ToolCalls, s.WriteActions = 2, 2 }), old, draft, now, now.Add(time.Second))
		}, ""},
		{"deadline reached before a call", func() stop { return beforeCall(state(nil), limits, lookup, now.Add(time.Second), now) }, events.ReasonDeadline},
		{"corrections within bound", func() stop {
			return afterValidation(state(func(s *events.RunState) { s.Corrections["lookup"] = 2 }), limits, "lookup", &events.ValidatedData{Status: events.InvalidArguments})
		}, ""},
		{"corrections past bound", func() stop {
			return afterValidation(state(func(s *events.RunState) { s.Corrections["lookup"] = 3 }), limits, "lookup", &events.ValidatedData{Status: events.UnknownTool})
		}, events.ReasonInvalidDecisions},
		{"repeats within bound", func() stop {
			return afterValidation(state(func(s *events.RunState) { s.Repeats[events.RepeatKey("lookup", "h")] = 2 }), limits, "lookup", &events.ValidatedData{Status: events.ValidOK, ArgsHash: "h"})
		}, ""},
		{"repeats past bound", func() stop {
			return afterValidation(state(func(s *events.RunState) { s.Repeats[events.RepeatKey("lookup", "h")] = 3 }), limits, "lookup", &events.ValidatedData{Status: events.ValidOK, ArgsHash: "h"})
		}, events.ReasonRepeatedCall},
		{"other arguments are not a repeat", func() stop {
			return afterValidation(state(func(s *events.RunState) { s.Repeats[events.RepeatKey("lookup", "h")] = 9 }), limits, "lookup", &events.ValidatedData{Status: events.ValidOK, ArgsHash: "other"})
		}, ""},
		{"invalid decisions within bound", func() stop {
			return afterInvalidDecision(state(func(s *events.RunState) { s.InvalidDecisions = 2 }), limits)
		}, ""},
		{"invalid decisions past bound", func() stop {
			return afterInvalidDecision(state(func(s *events.RunState) { s.InvalidDecisions = 3 }), limits)
		}, events.ReasonInvalidDecisions},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := c.check()
			if got.reason != c.want {
				t.Fatalf("reason = %q (%s), want %q", got.reason, got.detail, c.want)
			}
			if got.reason != "" && got.detail == "" {
				t.Fatalf("stop %q without a detail", got.reason)
			}
		})
	}
}

func TestCallDeadlineIsTheEarlierOfToolTimeoutAndRunDeadline(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		runDeadline time.Time
		timeout     time.Duration
		want        time.Time
	}{
		{"tool timeout first", now.Add(time.Minute), 2 * time.Second, now.Add(2 * time.Second)},
		{"run deadline first", now.Add(time.Second), 2 * time.Second, now.Add(time.Second)},
		{"equal", now.Add(2 * time.Second), 2 * time.Second, now.Add(2 * time.Second)},
	}
	for _, c := range cases {
		if got := callDeadline(now, c.runDeadline, c.timeout); !got.Equal(c.want) {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
}

func TestTokenAndCostBudgetsStopBeforeTheNextCallWouldExceedThem(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	cases := []struct {
		name   string
		limits events.Limits
		state  events.RunState
		want   events.Reason
	}{
		{"no budgets", events.Limits{MaxSteps: 9}, events.RunState{Usage: events.Usage{InputTokens: 1e6}}, ""},
		{"tokens left for one more call", events.Limits{MaxSteps: 9, MaxTokens: 1000}, events.RunState{Usage: events.Usage{InputTokens: 400, OutputTokens: 100}, LastUsage: events.Usage{InputTokens: 400, OutputTokens: 100}}, ""},
		{"the next call would exceed the tokens", events.Limits{MaxSteps: 9, MaxTokens: 1000}, events.RunState{Usage: events.Usage{InputTokens: 700, OutputTokens: 100}, LastUsage: events.Usage{InputTokens: 250, OutputTokens: 50}}, events.ReasonBudget},
		{"cost left", events.Limits{MaxSteps: 9, MaxCostUSD: 0.01}, events.RunState{CostUSD: 0.004, LastCostUSD: 0.004}, ""},
		{"the next call would exceed the cost", events.Limits{MaxSteps: 9, MaxCostUSD: 0.01}, events.RunState{CostUSD: 0.008, LastCostUSD: 0.004}, events.ReasonBudget},
	}
	for _, c := range cases {
		if got := beforeStep(&c.state, c.limits, now, later); got.reason != c.want {
			t.Errorf("%s: reason %q (%s), want %q", c.name, got.reason, got.detail, c.want)
		}
	}
}
