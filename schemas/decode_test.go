package schemas_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/schemas"
)

// Each way a schema-valid task can still fail to decode is named by the
// pointer of its field.
func TestDecodeErrorNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc, field, message string
	}{
		{`{"limits":{"max_steps":3.0}}`, "/limits/max_steps", "number 3.0 does not fit: want a whole number written without a fraction or exponent, within range"},
		{`{"limits":{"max_tokens":100000000000000000000}}`, "/limits/max_tokens", "number 100000000000000000000 does not fit: want a whole number written without a fraction or exponent, within range"},
		{`{"limits":{"max_active":"9999999999h"}}`, "/limits/max_active", `is not a usable duration: duration "9999999999h" (invalid duration "9999999999h")`},
		{`{"principal":{"roles":[1]}}`, "/principal/roles", "number does not fit: want a string"},
	}
	for _, tt := range tests {
		var task events.Task
		err := json.Unmarshal([]byte(tt.doc), &task)
		if err == nil {
			t.Fatalf("%s decoded", tt.doc)
		}
		got := schemas.DecodeError(err)
		if got.Field != tt.field || got.Message != tt.message {
			t.Errorf("%s:\n got %s: %s\nwant %s: %s", tt.doc, got.Field, got.Message, tt.field, tt.message)
		}
	}
	if got := schemas.DecodeError(errors.New("boom")); got.Field != "" || got.Message != "does not decode: boom" {
		t.Errorf("another error: %+v", got)
	}
}
