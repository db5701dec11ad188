package events_test

import (
	"reflect"
	"testing"

	"github.com/loopgate/loopgate/events"
)

// callEnd is how one call of a test step ends: its attempts' statuses
// (none: refused by validation) and, for its last attempt, a reconcile
// answer.
type callEnd struct {
	tool       string
	refused    bool
	attempts   []string
	reconciled *bool
}

// stepsTrail is a run of one call per step, each ending as given, every
// call observed.
func stepsTrail(t *testing.T, ends ...callEnd) []events.Event {
	t.Helper()
	given := []ev{{typ: events.TypeStarted, data: started(`"go"`)}}
	for i, end := range ends {
		step := i + 1
		c := call(step, 1, end.tool, `{}`)
		at := func(e ev) ev { e.step, e.call, e.tool = step, c.ID, end.tool; return e }
		given = append(given, ev{typ: events.TypeProposed, step: step, data: proposeCalls(1, 1, c)})
		if end.refused {
			given = append(given, at(ev{typ: events.TypeValidated, data: events.ValidatedData{Status: events.InvalidArguments}}))
		} else {
			given = append(given, at(ev{typ: events.TypeValidated, data: validOK("h")}))
		}
		for n, status := range end.attempts {
			x := executed(status)
			x.Attempt = n + 1
			given = append(given, at(ev{typ: events.TypeExecuting, data: executing(n + 1)}), at(ev{typ: events.TypeExecuted, data: x}))
		}
		if end.reconciled != nil {
			given = append(given, at(ev{typ: events.TypeReconciled, data: events.ReconciledData{OperationID: "op", Attempt: len(end.attempts), Via: "status", Applied: *end.reconciled}}))
		}
		given = append(given, at(ev{typ: events.TypeObserved, data: observed(`{"status":"ok"}`)}))
	}
	return trail(t, given...)
}

// The fold lists where the run first observed each tool's output: an
// observation holds it when the call's last attempt ended ok or was
// reconciled as applied, and never when the call was refused, failed,
// timed out without a reconcile that found it applied, or was a dry run.
func TestFoldListsTheFirstObservationOfEachToolsOutput(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	tests := []struct {
		name  string
		given []callEnd
		want  []events.Output
	}{
		{"ok", []callEnd{{tool: "read_mail", attempts: []string{events.ExecOK}}},
			[]events.Output{{Tool: "read_mail", Step: 1, CallID: "s1c1"}}},
		{"ok after a transient failure", []callEnd{{tool: "read_mail", attempts: []string{events.ExecTransient, events.ExecOK}}},
			[]events.Output{{Tool: "read_mail", Step: 1, CallID: "s1c1"}}},
		{"refused by validation", []callEnd{{tool: "read_mail", refused: true}}, nil},
		{"failed", []callEnd{{tool: "read_mail", attempts: []string{events.ExecToolFailed}}}, nil},
		{"transient to the end", []callEnd{{tool: "read_mail", attempts: []string{events.ExecTransient, events.ExecTransient}}}, nil},
		{"timed out", []callEnd{{tool: "read_mail", attempts: []string{events.ExecTimeout}}}, nil},
		{"timed out, reconciled applied", []callEnd{{tool: "send_mail", attempts: []string{events.ExecTimeout}, reconciled: &yes}},
			[]events.Output{{Tool: "send_mail", Step: 1, CallID: "s1c1"}}},
		{"timed out, reconciled not applied", []callEnd{{tool: "send_mail", attempts: []string{events.ExecTimeout}, reconciled: &no}}, nil},
		{"dry run", []callEnd{{tool: "send_mail", attempts: []string{events.ExecDryRun}}}, nil},
		{"a tool's first output only", []callEnd{
			{tool: "read_mail", attempts: []string{events.ExecToolFailed}},
			{tool: "read_mail", attempts: []string{events.ExecOK}},
			{tool: "read_mail", attempts: []string{events.ExecOK}},
		}, []events.Output{{Tool: "read_mail", Step: 2, CallID: "s2c1"}}},
		{"in the order observed", []callEnd{
			{tool: "read_note", attempts: []string{events.ExecOK}},
			{tool: "read_mail", attempts: []string{events.ExecOK}},
			{tool: "read_note", attempts: []string{events.ExecOK}},
		}, []events.Output{{Tool: "read_note", Step: 1, CallID: "s1c1"}, {Tool: "read_mail", Step: 2, CallID: "s2c1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := mustFold(t, stepsTrail(t, tt.given...)).Outputs; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Outputs = %+v, want %+v", got, tt.want)
			}
		})
	}
}
