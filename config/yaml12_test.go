package config_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/config"
)

// The config is YAML 1.2: n, y, on, off, yes and no are strings, as
// property names, as enum values and as a role's argument constraint
// (YAML 1.1 read them as booleans: a property named on became "true").
func TestYAML11BooleanWordsLoadAsStrings(t *testing.T) {
	t.Parallel()
	words := []string{"n", "y", "on", "off", "yes", "no"}
	props := make([]string, len(words))
	for i, w := range words {
		props[i] = w + ": {type: string, enum: [n, y, on, off, yes, no]}"
	}
	given := edit(t,
		"args_schema: {type: object, additionalProperties: false, properties: {text: {type: string}}}",
		"args_schema: {type: object, additionalProperties: false, properties: {"+strings.Join(props, ", ")+"}}")
	given = strings.Replace(given, "operator: {call: [lookup, draft]}", "operator: {call: [lookup, draft], args: {draft: {on: [off, yes], n: [y]}}}", 1)
	c, err := config.Load(files(given), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}

	var schema struct {
		Properties map[string]struct {
			Type string `json:"type"`
			Enum []any  `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(c.Tools[1].ArgsSchema, &schema); err != nil {
		t.Fatalf("draft args_schema %s: %v", c.Tools[1].ArgsSchema, err)
	}
	for _, w := range words {
		p, ok := schema.Properties[w]
		if !ok {
			t.Errorf("property %q is missing; args_schema = %s", w, c.Tools[1].ArgsSchema)
			continue
		}
		if got := p.Enum; !slices.Equal(got, []any{"n", "y", "on", "off", "yes", "no"}) {
			t.Errorf("property %q enum = %#v, want the six words as strings", w, got)
		}
	}
	if len(schema.Properties) != len(words) {
		t.Errorf("args_schema properties = %d, want %d: %s", len(schema.Properties), len(words), c.Tools[1].ArgsSchema)
	}

	args := c.Policy.Roles["operator"].Args["draft"]
	if got := rawStrings(args["on"]); !slices.Equal(got, []string{`"off"`, `"yes"`}) {
		t.Errorf("operator's constraint on draft's on = %v, want [\"off\" \"yes\"]", got)
	}
	if got := rawStrings(args["n"]); !slices.Equal(got, []string{`"y"`}) {
		t.Errorf("operator's constraint on draft's n = %v, want [\"y\"]", got)
	}
}

func rawStrings(raws []json.RawMessage) []string {
	out := make([]string, len(raws))
	for i, r := range raws {
		out[i] = string(r)
	}
	return out
}

// A key spelt on, off, y or no where a key is expected is an unknown key
// of that name, not a boolean.
func TestBooleanWordAsAKeyIsAnUnknownKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		given string
		field string
	}{
		{"in a profile", edit(t, "    description: Helps.\n", "    description: Helps.\n    on: true\n"), "/agents/helper/on"},
		{"in a tool", edit(t, "    timeout: 2s\n", "    timeout: 2s\n    off: 1s\n"), "/tools/0/off"},
		{"in limits", edit(t, "      max_steps: 5\n", "      max_steps: 5\n      y: 3\n"), "/agents/helper/limits/y"},
		{"at the top", validYAML + "no: 1\n", "/no"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ce := refused(t, tt.given)
			wantField(t, ce, tt.field)
			if want := tt.field + ": is not allowed"; !strings.Contains(ce.Error(), want) {
				t.Errorf("Load() error = %q\nwant it to contain %q", ce, want)
			}
		})
	}
}

// true and false (and their capitalised forms) are still booleans.
func TestTrueAndFalseLoadAsBooleans(t *testing.T) {
	t.Parallel()
	given := edit(t, "    timeout: 2s\n", "    timeout: 2s\n    parallel_safe: True\n    idempotent: false\n")
	given = strings.Replace(given, "policy:\n", "policy:\n  allow_self_approval: true\n", 1)
	c, err := config.Load(files(given), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Tools[0].ParallelSafe || c.Tools[0].Idempotent || !c.Policy.AllowSelfApproval {
		t.Errorf("parallel_safe = %v, idempotent = %v, allow_self_approval = %v; want true, false, true",
			c.Tools[0].ParallelSafe, c.Tools[0].Idempotent, c.Policy.AllowSelfApproval)
	}
}

// YAML 1.1's boolean words where a boolean is expected are strings, and
// refused naming the field: the file does not say true or false.
func TestYAML11BooleanWordWhereABooleanIsExpectedIsRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"yes", "no", "on", "off", "y", "n", "Yes", "OFF"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			ce := refused(t, edit(t, "    timeout: 2s\n", "    timeout: 2s\n    parallel_safe: "+v+"\n"))
			wantField(t, ce, "/tools/0/parallel_safe")
			if want := "/tools/0/parallel_safe: must be boolean, not string"; !strings.Contains(ce.Error(), want) {
				t.Errorf("Load() error = %q\nwant it to contain %q", ce, want)
			}
		})
	}
}

// The loader expands anchors and aliases, applies merge keys, and still
// refuses a key set twice in one mapping.
func TestAnchorsMergesAndDuplicateKeys(t *testing.T) {
	t.Parallel()
	more := "  second: &second\n    description: *desc\n    model: {provider: scripted, script: scripts/happy.json}\n    tools: [lookup]\n    roles: [operator]\n" +
		"  third:\n    <<: *second\n    tools: [draft]\n"
	given := strings.Replace(edit(t, "    description: Helps.\n", "    description: &desc Helps.\n"), "policy:\n", more+"policy:\n", 1)
	c, err := config.Load(files(given), "loopgate.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, given)
	}
	third := c.Agents["third"]
	if third.Description != "Helps." || c.Agents["second"].Description != "Helps." ||
		!slices.Equal(third.Tools, []string{"draft"}) || !slices.Equal(third.Roles, []string{"operator"}) {
		t.Errorf("third = %+v, want second's description and roles with its own tools", third)
	}

	ce := refused(t, edit(t, "    roles: [operator]\n", "    roles: [operator]\n    tools: [lookup]\n"))
	if want := `is not valid YAML: line 19: key "tools" is already set at line 17`; !strings.Contains(ce.Error(), want) {
		t.Errorf("Load() error = %q\nwant it to contain %q", ce, want)
	}
}
