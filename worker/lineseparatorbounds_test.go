package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// observedOf returns the data of the observed event of the call of tool.
func observedOf(t *testing.T, evs []events.Event, tool string) events.ObservedData {
	t.Helper()
	for _, e := range evs {
		if e.Type == events.TypeObserved && e.Tool == tool {
			var obs events.ObservedData
			if err := e.Decode(&obs); err != nil {
				t.Fatal(err)
			}
			return obs
		}
	}
	t.Fatalf("no observed event of %s", tool)
	return events.ObservedData{}
}

// An observation the redactor rewrote used to come back from it with each
// line separator (U+2028) as its raw 3 bytes, where the events' encoder
// (encoding/json's semantics) writes \u2028, 6 bytes. bounded measures and
// bounds the redactor's output, so the observed event as stored (and as
// the model is shown it, rebuilt from the events) held more bytes than its
// "bytes" said and than max_observation_bytes. The redactor now escapes
// them as the encoder does. Here the model's argument name holds an e-mail
// address and 25 line separators; the call is refused (extra field) and
// the refusal names the field.
func TestAStoredObservationStaysWithinItsBoundWhenItHoldsLineSeparators(t *testing.T) {
	t.Parallel()
	const bound = 512
	key := "ana@example.org" + strings.Repeat("\u2028", 25)
	args, _ := json.Marshal(map[string]map[string]int{"args": {key: 1}})
	call := `{"tool_calls":[{"tool":"seps",` + strings.TrimPrefix(string(args), "{") + `]}`
	seps := fakeTool("seps", tools.Read, false)
	seps.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"additionalProperties":false}`)
	b := setup(t, options{
		tools:    []tools.Manifest{seps},
		builtins: tools.Builtins{"seps": func(ctx context.Context, c tools.Call) (any, error) { return map[string]int{"ok": 1}, nil }},
		roles:    operatorMay("seps"),
		agents: map[string]config.Profile{"seps-agent": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"seps"}, Roles: []string{"operator"},
			Limits: events.Limits{MaxObservationBytes: bound},
		}},
		scripts: map[string]model.Model{"seps-agent": scripted(t, call, `{"final_answer":{"summary":"ok"}}`)},
	})
	evs := b.waitEnd(b.submit(task("seps-1", "seps-agent")))
	assertTrail(t, evs, []string{"started", "proposed", "validated:invalid_arguments(seps)", "observed(seps)", "proposed:final", "finished:done"})
	obs := observedOf(t, evs, "seps")
	if len(obs.Observation) != obs.Bytes || obs.Bytes > bound {
		t.Fatalf("stored observation has %d bytes, its event says %d, the bound is %d:\n%s", len(obs.Observation), obs.Bytes, bound, obs.Observation)
	}
}

// The same for the result an executed event keeps (at most 16 KiB, README
// "Decisions worth knowing"): a result the redactor rewrote came back with
// raw line separators, passed the bound at about half its stored size, and
// was stored at twice the bound, marked as kept whole.
func TestARecordedResultStaysWithinSixteenKiBWhenItHoldsLineSeparators(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("seps", tools.Read, false)},
		builtins: tools.Builtins{"seps": func(ctx context.Context, c tools.Call) (any, error) {
			return map[string]string{"text": "ana@example.org " + strings.Repeat("\u2028", 5000)}, nil
		}},
		roles: operatorMay("seps"),
		agents: map[string]config.Profile{"seps-agent": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"seps"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"seps-agent": scripted(t, `{"tool_calls":[{"tool":"seps","args":{}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	evs := b.waitEnd(b.submit(task("seps-2", "seps-agent")))
	x := last[events.ExecutedData](t, evs, events.TypeExecuted)
	if x.Status != events.ExecOK || len(x.Result) > 16<<10 {
		t.Fatalf("executed %s keeps a result of %d bytes (result_bytes %d), over 16 KiB", x.Status, len(x.Result), x.ResultBytes)
	}
}
