package events_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/schemas"
)

// events.Types lists every Type constant of event.go, and the event schema that
// ships with loopgate names exactly those: a type written but missing from
// the schema's enum makes every reader that validates against it refuse
// real events (approval_rejected and reconciled were missing until
// session 29).
func TestTypesAreTheConstantsAndTheSchemasEnum(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []events.Type
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Type" {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				declared = append(declared, events.Type(s))
			}
		}
		return true
	})
	if len(declared) < 14 {
		t.Fatalf("found %d Type constants in event.go, want the 14 or more it declares", len(declared))
	}
	if got := events.Types(); !slices.Equal(got, declared) {
		t.Errorf("Types() = %v, want the constants of event.go in order %v", got, declared)
	}
	for _, ty := range declared {
		if !ty.Known() {
			t.Errorf("%q is declared but not Known", ty)
		}
	}
	if events.Type("approval").Known() {
		t.Error(`"approval" is Known, but no such type exists`)
	}

	raw, err := schemas.Bytes("event")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Type struct {
				Enum []events.Type `json:"enum"`
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
