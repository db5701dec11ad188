package schemas_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/schemas"
)

// task.schema.json is what an upstream system builds its publisher from.
// Its description used to say the task_id "is also the publish's
// Nats-Msg-Id"; the README and `loopgate submit` (cli.taskMsgID) use
// <tenant>/<task_id>, because JetStream deduplicates ids across the whole
// work stream: a publisher that followed the schema and sent a bare
// task_id had another tenant's task with the same id, published within the
// two-minute window, dropped as a duplicate (no run, no rejected event).
func TestTaskSchemaNamesTheTenantScopedMsgID(t *testing.T) {
	raw, err := schemas.Bytes("task")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Description string `json:"description"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc.Description, "<tenant>/<task_id>") || strings.Contains(doc.Description, "task_id is also the publish's Nats-Msg-Id") {
		t.Errorf("task.schema.json's description %q: want it to name the Nats-Msg-Id <tenant>/<task_id> that the README and loopgate submit use", doc.Description)
	}
}

// Pinned: the members each published schema allows are exactly the JSON
// names of the Go type loopgate decodes it into.
func TestSchemaMembersAreTheGoTypesFields(t *testing.T) {
	cases := []struct {
		schema  string
		pointer []string // path of property names to the object
		typ     reflect.Type
	}{
		{"task", nil, reflect.TypeFor[events.Task]()},
		{"task", []string{"principal"}, reflect.TypeFor[events.Principal]()},
		{"task", []string{"limits"}, reflect.TypeFor[events.Limits]()},
		{"approval", nil, reflect.TypeFor[approvals.Message]()},
		{"approval", []string{"approver"}, reflect.TypeFor[approvals.Approver]()},
		{"cancel", nil, reflect.TypeFor[events.CancelMessage]()},
		{"cancel", []string{"requested_by"}, reflect.TypeFor[events.Requester]()},
		{"decision", []string{"final_answer"}, reflect.TypeFor[events.FinalAnswer]()},
	}
	for _, c := range cases {
		raw, err := schemas.Bytes(c.schema)
		if err != nil {
			t.Fatal(err)
		}
		var node map[string]any
		if err := json.Unmarshal(raw, &node); err != nil {
			t.Fatal(err)
		}
		for _, p := range c.pointer {
			node = node["properties"].(map[string]any)[p].(map[string]any)
		}
		var inSchema []string
		for k := range node["properties"].(map[string]any) {
			inSchema = append(inSchema, k)
		}
		var inGo []string
		for i := range c.typ.NumField() {
			name, _, _ := strings.Cut(c.typ.Field(i).Tag.Get("json"), ",")
			inGo = append(inGo, name)
		}
		slices.Sort(inSchema)
		slices.Sort(inGo)
		if !slices.Equal(inSchema, inGo) {
			t.Errorf("%s %v: schema members %v, Go %s fields %v", c.schema, c.pointer, inSchema, c.typ, inGo)
		}
	}
}
