package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/guard"
	"github.com/loopgate/loopgate/internal/wait"
	"github.com/loopgate/loopgate/policy"
	"github.com/loopgate/loopgate/tools"
)

// maxAttempts bounds the attempts of one call: a transient failure gets at
// most one retry.
const maxAttempts = 2

// leaseGrace is how long past an attempt's deadline its worker has to
// record the end. The write-ahead executing event is the lease: until its
// deadline (plus this) passes, no other worker touches the call.
const leaseGrace = 2 * time.Second

// errBusy means another worker may be in the middle of the run. Errors
// matching it are *busyError.
var errBusy = errors.New("run is busy: an attempt of another worker may still be running")

// busyError says until when a run is busy: the lease of the attempt in
// flight, its deadline plus leaseGrace. The worker schedules the run's
// wake-up for then and lets the message go (see Pool.failed), rather than
// hand it back: each hand-back is a delivery toward MaxDeliver, and a
// write whose lease outlasts a few redeliveries would be stopped as a
// poison message after a crash (make soak found it).
type busyError struct {
	callID string
	until  time.Time
}

func (e *busyError) Error() string {
	return fmt.Sprintf("%v: call %s until %s", errBusy, e.callID, e.until.Format(time.RFC3339Nano))
}

func (e *busyError) Is(target error) bool { return target == errBusy }

// maxRecordedResult bounds the result kept in an executed event.
const maxRecordedResult = 16 << 10

// resolverTimeout bounds one question to a resource resolver, within the
// run's active time.
const resolverTimeout = 5 * time.Second

// recordable is a tool's result as an event keeps it: redacted, then at
// most maxRecordedResult bytes, and how many bytes the tool's result had
// when it was cut (0 when kept whole). Redacted first, as an observation
// is: redacting what was cut to the bound (a placeholder longer than the
// value) took it past the bound in the stored event.
func (r *run) recordable(result json.RawMessage) (json.RawMessage, int) {
	redacted, _ := r.p.redactor.JSON(result)
	redacted = strictJSON(redacted)
	out, cut := tools.Bound(redacted, maxRecordedResult)
	if !cut {
		return out, 0
	}
	return out, len(result)
}

// runCalls carries the current decision's calls through validation,
// authorization, execution and observation. Each phase skips what the
// events say is done, so a resumed run picks up mid-decision.
func (r *run) runCalls(ctx context.Context) error {
	step := r.st.CurrentStep
	if err := r.openSealed(ctx); err != nil {
		return err
	}
	for _, c := range r.st.CurrentCalls {
		if c.Validated == nil {
			var v *events.ValidatedData
			if c.Call.Redacted && !r.fresh[c.Call.ID] {
				// Validating the stored placeholders would run the tool
				// with them, an approver approving them unawares.
				v = &events.ValidatedData{Status: events.InvalidArguments, Redacted: true, Errors: []events.FieldError{{Field: "",
					Message: r.lostArgs(c.Call.ID) + ": propose the call again"}}}
			} else {
				v = r.validate(c.Call)
			}
			if err := r.append(ctx, events.TypeValidated, step, c.Call.ID, c.Call.Tool, v); err != nil {
				return err
			}
		}
		// The stops are derived from the events on every pass, not only
		// right after the event that crossed a bound: a worker that takes
		// the run up after its last worker died between that event and
		// finished must stop it all the same. The counts only grow, so a
		// call checked again finds what the check after its own
		// validation found, or a bound a later call crossed.
		if s := afterValidation(r.st, r.limits, c.Call.Tool, c.Validated); !s.ok() {
			return r.finish(ctx, s, nil)
		}
		if d := c.Denied; d != nil {
			return r.finish(ctx, deniedStop(d.Check, d.Reason), nil)
		}
	}
	// Authorization leaves no event when it allows, so it runs again for
	// every call not yet begun whenever a worker takes the run up (after a
	// crash, an approval, a wake-up): policy is checked at the last moment.
	for _, c := range r.st.CurrentCalls {
		v := c.Validated
		if v.Status != events.ValidOK || c.Denied != nil || c.Attempts() > 0 || len(c.Executed) > 0 || c.Observed {
			continue
		}
		denial, err := policy.Authorize(ctx, r.p.app, policy.Request{
			Principal: r.task.Principal, Tenant: r.task.Tenant, Tool: r.manifest(c.Call.Tool), Args: v.Args,
		}, r.resolve)
		if err != nil {
			// A resolver that could not answer in the run's time ends
			// the run; otherwise the run waits for it (a redelivery).
			if s := inTime(r.limits, r.p.now(), r.deadline); !s.ok() {
				return r.finish(ctx, s, nil)
			}
			// What the step decided so far (its proposal) is stored before
			// the message goes back: dropped with it, the next delivery
			// would ask the model again, its first answer and tokens in
			// no event.
			if ferr := r.flush(ctx); ferr != nil {
				return ferr
			}
			return err
		}
		if denial != nil {
			// Permission denied stops the run: no negotiation, no other route.
			err := r.append(ctx, events.TypeDenied, step, c.Call.ID, c.Call.Tool, events.DeniedData{Check: string(denial.Check), Reason: denial.Reason})
			if err != nil {
				return err
			}
			return r.finish(ctx, deniedStop(string(denial.Check), denial.Reason), nil)
		}
	}
	for r.st.Finished == nil {
		c, act := r.nextCall()
		if c == nil {
			break
		}
		var err error
		switch act {
		case actWait:
			return r.wait(ctx, c)
		case actRequestApproval:
			err = r.requestHuman(ctx, c, approvals.KindApproval)
		case actRequestHuman:
			err = r.requestHuman(ctx, c, approvals.KindNeedsHuman)
		case actStop:
			d := c.Decision
			return r.finish(ctx, stop{events.ReasonCancelled, fmt.Sprintf("%s of %s: %s by %s: %s", d.Kind, c.Call.Tool, d.Decision, cmp.Or(d.Approver, "expiry"), d.Reason)}, nil)
		case actReconcile:
			err = r.reconcile(ctx, c)
		default:
			err = r.executeGroup(ctx, r.group(c, act), act)
		}
		if err != nil {
			return err
		}
	}
	if r.st.Finished != nil {
		return nil
	}
	for _, c := range r.st.CurrentCalls {
		if c.Observed {
			continue
		}
		r.settleByHuman(ctx, c)
		o, output := r.observe(c)
		// Redacted before it is bounded: cut first, a sensitive value
		// could lose the shape its pattern matches, and a placeholder
		// longer than its value would push the observation past its bound.
		// Stored redacted whatever the profile; one whose model reads
		// observations unredacted is shown a clear one (clearReads).
		obs, err := bounded(o, r.observationLimit(), func(b []byte) []byte { red, _ := r.p.redactor.JSON(b); return red })
		if err != nil {
			return err
		}
		if err := r.observeClear(c); err != nil {
			return err
		}
		// Tool output is data; output that tries to steer the model is
		// flagged, and taints the run. All of what the tool said is
		// inspected, not only what the view shows of it.
		for _, f := range guard.InspectJSON(output) {
			obs.Flags = append(obs.Flags, string(f))
		}
		if err := r.append(ctx, events.TypeObserved, step, c.Call.ID, c.Call.Tool, obs); err != nil {
			return err
		}
		if len(obs.Flags) > 0 {
			r.log.WarnContext(ctx, "tool output flagged as possible prompt injection; writes now need approval", "call_id", c.Call.ID, "tool", c.Call.Tool, "flags", obs.Flags)
		}
	}
	return nil
}

// deniedStop is the end of a run one of whose calls was denied.
func deniedStop(check, reason string) stop {
	return stop{events.ReasonPermissionDenied, fmt.Sprintf("%s: %s", check, reason)}
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
	_, redacted := r.p.redactor.JSON(canonical)
	r.know(call.ID)
	return &events.ValidatedData{
		Status:     events.ValidOK,
		Args:       canonical,
		ArgsHash:   hash,
		Permission: string(t.Manifest().Permission),
		Redacted:   redacted,
		Idempotent: t.Manifest().Idempotent,
	}
}

// resolve asks a tool's resolver builtin who owns a resource.
func (r *run) resolve(ctx context.Context, resolver, id string) (policy.Owner, error) {
	fn, ok := r.p.registry.Resolver(resolver)
	if !ok {
		return policy.Owner{}, fmt.Errorf("resolver %q is not registered", resolver)
	}
	args, _ := json.Marshal(map[string]string{"id": id})
	cctx, cancel := context.WithDeadline(ctx, callDeadline(r.p.now(), r.deadline, resolverTimeout))
	defer cancel()
	b, err := callTool(cctx, fn, tools.Call{Tool: resolver, RunID: r.st.RunID, Tenant: r.task.Tenant, Principal: r.task.Principal.ID, Args: args})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return policy.Owner{}, fmt.Errorf("resolver %q: %w", resolver, cerr) // the run's own end: its pool stops
		}
		// The cause is quoted, not wrapped: a resolver's timeout (or a
		// tool service's "no responders") is the resolver's trouble, not
		// JetStream's. Wrapped, classify took it for an outage of the
		// store and held the run's message for ever, asking again without
		// spending a delivery; as it is, the message is redelivered, and
		// past MaxDeliver the run stops with this cause.
		return policy.Owner{}, fmt.Errorf("resolver %q: %s", resolver, r.p.redactString(err.Error()))
	}
	o, ok := ownerOf(b)
	if !ok {
		// Its start only: the error ends up in logs and, past
		// MaxDeliver, in the run's finished detail.
		return policy.Owner{}, fmt.Errorf("resolver %q answered %q (%d bytes), not {found, tenant}", resolver, r.p.redactString(excerpt(b)), len(b))
	}
	return o, nil
}

// ownerOf reads a resolver's answer: an object whose found is a boolean
// and, when true, whose tenant is a string that is not empty. Anything else
// (null, {}, a tenant without found) used to decode as found false, a
// resource nobody owns, and the call was allowed: a broken resolver let
// every call through where it must stop the run.
func ownerOf(b []byte) (policy.Owner, bool) {
	var a struct {
		Found  *bool   `json:"found"`
		Tenant *string `json:"tenant"`
	}
	if err := json.Unmarshal(b, &a); err != nil || a.Found == nil {
		return policy.Owner{}, false
	}
	o := policy.Owner{Found: *a.Found}
	if o.Found {
		if a.Tenant == nil || *a.Tenant == "" {
			return policy.Owner{}, false
		}
		o.Tenant = *a.Tenant
	}
	return o, true
}

// nextCall returns the first call, in call order, that needs something
// other than its observation, and what it needs; nil when none does.
// Calls run in order: a call waiting for a human holds back those after it.
func (r *run) nextCall() (*events.CallState, action) {
	for _, c := range r.st.CurrentCalls {
		if c.Observed {
			continue
		}
		if act := nextAction(c, r.manifest(c.Call.Tool), r.task.DryRun, r.writeGated(c)); act != actObserve {
			return c, act
		}
	}
	return nil, actObserve
}

// group returns first and the fresh parallel-safe calls right after it
// that can run with it concurrently.
func (r *run) group(first *events.CallState, act action) []*events.CallState {
	group := []*events.CallState{first}
	if act != actExecute || !r.parallelSafe(first.Call.Tool) {
		return group
	}
	i := slices.Index(r.st.CurrentCalls, first)
	for _, c := range r.st.CurrentCalls[i+1:] {
		if c.Observed || !r.parallelSafe(c.Call.Tool) || nextAction(c, r.manifest(c.Call.Tool), r.task.DryRun, r.writeGated(c)) != actExecute {
			break
		}
		group = append(group, c)
	}
	return group
}

// manifest returns a tool's manifest; the zero manifest if it is gone.
func (r *run) manifest(name string) tools.Manifest {
	if t, ok := r.p.registry.Lookup(name); ok {
		return t.Manifest()
	}
	return tools.Manifest{Name: name}
}

func (r *run) parallelSafe(name string) bool {
	t, ok := r.p.registry.Lookup(name)
	if !ok {
		return false
	}
	m := t.Manifest()
	return m.ParallelSafe && m.Permission == tools.Read && !m.NeedsApproval()
}

// attempt is one call about to run.
type attempt struct {
	c     *events.CallState
	tool  *tools.Tool
	ex    events.ExecutingData
	rerun bool // policy or a human allows re-running an operation whose outcome is unknown
	out   events.ExecutedData
	err   error
}

// executeGroup records the write-ahead executing event of each call of
// group, runs them (concurrently when more than one) and records how each
// ended, in call order. act says why they run: a first attempt is
// budgeted (and previewed in a dry run); a retry waits its backoff. A
// resumed attempt, one a dead worker began, is not run: its end is
// recorded from what is known (see lostAttempt).
func (r *run) executeGroup(ctx context.Context, group []*events.CallState, act action) error {
	step := r.st.CurrentStep
	var runs []*attempt
calls:
	for i, c := range group {
		t, ok := r.p.registry.Lookup(c.Call.Tool)
		if !ok {
			return r.finish(ctx, stop{events.ReasonError, fmt.Sprintf("tool %q vanished from the registry", c.Call.Tool)}, nil)
		}
		m := t.Manifest()
		opID := operationID(r.st.RunID, c) // a successor once a reconcile fenced the call's id
		if act == actResume {
			lost := c.Executing[len(c.Executing)-1]
			if until := lost.Deadline.Add(leaseGrace); r.p.now().Before(until) {
				// The attempt's deadline has not passed: the worker that
				// began it may be alive and about to record its end. Let it.
				return &busyError{callID: c.Call.ID, until: until}
			}
			// The attempt's worker is gone. Record how the attempt ended,
			// as far as anyone can tell; it is never run here. A run after
			// this is a new attempt, whose executing event announces its
			// own lease to every worker: one run under a deadline only
			// this worker knew let another take the call over while the
			// tool still ran, and run it a second time.
			out, err := r.lostAttempt(ctx, m, lost)
			if err != nil {
				return err
			}
			if err := r.append(ctx, events.TypeExecuted, step, c.Call.ID, c.Call.Tool, out); err != nil {
				return err
			}
			continue
		}
		if c.Validated.Redacted && !r.fresh[c.Call.ID] && !(r.task.DryRun && m.Permission == tools.Write) {
			err := r.append(ctx, events.TypeExecuted, step, c.Call.ID, c.Call.Tool, events.ExecutedData{
				Status: events.ExecArgsLost, OperationID: opID, ErrorClass: "args_lost",
				Message: r.lostArgs(c.Call.ID),
			})
			if err != nil {
				return err
			}
			continue
		}
		a := &attempt{c: c, tool: t, rerun: act == actRetry}
		switch {
		case act == actExecute:
			if s := beforeCall(r.st, r.limits, m, r.p.now(), r.deadline); !s.ok() {
				if i > 0 {
					// The calls before it in the group fit the budget:
					// they run, as they would have one by one; this one
					// stops the run on the next pass.
					break calls
				}
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
		case act == actRetry:
			if last := c.LastExecuted(); last != nil && last.Status == events.ExecTransient && last.ErrorClass != events.DeadlinePassed {
				if err := r.backoff(ctx); err != nil {
					return err
				}
			}
			// A retry needs time left like a first attempt: begun past the
			// run's deadline, it would be recorded not run (deadline_passed,
			// the mark of a paused worker) again and again.
			if s := inTime(r.limits, r.p.now(), r.deadline); !s.ok() {
				return r.finish(ctx, s, nil)
			}
		}
		a.ex = events.ExecutingData{
			OperationID: opID,
			Attempt:     c.Attempts() + 1,
			Deadline:    callDeadline(r.p.now(), r.deadline, m.Timeout.D()).UTC(),
			ArgsHash:    c.Validated.ArgsHash,
		}
		if err := r.append(ctx, events.TypeExecuting, step, c.Call.ID, c.Call.Tool, a.ex); err != nil {
			return err
		}
		runs = append(runs, a)
	}
	// The executing events are durable before any tool runs.
	if err := r.flush(ctx); err != nil {
		return err
	}
	run := func(a *attempt) {
		if a.tool.Manifest().Permission == tools.Write {
			a.out, a.err = r.runWrite(ctx, a)
		} else {
			a.out, a.err = r.invoke(ctx, a)
		}
	}
	if len(runs) == 1 {
		run(runs[0])
	} else {
		var wg sync.WaitGroup
		for _, a := range runs {
			wg.Go(func() { run(a) })
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
	return wait.For(ctx, min(r.p.opts.TransientBackoff, max(time.Until(r.deadline), 0)))
}

// pastDeadline reports whether the attempt's deadline passed before its
// tool started, and what the attempt then records. Its worker was stopped
// or starved (a frozen VM, a SIGSTOP, a long pause), or waited that long
// for its executing event to be stored (a cluster's failover: the
// append's acknowledgement timed out and it was tried again), past the
// lease that event announced, and another worker may own the call by
// now. Starting the tool late could repeat what that worker does; not
// starting it is known to have done nothing, so the call is retried as a
// new attempt.
func (r *run) pastDeadline(ctx context.Context, a *attempt) (events.ExecutedData, bool) {
	if r.p.now().Before(a.ex.Deadline) {
		return events.ExecutedData{}, false
	}
	r.log.WarnContext(ctx, "attempt's deadline passed before its tool started; not run",
		"call_id", a.c.Call.ID, "tool", a.c.Call.Tool, "attempt", a.ex.Attempt, "deadline", a.ex.Deadline)
	return events.ExecutedData{
		Status: events.ExecTransient, ErrorClass: events.DeadlinePassed,
		OperationID: a.ex.OperationID, Attempt: a.ex.Attempt,
		Message: "the attempt's deadline passed before the tool started (its worker was paused or starved, or waited that long for JetStream to store its executing event); the tool was not run",
	}, true
}

// invoke runs one attempt under its deadline and classifies how it ended.
// It returns an error only when the worker itself is stopping (ctx done):
// then nothing is recorded and the attempt stays in flight for whoever
// resumes the run.
func (r *run) invoke(ctx context.Context, a *attempt) (events.ExecutedData, error) {
	if late, ok := r.pastDeadline(ctx, a); ok {
		return late, nil
	}
	cctx, cancel := context.WithDeadline(ctx, a.ex.Deadline)
	defer cancel()
	cctx, release := r.p.halts.bind(cctx, r.st.RunID) // a cancel handled in this process cancels the call
	defer release()
	call := tools.Call{
		Tool:        a.c.Call.Tool,
		OperationID: a.ex.OperationID,
		RunID:       r.st.RunID,
		CallID:      a.c.Call.ID,
		Tenant:      r.task.Tenant,
		Principal:   r.task.Principal.ID,
		Args:        a.c.Validated.Args,
	}
	began := r.p.now()
	result, err := callTool(cctx, a.tool.Func(), call)
	out := events.ExecutedData{OperationID: a.ex.OperationID, Attempt: a.ex.Attempt, LatencyMS: r.p.now().Sub(began).Milliseconds()}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	switch {
	case errors.Is(context.Cause(cctx), errRunCancelled) && err != nil:
		// Its run was cancelled: the cancel_requested event stored
		// first makes this outcome's append fail, so the trail shows
		// the attempt begun and not ended, an unknown outcome.
		out.Status, out.ErrorClass = events.ExecTimeout, "cancelled"
		out.Message = "the run was cancelled while the call ran; the operation may have run"
		return out, nil
	case err == nil:
		out.Status = events.ExecOK
		out.Result, out.ResultBytes = r.recordable(result)
		r.keepClear(a, result)
		return out, nil
	case errors.Is(err, context.DeadlineExceeded) && cctx.Err() != nil:
		out.Status, out.ErrorClass = events.ExecTimeout, events.TimedOut
		out.Message = fmt.Sprintf("stopped waiting after %s; the operation may still be running", a.ex.Deadline.Sub(began).Round(100*time.Millisecond))
		return out, nil
	case errors.Is(err, tools.ErrOutcomeUnknown):
		// As a timeout: the call may have run; a write is reconciled or
		// asked about, never run again blindly.
		out.Status, out.ErrorClass = events.ExecTimeout, events.ConnectionLost
		out.Message = "the connection to the tool's service closed before its reply came; the operation may have run"
		return out, nil
	case errors.Is(err, tools.ErrTransient):
		out.Status, out.ErrorClass = events.ExecTransient, "transient"
		return out, nil
	case errors.Is(err, context.DeadlineExceeded):
		// A deadline of the tool's own, not loopgate's (that is the first
		// case): an upstream it called did not answer in time, and may
		// have done what it was asked. A tool service's 504 says the same
		// (tools.RemoteError matches it).
		out.Status, out.ErrorClass = events.ExecTimeout, events.UpstreamTimeout
		out.Message = "the tool's own deadline passed while the call ran; the operation may have run"
		r.log.WarnContext(ctx, "tool timed out on its own deadline; the outcome is unknown",
			"tool", a.c.Call.Tool, "call_id", a.c.Call.ID, "operation_id", a.ex.OperationID, "err", r.p.redactString(err.Error()))
		return out, nil
	}
	// Unexpected: the full error goes to the operator's log only; the
	// trail and the model get the category.
	out.Status, out.ErrorClass = events.ExecToolFailed, "unexpected"
	r.log.ErrorContext(ctx, "tool failed unexpectedly; quarantined for the rest of the run",
		"tool", a.c.Call.Tool, "call_id", a.c.Call.ID, "operation_id", a.ex.OperationID, "err", r.p.redactString(err.Error()))
	return out, nil
}

// observe builds the observation of a call from its recorded outcome, and
// returns the tool output it shows (a result, or a reconcile check's), for
// inspection.
func (r *run) observe(c *events.CallState) (observation, json.RawMessage) {
	if c.Validated.Status != events.ValidOK {
		return observeValidation(c.Call, c.Validated), nil
	}
	view := r.manifest(c.Call.Tool).View
	x := c.LastExecuted()
	if d := c.Decision; d != nil && (x == nil || d.Kind == string(approvals.KindNeedsHuman)) {
		if o, ok := observeDecision(c.Call, d, r.manifest(c.Call.Tool)); ok {
			return o, nil
		}
	}
	if x == nil {
		return observation{Status: obsError, Error: "not_executed", Tool: c.Call.Tool}, nil
	}
	if rec := reconciledFor(c, c.Attempts()); rec != nil && rec.Applied && (x.Status == events.ExecTimeout || x.Status == events.ExecUnknown) {
		return observeReconciled(c.Call, rec, view), rec.Result
	}
	if x.Status != events.ExecOK {
		return observeExecution(c.Call, x, view), nil
	}
	return observeExecution(c.Call, x, view), x.Result
}

// strictJSON returns doc as a strict reader takes JSON: an object that
// repeats a name keeps the last value of it, as encoding/json and
// JavaScript read it, and invalid UTF-8 becomes U+FFFD. A tool in any
// language may answer so, and its result used to be stored as it came,
// in events the shipped event schema refuses. A strict document (nearly
// every one) is returned as it is; one that is not JSON at all, too.
func strictJSON(doc json.RawMessage) json.RawMessage {
	if jsontext.Value(doc).IsValid() {
		return doc
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return doc
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return doc
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}
