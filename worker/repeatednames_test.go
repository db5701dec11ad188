package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A model's answer that repeats a member name is refused as a decision,
// with an error that says so, and kept as text: it used to be kept as raw
// JSON, repeated name and all, in a proposed event the shipped event
// schema refuses (waitEnd checks every envelope against it), and the
// model was told its answer was not valid JSON.
func TestAnInvalidDecisionWithRepeatedNamesIsStoredAsText(t *testing.T) {
	t.Parallel()
	const answer = `{"final_answer":{"summary":"a"},"final_answer":{"summary":"b"}}`
	b := setup(t, options{
		agents:  map[string]config.Profile{"dup": profile()},
		scripts: map[string]model.Model{"dup": scripted(t, answer, `{"final_answer":{"summary":"done"}}`)},
	})
	evs := b.waitEnd(b.submit(task("dup-decision-1", "dup")))
	assertTrail(t, evs, []string{"started", "proposed:invalid", "observed", "proposed:final", "finished:done"})
	var first events.ProposedData
	if err := all(evs, events.TypeProposed)[0].Decode(&first); err != nil {
		t.Fatal(err)
	}
	if first.RawText != answer || first.Raw != nil {
		t.Errorf("the invalid answer is kept as raw %s, raw_text %q; want raw_text %q", first.Raw, first.RawText, answer)
	}
	if obs := string(dataOf(t, all(evs, events.TypeObserved)[0])); !strings.Contains(obs, "repeats a member name") {
		t.Errorf("the model is not told what was wrong: %s", obs)
	}
}

// A tool's result that repeats a name (a tool in any language may answer
// so) is stored as a strict reader takes it, the last value of the name
// kept: it used to be stored as it came, in an executed event the shipped
// event schema refuses.
func TestAToolResultWithRepeatedNamesIsStoredAsAStrictReaderTakesIt(t *testing.T) {
	t.Parallel()
	m := tools.Manifest{
		Name: "dup_lookup", Description: "test", Permission: tools.Read, Timeout: events.Duration(2 * time.Second),
		ArgsSchema: json.RawMessage(`{"type":"object"}`),
	}
	b := setup(t, options{
		tools: []tools.Manifest{m},
		builtins: tools.Builtins{"dup_lookup": func(_ context.Context, c tools.Call) (any, error) {
			return json.RawMessage(`{"vendor":"acme","n":1,"vendor":"other"}`), nil
		}},
		roles:  writerRoles("dup_lookup"),
		agents: map[string]config.Profile{"dup": profile("dup_lookup")},
		scripts: map[string]model.Model{"dup": scripted(t,
			`{"tool_calls":[{"tool":"dup_lookup","args":{}}]}`,
			`{"final_answer":{"summary":"looked up"}}`)},
	})
	evs := b.waitEnd(b.submit(task("dup-result-1", "dup")))
	x := last[events.ExecutedData](t, evs, events.TypeExecuted)
	if x.Status != events.ExecOK || compactJSON(t, x.Result) != `{"n":1,"vendor":"other"}` {
		t.Errorf("executed: status %s, result %s; want ok with the last vendor only", x.Status, x.Result)
	}
}
