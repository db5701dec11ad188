package events

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"
)

// Reasons lists every Reason constant of data.go: a new stop reason that
// is not added there would be refused by `loopgate runs --reason`.
func TestReasonsListsEveryStopReason(t *testing.T) {
	declared := constantsOf[Reason](t, "data.go", "Reason")
	if len(declared) < 11 {
		t.Fatalf("found %d Reason constants in data.go, want the 11 or more it declares", len(declared))
	}
	if got := Reasons(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(declared))) {
		t.Errorf("Reasons() = %v, want the constants of data.go %v", got, declared)
	}
	if !ReasonMaxSteps.Valid() || Reason("max-steps").Valid() || Reason("").Valid() {
		t.Error("Valid does not tell the stop reasons from other strings")
	}
}

// constantsOf returns the values of the string constants of type typeName
// declared in file, in the order they are declared.
func constantsOf[T ~string](t *testing.T, file, typeName string) []T {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []T
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typeName {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				declared = append(declared, T(s))
			}
		}
		return true
	})
	return declared
}
