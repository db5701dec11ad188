package events

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// Types lists every Type constant of event.go, and the event schema that
// ships with loopgate names exactly those: a type written but missing from
// the schema's enum makes every reader that validates against it refuse
// real events (approval_rejected and reconciled were missing until
// session 29). The schema is read from its file: the schemas package
// imports this one.
func TestTypesAreTheConstantsAndTheSchemasEnum(t *testing.T) {
	declared := constantsOf[Type](t, "event.go", "Type")
	if len(declared) < 14 {
		t.Fatalf("found %d Type constants in event.go, want the 14 or more it declares", len(declared))
	}
	if got := Types(); !slices.Equal(got, declared) {
		t.Errorf("Types() = %v, want the constants of event.go in order %v", got, declared)
	}
	for _, ty := range declared {
		if !ty.Known() {
			t.Errorf("%q is declared but not Known", ty)
		}
	}
	if Type("approval").Known() {
		t.Error(`"approval" is Known, but no such type exists`)
	}

	raw, err := os.ReadFile("../schemas/event.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Type struct {
				Enum []Type `json:"enum"`
			} `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	if enum := schema.Properties.Type.Enum; !slices.Equal(enum, declared) {
		t.Errorf("event.schema.json's type enum is %v, want every type loopgate writes, in order: %v", enum, declared)
	}
}
