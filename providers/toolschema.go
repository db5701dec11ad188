package providers

import (
	"encoding/json"
	"fmt"

	"github.com/loopgate/loopgate/tools"
)

// toolSchema is the schema a provider is sent for a tool: its effective
// schema (the one its calls are validated against) less the root
// "$schema", an annotation the model has no use for and that some servers
// refuse. Every other keyword goes as it is, byte for byte below the top
// level. A tool with no schema takes no arguments.
func toolSchema(s tools.Spec) (map[string]json.RawMessage, error) {
	if len(s.Parameters) == 0 {
		return map[string]json.RawMessage{"type": json.RawMessage(`"object"`), "properties": json.RawMessage(`{}`)}, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(s.Parameters, &top); err != nil || top == nil {
		return nil, fmt.Errorf("tool %s: the parameters schema is not a JSON object", s.Name)
	}
	delete(top, "$schema")
	return top, nil
}
