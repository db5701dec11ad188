package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// maxAttempts bounds the attempts of one call: a transient failure gets at
// most one retry.
const maxAttempts = 2

// maxRecordedResult bounds the result kept in an executed event.
const maxRecordedResult = 16 << 10

// runCalls carries the current decision's calls through validation,
// authorization, execution and observation. Each phase skips what the
// events say is done, so a resumed run picks up mid-decision.
func (r *run) runCalls(ctx context.Context) error {
	step := r.st.CurrentStep
	for _, c := range r.st.CurrentCalls {
		if c.Validated != nil {
			continue
		}
		v := r.validate(c.Call)
		if err := r.append(ctx, events.TypeValidated, step, c.Call.ID, c.Call.Tool, v); err != nil {
			return err
		}
		if s := afterValidation(r.st, r.limits, c.Call.Tool, v); !s.ok() {
			return r.finish(ctx, s, nil)
		}
	}
	for {
		group := r.nextGroup()
		if len(group) == 0 {
			break
		}
		if err := r.executeGroup(ctx, group); err != nil {
			return err
		}
		if r.st.Finished != nil {
			return nil
		}
	}
	for _, c := range r.st.CurrentCalls {
		if c.Observed {
			continue
		}
		obs, err := bounded(r.observe(c), r.observationLimit())
		if err != nil {
			return err
		}
		if err := r.append(ctx, events.TypeObserved, step, c.Call.ID, c.Call.Tool, obs); err != nil {
			return err
		}
	}
	return nil
}

// validate checks a call against the tools offered and its schema.
func (r *run) validate(call events.ToolCall) *events.ValidatedData {
	t, ok := r.p.registry.Lookup(call.Tool)
	if !ok || !slices.Contains(r.profile.Tools, call.Tool) {
		return &events.ValidatedData{Status: events.UnknownTool, AvailableTools: r.offered}
	}
	if r.st.Quarantined[call.Tool] {
		return &events.ValidatedData{Status: events.Quarantined}
	}
	canonical, hash, errs := t.Validate(call.Args)
	if len(errs) > 0 {
		return &events.ValidatedData{Status: events.InvalidArguments, Errors: errs}
	}
	return &events.ValidatedData{
		Status:     events.ValidOK,
		Args:       canonical,
		ArgsHash:   hash,
		Permission: string(t.Manifest().Permission),
	}
}

// pending reports whether a call still needs an attempt.
func pending(c *events.CallState) bool {
	if c.Validated == nil || c.Validated.Status != events.ValidOK || c.Denied != nil {
		return false
	}
	if c.InFlight() {
		return true
	}
	last := c.LastExecuted()
	return last == nil || (last.Status == events.ExecTransient && c.Attempts() < maxAttempts)
}

// nextGroup returns the next calls to execute together: one call, or a run
// of consecutive fresh calls of parallel-safe tools.
func (r *run) nextGroup() []*events.CallState {
	var group []*events.CallState
	for _, c := range r.st.CurrentCalls {
		if !pending(c) {
			if len(group) > 0 {
				break
			}
			continue
		}
		fresh := c.Attempts() == 0 && r.parallelSafe(c.Call.Tool)
		switch {
		case len(group) == 0:
			group = append(group, c)
			if !fresh {
				return group
			}
		case fresh:
			group = append(group, c)
		default:
			return group
		}
	}
	return group
}

func (r *run) parallelSafe(name string) bool {
	t, ok := r.p.registry.Lookup(name)
	if !ok {
		return false
	}
	m := t.Manifest()
	return m.ParallelSafe && m.Permission == tools.Read && !r.task.DryRun
}

// attempt is one call about to run.
type attempt struct {
	c    *events.CallState
	tool *tools.Tool
	ex   events.ExecutingData
	out  events.ExecutedData
	err  error
}

// executeGroup authorizes, budgets and records the write-ahead executing
// event of each call of group, runs them (concurrently when more than one)
// and records how each ended, in call order.
func (r *run) executeGroup(ctx context.Context, group []*events.CallState) error {
	step := r.st.CurrentStep
	var runs []*attempt
	for _, c := range group {
		t, ok := r.p.registry.Lookup(c.Call.Tool)
		if !ok {
			return r.finish(ctx, stop{events.ReasonError, fmt.Sprintf("tool %q vanished from the registry", c.Call.Tool)}, nil)
		}
		m := t.Manifest()
		opID := events.OperationID(r.st.RunID, c.Call.ID)
		if c.InFlight() && m.Permission == tools.Write {
			// A write began and nobody saw it end: never re-run it blindly.
			err := r.append(ctx, events.TypeExecuted, step, c.Call.ID, c.Call.Tool, events.ExecutedData{
				Status: events.ExecUnknown, OperationID: opID, Attempt: c.Attempts(),
				ErrorClass: "unknown_outcome", Message: "the worker running this write stopped before recording its end",
			})
			if err != nil {
				return err
			}
			continue
		}
		if c.Attempts() == 0 {
			if !r.p.app.MayCall(r.task.Principal.Roles, c.Call.Tool) {
				err := r.append(ctx, events.TypeDenied, step, c.Call.ID, c.Call.Tool, events.DeniedData{
					Check:  "tool_allowed",
					Reason: fmt.Sprintf("principal %s with roles %v may not call %s", r.task.Principal.ID, r.task.Principal.Roles, c.Call.Tool),
				})
				if err != nil {
					return err
				}
				return r.finish(ctx, stop{events.ReasonPermissionDenied, fmt.Sprintf("%s may not call %s", r.task.Principal.ID, c.Call.Tool)}, nil)
			}
			if s := beforeCall(r.st, r.limits, m, r.p.now(), r.deadline); !s.ok() {
				return r.finish(ctx, s, nil)
			}
			if r.task.DryRun && m.Permission == tools.Write {
				err := r.append(ctx, events.TypeExecuted, step, c.Call.ID, c.Call.Tool, events.ExecutedData{
					Status:      events.ExecDryRun,
					OperationID: opID,
					WouldCall:   &events.WouldCall{Tool: c.Call.Tool, Args: c.Validated.Args, OperationID: opID},
				})
				if err != nil {
					return err
				}
				continue
			}
		} else if last := c.LastExecuted(); last != nil && last.Status == events.ExecTransient {
			if err := r.backoff(ctx); err != nil {
				return err
			}
		}
		now := r.p.now()
		a := &attempt{c: c, tool: t, ex: events.ExecutingData{
			OperationID: opID,
			Attempt:     c.Attempts() + 1,
			Deadline:    callDeadline(now, r.deadline, m.Timeout.D()).UTC(),
			ArgsHash:    c.Validated.ArgsHash,
		}}
		if err := r.append(ctx, events.TypeExecuting, step, c.Call.ID, c.Call.Tool, a.ex); err != nil {
			return err
		}
		runs = append(runs, a)
	}
	if len(runs) == 1 {
		runs[0].out, runs[0].err = r.invoke(ctx, runs[0])
	} else {
		var wg sync.WaitGroup
		for _, a := range runs {
			wg.Go(func() { a.out, a.err = r.invoke(ctx, a) })
		}
		wg.Wait()
	}
	for _, a := range runs {
		if a.err != nil {
			return a.err
		}
		if err := r.append(ctx, events.TypeExecuted, step, a.c.Call.ID, a.c.Call.Tool, a.out); err != nil {
			return err
		}
	}
	return nil
}

// backoff waits before retrying a transient failure, within the run's time.
func (r *run) backoff(ctx context.Context) error {
	t := time.NewTimer(min(r.p.opts.TransientBackoff, max(time.Until(r.deadline), 0)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// invoke runs one attempt under its deadline and classifies how it ended.
// It returns an error only when the worker itself is stopping (ctx done):
// then nothing is recorded and the attempt stays in flight for whoever
// resumes the run.
func (r *run) invoke(ctx context.Context, a *attempt) (events.ExecutedData, error) {
	cctx, cancel := context.WithDeadline(ctx, a.ex.Deadline)
	defer cancel()
	call := tools.Call{
		Tool:        a.c.Call.Tool,
		OperationID: a.ex.OperationID,
		RunID:       r.st.RunID,
		CallID:      a.c.Call.ID,
		Tenant:      r.task.Tenant,
		Principal:   r.task.Principal.ID,
		Args:        a.c.Validated.Args,
	}
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	began := r.p.now()
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("tool panicked: %v", p)}
			}
		}()
		v, err := a.tool.Func()(cctx, call)
		done <- result{v, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-cctx.Done():
		// The tool's context is cancelled; whether the tool stops is up to
		// the tool. We only stop waiting.
		res = result{err: cctx.Err()}
	}
	out := events.ExecutedData{OperationID: a.ex.OperationID, Attempt: a.ex.Attempt, LatencyMS: r.p.now().Sub(began).Milliseconds()}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	err := res.err
	switch {
	case err == nil:
		b, merr := json.Marshal(res.v)
		if merr != nil {
			err = fmt.Errorf("result does not marshal: %w", merr)
			break
		}
		out.Status = events.ExecOK
		out.Result, _ = tools.Bound(b, maxRecordedResult)
		return out, nil
	case errors.Is(err, context.DeadlineExceeded) && cctx.Err() != nil:
		out.Status, out.ErrorClass = events.ExecTimeout, "timeout"
		out.Message = fmt.Sprintf("stopped waiting after %s; the operation may still be running", a.ex.Deadline.Sub(began).Round(100*time.Millisecond))
		return out, nil
	case errors.Is(err, tools.ErrTransient):
		out.Status, out.ErrorClass = events.ExecTransient, "transient"
		return out, nil
	}
	// Unexpected: the full error goes to the operator's log only; the
	// trail and the model get the category.
	out.Status, out.ErrorClass = events.ExecToolFailed, "unexpected"
	r.log.ErrorContext(ctx, "tool failed unexpectedly; quarantined for the rest of the run",
		"tool", a.c.Call.Tool, "call_id", a.c.Call.ID, "operation_id", a.ex.OperationID, "err", err)
	return out, nil
}

// observe builds the observation of a call from its recorded outcome.
func (r *run) observe(c *events.CallState) observation {
	if c.Validated.Status != events.ValidOK {
		return observeValidation(c.Call, c.Validated)
	}
	var view tools.View
	if t, ok := r.p.registry.Lookup(c.Call.Tool); ok {
		view = t.Manifest().View
	}
	x := c.LastExecuted()
	if x == nil {
		return observation{Status: obsError, Error: "not_executed", Tool: c.Call.Tool}
	}
	return observeExecution(c.Call, x, view)
}
