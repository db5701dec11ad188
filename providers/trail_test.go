package providers_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/providers"
	"github.com/loopgate/loopgate/schemas"
	"github.com/loopgate/loopgate/tools"
)

// Tools the tests offer. lookup's schema is the kind a manifest has
// ($schema, bounds, optional fields): strict mode cannot take it. status's
// fits strict mode.
var (
	lookupSpec = tools.Spec{
		Name:        "lookup_complaints",
		Description: "Finds 311 complaints.",
		Permission:  "read",
		Version:     "1",
		Parameters: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
			`"properties":{"category":{"type":"string","enum":["sanitation","noise"]},"limit":{"type":"integer","minimum":1,"maximum":20}},` +
			`"additionalProperties":false}`),
	}
	statusSpec = tools.Spec{
		Name:        "complaint_status",
		Description: "Reads one complaint's status.",
		Permission:  "read",
		Version:     "1",
		Parameters: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
			`"properties":{"request_id":{"type":"string","description":"SR-nnnnn"}},"required":["request_id"],"additionalProperties":false}`),
	}
)

// trail plays the worker's part between two Propose calls: it records
// what the model proposed and what loopgate observed as the worker's
// events, and folds them with events.Fold into the History of the next
// Request — the same turns a real run gives a provider.
type trail struct {
	t     *testing.T
	evs   []events.Event
	state *events.RunState
}

const trailRun = "cityops-t-1"

func newTrail(t *testing.T, input string) *trail {
	t.Helper()
	in, _ := json.Marshal(input)
	tr := &trail{t: t}
	tr.append(events.TypeStarted, 0, "", events.StartedData{Task: events.Task{TaskID: "t-1", Tenant: "cityops", Agent: "helper", Input: in}})
	return tr
}

func (tr *trail) append(typ events.Type, step int, callID string, data any) {
	tr.t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.evs = append(tr.evs, events.Event{
		EventID: "e", RunID: trailRun, Tenant: "cityops", Seq: uint64(len(tr.evs) + 1), Type: typ,
		Time: time.Unix(1700000000, 0).Add(time.Duration(len(tr.evs)) * time.Second), Step: step, CallID: callID, Data: b,
	})
	st, err := events.Fold(tr.evs)
	if err != nil {
		tr.t.Fatalf("fold: %v", err)
	}
	tr.state = st
}

// proposed records a model's response as the worker does: the decision
// when its output is valid (call ids minted per step), else the raw output
// with the validation errors. It returns the decision, nil if invalid.
func (tr *trail) proposed(step int, resp providers.Response) *events.Decision {
	tr.t.Helper()
	d, invalid := parseDecision(tr.t, resp.Output, step)
	data := events.ProposedData{Decision: d, Invalid: invalid, Usage: resp.Usage, Model: resp.Name, ProviderMessage: resp.Message}
	if d == nil {
		if json.Valid(resp.Output) {
			data.Raw = resp.Output
		} else {
			data.RawText = string(resp.Output)
		}
	}
	tr.append(events.TypeProposed, step, "", data)
	return d
}

// observe records the observation of one call.
func (tr *trail) observe(step int, callID, observation string) {
	tr.append(events.TypeObserved, step, callID, events.ObservedData{Observation: json.RawMessage(observation), Bytes: len(observation)})
}

// observeInvalid records the error observation about an invalid decision.
func (tr *trail) observeInvalid(step int) string {
	const obs = `{"status":"error","error":"invalid_decision","message":"propose exactly {\"tool_calls\":[...]} or {\"final_answer\":{...}}"}`
	tr.observe(step, "", obs)
	return obs
}

func (tr *trail) request(step int, specs ...tools.Spec) providers.Request {
	return providers.Request{RunID: trailRun, Agent: "helper", Instructions: "You are the CityOps assistant.", Step: step, History: tr.state.History, Tools: specs}
}

// parseDecision is the worker's check of a model's output: the decision
// schema, then the call ids.
func parseDecision(t *testing.T, out []byte, step int) (*events.Decision, []events.FieldError) {
	t.Helper()
	s, err := schemas.Compile("decision.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	trimmed := bytes.TrimSpace(out)
	if !json.Valid(trimmed) {
		return nil, []events.FieldError{{Message: "decision is not valid JSON"}}
	}
	if res := s.ValidateJSON(trimmed); !res.IsValid() {
		return nil, append(schemas.Errors(res), events.FieldError{Message: "not a decision"})
	}
	var w struct {
		ToolCalls []struct {
			Tool       string          `json:"tool"`
			Args       json.RawMessage `json:"args"`
			ProviderID string          `json:"provider_id"`
		} `json:"tool_calls"`
		Final *events.FinalAnswer `json:"final_answer"`
	}
	if err := json.Unmarshal(trimmed, &w); err != nil {
		t.Fatal(err)
	}
	d := &events.Decision{Final: w.Final}
	for i, c := range w.ToolCalls {
		d.ToolCalls = append(d.ToolCalls, events.ToolCall{ID: events.CallID(step, i+1), ProviderID: c.ProviderID, Tool: c.Tool, Args: c.Args})
	}
	return d, nil
}

// mustDecision parses an output that must be a valid decision.
func mustDecision(t *testing.T, out []byte) *events.Decision {
	t.Helper()
	d, invalid := parseDecision(t, out, 1)
	if d == nil {
		t.Fatalf("output %s is not a valid decision: %v", out, invalid)
	}
	return d
}
