package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/loopgate/loopgate/events"
)

// timeline prints a run's events for a human: one line per event with its
// seq, step, type, tool and the few facts that matter, then the end.
type timeline struct {
	w      io.Writer
	asJSON bool
	width  int // how much of an observation to show
}

func (t *timeline) print(e events.Event) {
	if t.asJSON {
		b, _ := json.Marshal(e)
		fmt.Fprintln(t.w, string(b))
		return
	}
	step := "      "
	if e.Step > 0 {
		step = fmt.Sprintf("step %d", e.Step)
	}
	fmt.Fprintf(t.w, "%3d  %s  %-8s  %-18s %-6s %s\n", e.Seq, e.Time.Format("15:04:05.000"), step, e.Type, e.CallID, t.detail(e))
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
	case events.TypeStarted:
		var d events.StartedData
		if e.Decode(&d) == nil {
			dry := ""
			if d.Task.DryRun {
				dry = " DRY RUN"
			}
			return fmt.Sprintf("agent %s for %s%s; tools %s; max %d steps, %d tool calls, %s",
				d.Profile, d.Task.Principal.ID, dry, strings.Join(d.Tools, ","), d.Limits.MaxSteps, d.Limits.MaxToolCalls, d.Limits.MaxActive.D())
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
			if d.Status == events.ExecOK {
				s = fmt.Sprintf("%s ok in %dms", e.Tool, d.LatencyMS)
			}
			if d.WouldCall != nil {
				s += " — would call " + d.WouldCall.Tool + string(compact(d.WouldCall.Args, 120))
			}
			if d.Message != "" {
				s += " — " + d.Message
			}
			return s
		}
	case events.TypeObserved:
		var d events.ObservedData
		if e.Decode(&d) == nil {
			return string(compact(d.Observation, t.width))
		}
	case events.TypeFinished:
		var d events.FinishedData
		if e.Decode(&d) == nil {
			s := fmt.Sprintf("%s after %d steps, %d tool calls, %dms active", strings.ToUpper(string(d.Reason)), d.Totals.Steps, d.Totals.ToolCalls, d.Totals.ActiveMS)
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
		fmt.Fprintf(t.w, "  why: %s\n", d.Detail)
	}
	if d.Final != nil {
		fmt.Fprintf(t.w, "  answer: %s\n", d.Final.Summary)
		for _, a := range d.Final.DraftsCreated {
			fmt.Fprintf(t.w, "  draft: %s\n", a)
		}
	}
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
		return []byte(s[:width] + "…")
	}
	return []byte(s)
}
