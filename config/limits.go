package config

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/loopgate/loopgate/events"
)

// DefaultLimits are the limits of a profile that sets none: each zero field
// of a profile's limits takes the value here. Change it only before loading
// a config.
var DefaultLimits = events.Limits{
	MaxSteps:             10,
	MaxToolCalls:         20,
	MaxWriteActions:      10,
	MaxActive:            events.Duration(2 * time.Minute),
	MaxInvalidDecisions:  3,
	MaxCorrections:       3,
	MaxRepeatedCalls:     3,
	MaxObservationBytes:  4096,
	MaxRunObservationKiB: 64,
}

// withDefaults returns l with each zero field set from DefaultLimits.
func withDefaults(l events.Limits) events.Limits {
	d := DefaultLimits
	return events.Limits{
		MaxSteps:             cmp.Or(l.MaxSteps, d.MaxSteps),
		MaxToolCalls:         cmp.Or(l.MaxToolCalls, d.MaxToolCalls),
		MaxWriteActions:      cmp.Or(l.MaxWriteActions, d.MaxWriteActions),
		MaxActive:            cmp.Or(l.MaxActive, d.MaxActive),
		MaxInvalidDecisions:  cmp.Or(l.MaxInvalidDecisions, d.MaxInvalidDecisions),
		MaxCorrections:       cmp.Or(l.MaxCorrections, d.MaxCorrections),
		MaxRepeatedCalls:     cmp.Or(l.MaxRepeatedCalls, d.MaxRepeatedCalls),
		MaxObservationBytes:  cmp.Or(l.MaxObservationBytes, d.MaxObservationBytes),
		MaxRunObservationKiB: cmp.Or(l.MaxRunObservationKiB, d.MaxRunObservationKiB),
		MaxTokens:            cmp.Or(l.MaxTokens, d.MaxTokens),
		MaxCostUSD:           cmp.Or(l.MaxCostUSD, d.MaxCostUSD),
	}
}

// EffectiveLimits returns the limits a run obeys: the profile's (its zero
// fields taking DefaultLimits), each tightened by the task's non-zero field.
// A task may only tighten: a task field above the profile's, or negative,
// is reported as a FieldError on "/limits/<key>" (the task's field) and the
// profile's value stands. A nil task gives the profile's limits. The
// returned limits are usable even when there are errors; the caller decides
// whether errors reject the task.
func EffectiveLimits(profile events.Limits, task *events.Limits) (events.Limits, []events.FieldError) {
	eff := withDefaults(profile)
	if task == nil {
		return eff, nil
	}
	var errs []events.FieldError
	ints := []struct {
		key  string
		eff  *int
		task int
	}{
		{"max_steps", &eff.MaxSteps, task.MaxSteps},
		{"max_tool_calls", &eff.MaxToolCalls, task.MaxToolCalls},
		{"max_write_actions", &eff.MaxWriteActions, task.MaxWriteActions},
		{"max_invalid_decisions", &eff.MaxInvalidDecisions, task.MaxInvalidDecisions},
		{"max_corrections", &eff.MaxCorrections, task.MaxCorrections},
		{"max_repeated_calls", &eff.MaxRepeatedCalls, task.MaxRepeatedCalls},
		{"max_observation_bytes", &eff.MaxObservationBytes, task.MaxObservationBytes},
		{"max_run_observation_kib", &eff.MaxRunObservationKiB, task.MaxRunObservationKiB},
	}
	for _, f := range ints {
		if e := tighten(f.eff, f.task, f.key, strconv.Itoa); e != nil {
			errs = append(errs, *e)
		}
	}
	if e := tighten(&eff.MaxActive, task.MaxActive, "max_active", func(d events.Duration) string {
		return d.D().String()
	}); e != nil {
		errs = append(errs, *e)
	}
	// Token and cost budgets: zero is "no bound", which any task value
	// tightens.
	if e := tightenBudget(&eff.MaxTokens, task.MaxTokens, "max_tokens", strconv.Itoa); e != nil {
		errs = append(errs, *e)
	}
	if e := tightenBudget(&eff.MaxCostUSD, task.MaxCostUSD, "max_cost_usd", func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }); e != nil {
		errs = append(errs, *e)
	}
	slices.SortFunc(errs, func(a, b events.FieldError) int { return cmp.Compare(a.Field, b.Field) })
	return eff, errs
}

// tightenBudget is tighten for bounds whose zero means unbounded.
func tightenBudget[T int | float64](eff *T, task T, key string, show func(T) string) *events.FieldError {
	switch {
	case task == 0:
		return nil
	case task < 0:
		return &events.FieldError{Field: "/limits/" + key, Message: "must not be negative"}
	case *eff != 0 && task > *eff:
		return &events.FieldError{Field: "/limits/" + key, Message: fmt.Sprintf("may only tighten the profile's limit of %s", show(*eff))}
	}
	*eff = task
	return nil
}

// tighten sets *eff to task when task is set (non-zero) and no larger.
func tighten[T int | events.Duration](eff *T, task T, key string, show func(T) string) *events.FieldError {
	switch {
	case task == 0:
		return nil
	case task < 0:
		return &events.FieldError{Field: "/limits/" + key, Message: "must not be negative"}
	case task > *eff:
		return &events.FieldError{
			Field:   "/limits/" + key,
			Message: fmt.Sprintf("may only tighten the profile's limit of %s", show(*eff)),
		}
	}
	*eff = task
	return nil
}

// ZeroLimits refuses each limit that given (a limits object as written,
// by key) names and l, its decoding, holds as zero, which the limits take
// for "not set": "max_active": "0s" (or "0.0000000001s") passes the
// schemas, as does "max_cost_usd": 1e-400 in a task, and either would
// leave the run the looser limit of what is not set, or no cost bound at
// all. Fields are named under at; unset says what leaving one out gives.
// The count limits have a schema minimum of 1.
func ZeroLimits(given map[string]json.RawMessage, l events.Limits, at, unset string) []events.FieldError {
	var errs []events.FieldError
	if _, ok := given["max_active"]; ok && l.MaxActive == 0 {
		errs = append(errs, events.FieldError{Field: at + "/max_active", Message: "is zero: give a positive duration, or leave it out for " + unset})
	}
	if _, ok := given["max_cost_usd"]; ok && l.MaxCostUSD == 0 {
		errs = append(errs, events.FieldError{Field: at + "/max_cost_usd", Message: "is zero once read (too small for a float64): give a positive amount, or leave it out for " + unset})
	}
	return errs
}
