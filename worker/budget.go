package worker

import (
	"fmt"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// stop is why a run must end now; the zero value means "go on".
type stop struct {
	reason events.Reason
	detail string
}

func (s stop) ok() bool { return s.reason == "" }

// beforeStep checks the budgets that guard the next model call.
func beforeStep(s *events.RunState, l events.Limits, now, deadline time.Time) stop {
	if s.Steps >= l.MaxSteps {
		return stop{events.ReasonMaxSteps, fmt.Sprintf("the step budget of %d is used up", l.MaxSteps)}
	}
	if s := inTime(l, now, deadline); !s.ok() {
		return s
	}
	// Stop before the next model call would exceed a budget. What it will
	// cost is not known in advance; the latest call's is the estimate (a
	// context only grows, so this errs towards stopping early).
	if l.MaxTokens > 0 {
		spent := s.Usage.InputTokens + s.Usage.OutputTokens
		next := s.LastUsage.InputTokens + s.LastUsage.OutputTokens
		if spent+next > l.MaxTokens {
			return stop{events.ReasonBudget, fmt.Sprintf("the token budget of %d would be exceeded: %d spent, the last call used %d", l.MaxTokens, spent, next)}
		}
	}
	if l.MaxCostUSD > 0 && s.CostUSD+s.LastCostUSD > l.MaxCostUSD {
		return stop{events.ReasonBudget, fmt.Sprintf("the cost budget of $%.4f would be exceeded: $%.4f spent, the last call cost $%.4f", l.MaxCostUSD, s.CostUSD, s.LastCostUSD)}
	}
	return stop{}
}

// beforeCall checks the budgets that guard one tool call.
func beforeCall(s *events.RunState, l events.Limits, m tools.Manifest, now, deadline time.Time) stop {
	if s.ToolCalls >= l.MaxToolCalls {
		return stop{events.ReasonMaxToolCalls, fmt.Sprintf("the tool call budget of %d is used up", l.MaxToolCalls)}
	}
	// Zero is "not set": the limits of a run started before the bound.
	if m.Permission == tools.Write && l.MaxWriteActions > 0 && s.WriteActions >= l.MaxWriteActions {
		return stop{events.ReasonMaxToolCalls, fmt.Sprintf("the budget of %d write actions is used up", l.MaxWriteActions)}
	}
	if m.MaxCallsPerRun > 0 && s.PerTool[m.Name] >= m.MaxCallsPerRun {
		return stop{events.ReasonMaxToolCalls, fmt.Sprintf("the budget of %d calls of %s is used up", m.MaxCallsPerRun, m.Name)}
	}
	return inTime(l, now, deadline)
}

// inTime checks the run's active time budget: what every model call, tool
// call and retry of one needs some of.
func inTime(l events.Limits, now, deadline time.Time) stop {
	if !now.Before(deadline) {
		return stop{events.ReasonDeadline, fmt.Sprintf("the active time budget of %s is used up", l.MaxActive.D())}
	}
	return stop{}
}

// afterValidation checks the bounds on a run's mistakes once a call's
// validation is recorded: refused calls per tool, and identical calls.
func afterValidation(s *events.RunState, l events.Limits, tool string, v *events.ValidatedData) stop {
	if v.Status != events.ValidOK {
		if n := s.Corrections[tool]; n > l.MaxCorrections {
			return stop{events.ReasonInvalidDecisions, fmt.Sprintf("%d refused calls of %q, over the bound of %d correction attempts", n, tool, l.MaxCorrections)}
		}
		return stop{}
	}
	if n := s.Repeats[events.RepeatKey(tool, v.ArgsHash)]; n > l.MaxRepeatedCalls {
		return stop{events.ReasonRepeatedCall, fmt.Sprintf("%s called %d times with the same arguments, over the bound of %d", tool, n, l.MaxRepeatedCalls)}
	}
	return stop{}
}

// afterInvalidDecision checks the bound on malformed decisions.
func afterInvalidDecision(s *events.RunState, l events.Limits) stop {
	if s.InvalidDecisions > l.MaxInvalidDecisions {
		return stop{events.ReasonInvalidDecisions, fmt.Sprintf("%d invalid decisions, over the bound of %d", s.InvalidDecisions, l.MaxInvalidDecisions)}
	}
	return stop{}
}

// callDeadline is min(tool timeout, time left in the run).
func callDeadline(now, runDeadline time.Time, timeout time.Duration) time.Time {
	d := now.Add(timeout)
	if runDeadline.Before(d) {
		return runDeadline
	}
	return d
}
