package nodetool

import (
	"encoding/json"
	"testing"

	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/tools"
)

// The README says either service may answer cityops.tools.get_procedure
// (one queue group) "with the same answers". They used to normalise the
// topic differently: Go's strings.TrimSpace/ToLower against JS's trim()/
// toLowerCase(). "SANİTATION" (U+0130) lowers to "sanitation" in Go and to
// "sani̇tation" in JS; U+0085 is space to Go, not to JS; U+FEFF is space to
// JS, not to Go. The same call found the page or not depending on which
// instance the queue group picked. Both take ASCII case and space only.
func TestNodeAndGoNormaliseTopicsAlike(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	schema, err := cityops.Files.ReadFile("schemas/get_procedure.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	remote := n.tool(t, "get_procedure", schema, `{"type":"object","required":["topic"]}`)
	builtins := tools.Builtins{}
	if err := cityops.Register(builtins, cityops.Options{Outbox: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"SANİTATION", "sanitation\u0085", "\ufeffnoise"} {
		args, _ := json.Marshal(map[string]string{"topic": topic})
		c := tools.Call{Tool: "get_procedure", RunID: "run-1", CallID: "s1c1", OperationID: "op", Tenant: "cityops", Principal: "dev", Args: args}
		fromNode, err := remote(t.Context(), c)
		if err != nil {
			t.Fatalf("%q: node: %v\n%s", topic, err, n.stderr)
		}
		fromGo, err := builtins[cityops.ToolGetProcedure](t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := canonical(t, fromNode), canonical(t, fromGo); a != b {
			t.Errorf("topic %q:\nnode %s\ngo   %s", topic, a, b)
		}
	}
}
