package worker

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kaptinlin/jsonschema"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/schemas"
)

// MaxDecisionBytes bounds one model output. Larger output is an invalid
// decision, not a crash and not a memory bill.
const MaxDecisionBytes = 256 << 10

// decisionParser turns the model's raw output into a Decision, or into
// field-level errors the model can correct. The output is untrusted input.
type decisionParser struct {
	schema *jsonschema.Schema
}

func newDecisionParser() (*decisionParser, error) {
	s, err := schemas.Compile("decision.schema.json")
	if err != nil {
		return nil, fmt.Errorf("compile decision schema: %w", err)
	}
	return &decisionParser{schema: s}, nil
}

// wireDecision is the decision as a model writes it: calls carry no
// loopgate ids yet.
type wireDecision struct {
	ToolCalls []wireCall          `json:"tool_calls"`
	Final     *events.FinalAnswer `json:"final_answer"`
}

// wireCall is one call as a model writes it.
type wireCall struct {
	Tool       string          `json:"tool"`
	Args       json.RawMessage `json:"args"`
	ProviderID string          `json:"provider_id"`
}

// parse validates out and mints the call ids of step. Exactly one of the
// results is non-nil.
func (p *decisionParser) parse(out []byte, step int) (*events.Decision, []events.FieldError) {
	if len(out) > MaxDecisionBytes {
		return nil, []events.FieldError{{Message: fmt.Sprintf("decision is %d bytes, over the limit of %d", len(out), MaxDecisionBytes)}}
	}
	trimmed := bytes.TrimSpace(out)
	w, ok := fastDecision(trimmed)
	if !ok {
		var errs []events.FieldError
		if w, errs = p.validate(trimmed); errs != nil {
			return nil, errs
		}
	}
	d := &events.Decision{Final: w.Final}
	for i, c := range w.ToolCalls {
		d.ToolCalls = append(d.ToolCalls, events.ToolCall{
			ID:         events.CallID(step, i+1),
			ProviderID: c.ProviderID,
			Tool:       c.Tool,
			Args:       c.Args,
		})
	}
	return d, nil
}

// notStrictJSON says why data, outside input named what, is not JSON as a
// strict reader takes it, or "" when it is: not JSON at all, or JSON that
// repeats a member name (encoding/json keeps the last value, the schema's
// validator refuses it) or holds invalid UTF-8. Decisions, tasks and
// approvals are all read so.
func notStrictJSON(what string, data []byte) string {
	switch {
	case !json.Valid(data):
		return what + " is not valid JSON"
	case !jsontext.Value(data).IsValid():
		return what + " repeats a member name in an object, or holds invalid UTF-8: each name may appear once"
	}
	return ""
}

// validate checks out against the decision schema and decodes it: the
// errors name the fields at fault.
func (p *decisionParser) validate(out []byte) (*wireDecision, []events.FieldError) {
	if why := notStrictJSON("decision", out); why != "" {
		return nil, []events.FieldError{{Message: why}}
	}
	if res := p.schema.ValidateJSON(out); !res.IsValid() {
		errs := schemas.Errors(res)
		if len(errs) == 0 {
			errs = []events.FieldError{{Message: "decision does not match the decision schema"}}
		}
		return nil, append(errs, events.FieldError{Message: `a decision is exactly {"tool_calls":[{"tool":...,"args":{...}}]} or {"final_answer":{"summary":...}}`})
	}
	var w wireDecision
	if err := json.Unmarshal(out, &w); err != nil {
		return nil, []events.FieldError{{Message: "decision does not decode: " + err.Error()}}
	}
	return &w, nil
}
