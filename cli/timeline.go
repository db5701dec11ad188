package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
)

// timeline prints a run's events for a human: one line per event with its
// seq, step, type, tool and the few facts that matter, then the end.
type timeline struct {
	w      io.Writer
	asJSON bool
	width  int // how much of an observation to show
	// hints, when set, gets a line saying how to answer each question a
	// parked run waits for, addressed to natsURL.
	hints   io.Writer
	natsURL string
	asked   map[string]question // call id → the latest question about it
}

func (t *timeline) print(e events.Event) {
	if e.Type == events.TypeApprovalRequested {
		var d events.ApprovalRequestedData
		if e.Decode(&d) == nil {
			if t.asked == nil {
				t.asked = map[string]question{}
			}
			t.asked[e.CallID] = questionFromEvent(e, d)
		}
	}
	if t.asJSON {
		b, _ := json.Marshal(e)
		fmt.Fprintln(t.w, string(b))
	} else {
		step := "      "
		if e.Step > 0 {
			step = fmt.Sprintf("step %d", e.Step)
		}
		fmt.Fprintf(t.w, "%3d  %s  %-8s  %-18s %-6s %s\n", e.Seq, e.Time.Format("15:04:05.000"), step, e.Type, e.CallID, printable(t.detail(e)))
	}
	if e.Type == events.TypeParked && t.hints != nil {
		t.hint(e)
	}
}

// hint says how to answer what a parked run waits for.
func (t *timeline) hint(e events.Event) {
	var d events.ParkedData
	if e.Decode(&d) != nil {
		return
	}
	for _, id := range d.Awaiting {
		q, ok := t.asked[id]
		if !ok {
			q = question{RunID: e.RunID, CallID: id, Kind: approvals.KindApproval}
		}
		what := "waiting for approval"
		if q.Kind == approvals.KindNeedsHuman {
			what = "waiting for a human (outcome unknown)"
		}
		fmt.Fprintf(t.hints, "     %s: %s\n", what, strings.TrimSuffix(decideHint(q, t.natsURL), "   (or: loopgate deny … --as <approver> --reason R)"))
	}
}

func (t *timeline) detail(e events.Event) string {
	switch e.Type {
	case events.TypeRejected:
		var d events.RejectedData
		if e.Decode(&d) == nil {
			field := d.Field
			if field == "" {
				field = "(message)"
			}
			return fmt.Sprintf("REJECTED %s: %s", field, d.Reason)
		}
	case events.TypeSecurity:
		var d events.SecurityData
		if e.Decode(&d) == nil {
			return securityDetail(d)
		}
	case events.TypeStarted:
		var d events.StartedData
		if e.Decode(&d) == nil {
			dry := ""
			if d.Task.DryRun {
				dry = " DRY RUN"
			}
			return fmt.Sprintf("agent %s for %s%s; tools %s; max %s, %s, %s",
				d.Profile, d.Task.Principal.ID, dry, strings.Join(d.Tools, ","), plural(d.Limits.MaxSteps, "step"), plural(d.Limits.MaxToolCalls, "tool call"), d.Limits.MaxActive.D())
		}
	case events.TypeProposed:
		var d events.ProposedData
		if e.Decode(&d) == nil {
			cost := fmt.Sprintf("(%dms, %d+%d tokens)", d.LatencyMS, d.Usage.InputTokens, d.Usage.OutputTokens)
			switch {
			case d.Decision == nil:
				return fmt.Sprintf("INVALID decision: %s %s", fieldErrors(d.Invalid), cost)
			case d.Decision.Final != nil:
				return fmt.Sprintf("final answer %s", cost)
			default:
				var calls []string
				for _, c := range d.Decision.ToolCalls {
					calls = append(calls, c.Tool+string(compact(c.Args, 80)))
				}
				return fmt.Sprintf("%s %s", strings.Join(calls, " + "), cost)
			}
		}
	case events.TypeValidated:
		var d events.ValidatedData
		if e.Decode(&d) == nil {
			switch d.Status {
			case events.ValidOK:
				return fmt.Sprintf("%s ok", e.Tool)
			case events.UnknownTool:
				return fmt.Sprintf("%s UNKNOWN TOOL (available: %s)", e.Tool, strings.Join(d.AvailableTools, ", "))
			default:
				return fmt.Sprintf("%s %s %s", e.Tool, strings.ToUpper(d.Status), fieldErrors(d.Errors))
			}
		}
	case events.TypeDenied:
		var d events.DeniedData
		if e.Decode(&d) == nil {
			return fmt.Sprintf("%s DENIED (%s): %s", e.Tool, d.Check, d.Reason)
		}
	case events.TypeExecuting:
		var d events.ExecutingData
		if e.Decode(&d) == nil {
			return fmt.Sprintf("%s attempt %d, deadline in %s, op %s", e.Tool, d.Attempt, d.Deadline.Sub(e.Time).Round(time.Millisecond), d.OperationID)
		}
	case events.TypeExecuted:
		var d events.ExecutedData
		if e.Decode(&d) == nil {
			s := fmt.Sprintf("%s %s in %dms", e.Tool, strings.ToUpper(d.Status), d.LatencyMS)
			switch d.Status {
			case events.ExecOK:
				s = fmt.Sprintf("%s ok in %dms", e.Tool, d.LatencyMS)
			case events.ExecUnknown:
				s = fmt.Sprintf("%s OUTCOME UNKNOWN (attempt %d)", e.Tool, d.Attempt)
			case events.ExecConflict:
				s = fmt.Sprintf("%s CONFLICT, not executed", e.Tool)
			}
			if d.WouldCall != nil {
				s += " — would call " + d.WouldCall.Tool + string(compact(d.WouldCall.Args, 120))
			}
			if d.Message != "" {
				s += " — " + printable(d.Message)
			}
			return s
		}
	case events.TypeApprovalRequested:
		var d events.ApprovalRequestedData
		if e.Decode(&d) == nil {
			what := "APPROVAL of"
			if d.Kind == string(approvals.KindNeedsHuman) {
				what = fmt.Sprintf("NEEDS HUMAN (attempt %d's outcome unknown) for", d.Attempt)
			}
			return fmt.Sprintf("%s %s%s %s, asked for %s, expires %s (in %s)", what, printable(d.Tool), printable(string(compact(d.Args, 80))),
				hashPrefix(d.ArgsHash), printable(d.Principal), d.ExpiresAt.Format("15:04:05"), d.ExpiresAt.Sub(e.Time).Round(time.Second))
		}
	case events.TypeParked:
		var d events.ParkedData
		if e.Decode(&d) == nil {
			return fmt.Sprintf("awaiting %s until %s (%s); no worker holds the run", strings.Join(d.Awaiting, ", "),
				d.Until.Format("15:04:05"), d.Until.Sub(e.Time).Round(time.Second))
		}
	case events.TypeApproved:
		var d events.ApprovedData
		if e.Decode(&d) == nil {
			s := decisionWord(d.Decision)
			if d.Approver != "" {
				s += " by " + printable(d.Approver)
			}
			if d.Reason != "" {
				s += ": " + printable(d.Reason)
			}
			if d.ApprovalSeq > 0 {
				s += fmt.Sprintf(" (approvals seq %d)", d.ApprovalSeq)
			}
			return s
		}
	case events.TypeApprovalRejected:
		var d events.ApprovalRejectedData
		if e.Decode(&d) == nil {
			s := fmt.Sprintf("REJECTED %s: %s", d.Class, printable(d.Detail))
			if d.Approver != "" || d.Decision != "" {
				s += fmt.Sprintf(" (%s by %s, approvals seq %d)", cmp.Or(d.Decision, "?"), cmp.Or(printable(d.Approver), "?"), d.ApprovalSeq)
			}
			if len(d.Errors) > 0 {
				s += " — " + printable(fieldErrors(d.Errors))
			}
			return s
		}
	case events.TypeCancelRequested:
		var d events.CancelRequestedData
		if e.Decode(&d) == nil {
			return fmt.Sprintf("CANCEL by %s: %s (cancels seq %d)", printable(d.RequestedBy.ID), printable(d.Reason), d.CancelSeq)
		}
	case events.TypeCancelRejected:
		var d events.CancelRejectedData
		if e.Decode(&d) == nil {
			by := "?"
			if d.RequestedBy != nil {
				by = printable(d.RequestedBy.ID)
			}
			s := fmt.Sprintf("CANCEL REJECTED %s: %s (by %s, cancels seq %d)", d.Class, printable(d.Detail), by, d.CancelSeq)
			if len(d.Errors) > 0 {
				s += " — " + printable(fieldErrors(d.Errors))
			}
			return s
		}
	case events.TypeDiscarded:
		var d events.DiscardedData
		if e.Decode(&d) == nil {
			return fmt.Sprintf("a model call lost to the run's driver, charged (%dms, %d+%d tokens)", d.LatencyMS, d.Usage.InputTokens, d.Usage.OutputTokens)
		}
	case events.TypeReconciled:
		var d events.ReconciledData
		if e.Decode(&d) == nil {
			switch {
			case d.Error != "":
				return fmt.Sprintf("%s: %s could not tell (attempt %d): %s", e.Tool, d.Via, d.Attempt, printable(d.Error))
			case d.Applied:
				return fmt.Sprintf("%s APPLIED, says %s (attempt %d took effect)", e.Tool, d.Via, d.Attempt)
			case d.Fenced:
				return fmt.Sprintf("%s NOT APPLIED, FENCED, says %s (attempt %d can no longer take effect: a new attempt is safe)", e.Tool, d.Via, d.Attempt)
			case d.Why != "":
				return fmt.Sprintf("%s NOT APPLIED, says %s (attempt %d): %s", e.Tool, d.Via, d.Attempt, printable(d.Why))
			default:
				return fmt.Sprintf("%s NOT APPLIED, says %s (attempt %d did not take effect)", e.Tool, d.Via, d.Attempt)
			}
		}
	case events.TypeObserved:
		var d events.ObservedData
		if e.Decode(&d) == nil {
			return string(compact(d.Observation, t.width))
		}
	case events.TypeFinished:
		var d events.FinishedData
		if e.Decode(&d) == nil {
			s := fmt.Sprintf("%s after %s, %s, %dms active", strings.ToUpper(string(d.Reason)), plural(d.Totals.Steps, "step"), plural(d.Totals.ToolCalls, "tool call"), d.Totals.ActiveMS)
			if d.Detail != "" {
				s += " — " + d.Detail
			}
			return s
		}
	}
	return string(compact(e.Data, t.width))
}

// end prints the final answer or the stop of a finished run.
func (t *timeline) end(e events.Event) {
	if t.asJSON {
		return
	}
	var d events.FinishedData
	if e.Decode(&d) != nil {
		return
	}
	fmt.Fprintf(t.w, "\nrun %s finished: %s\n", e.RunID, d.Reason)
	if d.Detail != "" {
		fmt.Fprintf(t.w, "  why: %s\n", printable(d.Detail))
	}
	if d.Final != nil {
		fmt.Fprintf(t.w, "  answer: %s\n", printable(d.Final.Summary))
		for _, a := range d.Final.DraftsCreated {
			fmt.Fprintf(t.w, "  draft: %s\n", printable(a))
		}
	}
}

// decisionWord is how a timeline shows a decision on a gated call.
func decisionWord(d string) string {
	switch approvals.Decision(d) {
	case approvals.Approve:
		return "APPROVED"
	case approvals.Deny:
		return "DENIED"
	case approvals.Expired:
		return "EXPIRED"
	case approvals.MarkDone:
		return "MARKED DONE"
	case approvals.Retry:
		return "RETRY"
	case approvals.Abandon:
		return "ABANDONED"
	}
	return strings.ToUpper(d)
}

func fieldErrors(errs []events.FieldError) string {
	var parts []string
	for _, e := range errs {
		if e.Field == "" {
			parts = append(parts, e.Message)
			continue
		}
		parts = append(parts, e.Field+": "+e.Message)
	}
	return strings.Join(parts, "; ")
}

// compact shortens JSON for one line of a timeline. It is for display only;
// the stream keeps the whole event.
func compact(raw []byte, width int) []byte {
	s := strings.Join(strings.Fields(string(raw)), " ")
	if width > 0 && len(s) > width {
		cut := width
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut-- // never split a character
		}
		return []byte(s[:cut] + "…")
	}
	return []byte(s)
}
