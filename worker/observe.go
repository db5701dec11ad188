package worker

import (
	"cmp"
	"encoding/json"
	"fmt"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// Observations are designed views: the model gets a status, a category and
// the data it needs, never raw internals. Tool output sits under "data" and
// is data, not instructions.
type observation struct {
	Status         string              `json:"status"`
	Error          string              `json:"error,omitempty"`
	Tool           string              `json:"tool,omitempty"`
	Message        string              `json:"message,omitempty"`
	Errors         []events.FieldError `json:"errors,omitempty"`
	AvailableTools []string            `json:"available_tools,omitempty"`
	Data           json.RawMessage     `json:"data,omitempty"`
}

// Observation statuses.
const (
	obsOK     = "ok"
	obsError  = "error"
	obsDryRun = "dry_run"
)

// observeValidation is the observation of a call refused by validation.
func observeValidation(call events.ToolCall, v *events.ValidatedData) observation {
	o := observation{Status: obsError, Error: v.Status, Tool: call.Tool}
	switch v.Status {
	case events.InvalidArguments:
		o.Errors = v.Errors
		o.Message = "the arguments failed validation; fix the fields listed and call again"
	case events.UnknownTool:
		o.Message = fmt.Sprintf("%q is not an available tool", call.Tool)
		o.AvailableTools = v.AvailableTools
	case events.Quarantined:
		o.Message = fmt.Sprintf("%s failed unexpectedly earlier in this run and is quarantined; do not call it again", call.Tool)
	}
	return o
}

// observeExecution is the observation of a call's last attempt. view is
// the tool's designed projection of a successful result.
func observeExecution(call events.ToolCall, x *events.ExecutedData, view tools.View) observation {
	o := observation{Tool: call.Tool}
	switch x.Status {
	case events.ExecOK:
		o.Status = obsOK
		data, err := view.Apply(x.Result)
		if err != nil {
			data = x.Result
		}
		o.Data = data
		o.Message = cutNote(x.ResultBytes)
	case events.ExecDryRun:
		o.Status = obsDryRun
		o.Message = "dry run: the call was validated and authorized but not executed; nothing changed"
		o.Data, _ = events.EncodeData(x.WouldCall)
	case events.ExecTimeout:
		o.Status, o.Error = obsError, events.ExecTimeout
		o.Message = fmt.Sprintf("%s: %s", call.Tool, x.Message)
	case events.ExecTransient:
		o.Status, o.Error = obsError, events.ExecTransient
		o.Message = fmt.Sprintf("%s failed transiently after %d attempts; try another approach or finish", call.Tool, x.Attempt)
	case events.ExecToolFailed:
		o.Status, o.Error = obsError, events.ExecToolFailed
		o.Message = fmt.Sprintf("%s failed unexpectedly and is quarantined for the rest of this run", call.Tool)
	case events.ExecUnknown:
		o.Status, o.Error = obsError, events.ExecUnknown
		o.Message = fmt.Sprintf("the outcome of %s is unknown; it was not retried", call.Tool)
	case events.ExecArgsLost:
		o.Status, o.Error = obsError, events.ExecArgsLost
		o.Message = fmt.Sprintf("%s was not run: its arguments held sensitive values that were not kept; propose the call again if it is still needed", call.Tool)
	case events.ExecConflict:
		o.Status, o.Error = obsError, events.ExecConflict
		o.Message = fmt.Sprintf("%s was not executed: its operation id is already bound to other arguments", call.Tool)
	default:
		o.Status, o.Error = obsError, x.Status
	}
	return o
}

// observeDecision is the observation of a human's decision that ended a
// call without (further) execution. ok is false when the decision lets the
// call's execution speak for itself.
func observeDecision(call events.ToolCall, d *events.ApprovedData, m tools.Manifest) (observation, bool) {
	o := observation{Status: obsError, Tool: call.Tool}
	switch approvals.Decision(d.Decision) {
	case approvals.Deny:
		o.Error = "denied"
		o.Message = fmt.Sprintf("DENIED by %s: %s. Propose an alternative.", d.Approver, cmp.Or(d.Reason, "no reason given"))
	case approvals.Expired:
		o.Error = "expired"
		ttl := ""
		if m.ApprovalTTL > 0 {
			ttl = " within " + m.ApprovalTTL.D().String()
		}
		if d.Kind == string(approvals.KindNeedsHuman) {
			// The write ran and may have taken effect: "propose an
			// alternative" invited the same write again, under a new call
			// id, so an operation id no idempotency record would catch.
			o.Message = fmt.Sprintf("EXPIRED: no one said%s whether this %s call, which ran, took effect: the outcome stays unknown and it was not retried; do not make this call again.", ttl, call.Tool)
			break
		}
		o.Message = fmt.Sprintf("EXPIRED: no approver decided on this %s call%s. Propose an alternative.", call.Tool, ttl)
	case approvals.MarkDone:
		o.Status = obsOK
		o.Message = fmt.Sprintf("the outcome was unknown; %s confirmed the operation took effect", d.Approver)
	case approvals.Abandon:
		o.Error = "abandoned"
		o.Message = fmt.Sprintf("ABANDONED by %s: the outcome stays unknown; do not retry this call. %s", d.Approver, d.Reason)
	default:
		return observation{}, false
	}
	return o, true
}

// observeReconciled is the observation of an unknown outcome that the
// tool's reconcile check found took effect.
func observeReconciled(call events.ToolCall, rec *events.ReconciledData, view tools.View) observation {
	o := observation{Status: obsOK, Tool: call.Tool, Message: "the call's outcome was unknown (it timed out, or its worker stopped), but " + rec.Via + " confirmed it took effect"}
	if len(rec.Result) > 0 {
		if data, err := view.Apply(rec.Result); err == nil {
			o.Data = data
		}
	}
	if note := cutNote(rec.ResultBytes); note != "" {
		o.Message += "; " + note
	}
	return o
}

// cutNote tells the model that a result of n bytes was cut to fit its
// record (n > 0), so it does not take what it sees for all there was: a
// view applied to the cut result counts only what is left.
func cutNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("the result was %d bytes, more than a record keeps: this is its first part, and any counts in it are of that part", n)
}

// observeInvalidDecision is the observation of a malformed decision.
func observeInvalidDecision(errs []events.FieldError) observation {
	return observation{
		Status:  obsError,
		Error:   "invalid_decision",
		Errors:  errs,
		Message: `propose exactly {"tool_calls":[{"tool":...,"args":{...}}]} or {"final_answer":{"summary":...}}`,
	}
}

// bounded marshals o, passes it through redact (unless nil) and bounds
// it to limit bytes, keeping it valid JSON.
func bounded(o observation, limit int, redact func([]byte) []byte) (events.ObservedData, error) {
	// Encoded as the event stores it (no HTML escapes), so the bound
	// holds for what is stored and what the model is shown.
	b, err := events.EncodeData(o)
	if err != nil {
		return events.ObservedData{}, fmt.Errorf("marshal observation: %w", err)
	}
	if redact != nil {
		b = redact(b)
	}
	out, truncated := tools.Bound(b, limit)
	return events.ObservedData{Observation: out, Bytes: len(out), Truncated: truncated}, nil
}

// redactString keeps sensitive values out of the operator's log too.
func (p *Pool) redactString(s string) string {
	out, _ := p.redactor.String(s)
	return out
}
