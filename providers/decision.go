package providers

import (
	"encoding/json"

	"github.com/loopgate/loopgate/events"
)

// The output the HTTP providers translate an answer into: loopgate's
// decision as a model writes it (see schemas/decision.schema.json). The
// providers only translate; the worker validates.
type (
	wireDecision struct {
		ToolCalls []wireCall          `json:"tool_calls,omitempty"`
		Final     *events.FinalAnswer `json:"final_answer,omitempty"`
	}
	wireCall struct {
		Tool       string          `json:"tool"`
		Args       json.RawMessage `json:"args"`
		ProviderID string          `json:"provider_id,omitempty"`
	}
)

// argsOf is a tool call's arguments as the decision carries them: the JSON
// the provider sent, or, when that is not JSON, the text as a JSON string,
// which fails validation ("args" must be an object) so that the worker
// records an invalid decision with what the model wrote. Nothing is
// repaired.
func argsOf(raw string) json.RawMessage {
	if json.Valid([]byte(raw)) {
		return json.RawMessage(raw)
	}
	b, _ := json.Marshal(raw) // a string always marshals
	return b
}

// distinctIDs reports whether every call has an id and no two share one:
// only then can the provider's message be replayed with results matching
// its calls. Otherwise the provider ids are dropped and the conversation
// is rebuilt from the decision under loopgate's call ids.
func distinctIDs(calls []wireCall) bool {
	seen := make(map[string]bool, len(calls))
	for _, c := range calls {
		if c.ProviderID == "" || seen[c.ProviderID] {
			return false
		}
		seen[c.ProviderID] = true
	}
	return true
}

func marshalOutput(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only an args value that is not JSON could fail, and argsOf
		// guarantees JSON; keep what is known rather than crash.
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	return b
}
