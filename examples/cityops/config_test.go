package cityops

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/kaptinlin/jsonschema"
	"go.yaml.in/yaml/v3"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// These tests keep the example's files consistent with one another and with
// the Go code: the config decodes strictly into config.Config, every path
// it names is in Files, every schema compiles and is closed, every script's
// calls are valid or invalid exactly as its scenario needs.

type script struct {
	Decisions  []json.RawMessage `json:"decisions"`
	RepeatLast bool              `json:"repeat_last"`
	Usage      events.Usage      `json:"usage"`
}

type fixture struct {
	cfg     config.Config
	schemas map[string]*jsonschema.Schema // by tool name
	scripts map[string]script             // by agent name
}

func loadFixture(t *testing.T) fixture {
	t.Helper()
	raw, err := fs.ReadFile(Files, ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{schemas: map[string]*jsonschema.Schema{}, scripts: map[string]script{}}
	if err := decodeYAMLStrictly(raw, &f.cfg); err != nil {
		t.Fatalf("%s does not decode strictly into config.Config: %v", ConfigFile, err)
	}
	compiler := jsonschema.NewCompiler()
	for _, m := range f.cfg.Tools {
		var path string
		if err := json.Unmarshal(m.ArgsSchema, &path); err != nil {
			t.Fatalf("tool %s: args_schema should be a path: %v", m.Name, err)
		}
		b, err := fs.ReadFile(Files, path)
		if err != nil {
			t.Fatalf("tool %s: %v", m.Name, err)
		}
		s, err := compiler.Compile(b)
		if err != nil {
			t.Fatalf("tool %s: schema %s: %v", m.Name, path, err)
		}
		f.schemas[m.Name] = s
	}
	for name, p := range f.cfg.Agents {
		b, err := fs.ReadFile(Files, p.Model.Script)
		if err != nil {
			t.Fatalf("agent %s: %v", name, err)
		}
		var s script
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("agent %s: script %s: %v", name, p.Model.Script, err)
		}
		f.scripts[name] = s
	}
	return f
}

// decodeYAMLStrictly decodes raw into v as the config loader does before
// it resolves paths: the YAML read as JSON, an unknown field an error.
func decodeYAMLStrictly(raw []byte, v any) error {
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func TestConfigToolsMatchTheBuiltins(t *testing.T) {
	t.Parallel()
	f := loadFixture(t)
	bu := setup(t, Options{})
	if f.cfg.Version != 1 {
		t.Errorf("version = %d, want 1", f.cfg.Version)
	}
	var names []string
	for _, m := range f.cfg.Tools {
		names = append(names, m.Name)
		if _, ok := bu.builtins[m.Name]; !ok {
			t.Errorf("manifest %s has no builtin", m.Name)
		}
		wantPerm := tools.Read
		if m.Name == ToolDraftEscalation {
			wantPerm = tools.Write
		}
		if m.Permission != wantPerm {
			t.Errorf("%s permission = %s, want %s", m.Name, m.Permission, wantPerm)
		}
		if m.ParallelSafe != (wantPerm == tools.Read) {
			t.Errorf("%s parallel_safe = %v; read tools only", m.Name, m.ParallelSafe)
		}
		if m.Description == "" || !strings.Contains(strings.ToLower(m.Description), "use ") {
			t.Errorf("%s: description should tell the model when to use it: %q", m.Name, m.Description)
		}
		if m.Timeout == 0 || m.MaxCallsPerRun == 0 {
			t.Errorf("%s: timeout and max_calls_per_run should be set", m.Name)
		}
		for _, field := range m.View.Fields {
			if strings.HasPrefix(field, "resident_") {
				t.Errorf("%s: view shows %s", m.Name, field)
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{ToolDraftEscalation, ToolDraftStatus, ToolGetProcedure, ToolLookupComplaints, ToolSlowLookup}) {
		t.Errorf("manifests = %v", names)
	}
}

func TestConfigLookupViewsHideResidentData(t *testing.T) {
	t.Parallel()
	f := loadFixture(t)
	for _, m := range f.cfg.Tools {
		if m.Name != ToolLookupComplaints && m.Name != ToolSlowLookup {
			continue
		}
		if !slices.Equal(m.View.Fields, []string{"request_id", "days_open"}) || m.View.MaxItems != 5 {
			t.Errorf("%s view = %+v, want fields [request_id days_open], max_items 5", m.Name, m.View)
		}
	}
}

func TestSchemasAreClosedAndMatchTheData(t *testing.T) {
	t.Parallel()
	err := fs.WalkDir(Files, "schemas", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Files, path)
		if err != nil {
			return err
		}
		var s struct {
			Schema     string                     `json:"$schema"`
			Additional *bool                      `json:"additionalProperties"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		if s.Schema != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema = %q", path, s.Schema)
		}
		if s.Additional == nil || *s.Additional {
			t.Errorf("%s: additionalProperties must be false", path)
		}
		// draft_status is loopgate's reconcile tool: the operation id is its
		// whole question. Every tool the model may call must not take one.
		if _, ok := s.Properties["operation_id"]; ok && !strings.HasSuffix(path, "draft_status.schema.json") {
			t.Errorf("%s: operation_id is loopgate's, never a model argument", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var lookup struct {
		Properties struct {
			Category struct {
				Enum []string `json:"enum"`
			} `json:"category"`
			Status struct {
				Enum []string `json:"enum"`
			} `json:"status"`
		} `json:"properties"`
	}
	b, _ := fs.ReadFile(Files, "schemas/lookup_complaints.schema.json")
	if err := json.Unmarshal(b, &lookup); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lookup.Properties.Category.Enum, categories) {
		t.Errorf("schema categories %v, code categories %v", lookup.Properties.Category.Enum, categories)
	}
	if !slices.Equal(lookup.Properties.Status.Enum, statuses) {
		t.Errorf("schema statuses %v, code statuses %v", lookup.Properties.Status.Enum, statuses)
	}
}

func TestSchemasAgreeWithTheTools(t *testing.T) {
	t.Parallel()
	f := loadFixture(t)
	bu := setup(t, Options{})
	// Each case is valid for the schema exactly when the tool accepts it.
	tests := []struct {
		tool, args string
		valid      bool
	}{
		{ToolLookupComplaints, `{}`, true},
		{ToolLookupComplaints, `{"category":"graffiti","status":"closed","older_than_days":365,"limit":20}`, true},
		{ToolLookupComplaints, `{"older_than_days":-5}`, false},
		{ToolLookupComplaints, `{"older_than_days":366}`, false},
		{ToolLookupComplaints, `{"limit":0}`, false},
		{ToolLookupComplaints, `{"limit":21}`, false},
		{ToolLookupComplaints, `{"category":"parking"}`, false},
		{ToolLookupComplaints, `{"status":"resolved"}`, false},
		{ToolLookupComplaints, `{"extra":1}`, false},
		{ToolGetProcedure, `{"topic":"noise"}`, true},
		{ToolGetProcedure, `{}`, false},
		{ToolGetProcedure, `{"topic":""}`, false},
		{ToolGetProcedure, `{"topic":"` + strings.Repeat("é", 64) + `"}`, true},
		{ToolGetProcedure, `{"topic":"` + strings.Repeat("é", 65) + `"}`, false},
		{ToolDraftEscalation, `{"request_id":"SR-10421","reason":"0123456789"}`, true},
		{ToolDraftEscalation, `{"request_id":"SR-10421","reason":"` + strings.Repeat("r", 500) + `"}`, true},
		{ToolDraftEscalation, `{"request_id":"SR-10421","reason":"012345678"}`, false},
		{ToolDraftEscalation, `{"request_id":"SR-10421","reason":"` + strings.Repeat("r", 501) + `"}`, false},
		{ToolDraftEscalation, `{"request_id":"SR-104210","reason":"0123456789"}`, false},
		{ToolDraftEscalation, `{"request_id":"SR-10421"}`, false},
		{ToolDraftEscalation, `{"request_id":"SR-10421","reason":"0123456789","operation_id":"x"}`, false},
	}
	for i, tt := range tests {
		if got := f.schemas[tt.tool].ValidateJSON([]byte(tt.args)).IsValid(); got != tt.valid {
			t.Errorf("schema %s: valid(%.60s) = %v, want %v", tt.tool, tt.args, got, tt.valid)
		}
		op := "op-" + string(rune('a'+i))
		_, err := bu.call(t.Context(), t, tt.tool, op, tt.args)
		if (err == nil) != tt.valid {
			t.Errorf("tool %s(%.60s): err = %v, want accepted = %v", tt.tool, tt.args, err, tt.valid)
		}
	}
}

func TestAgentsNameKnownToolsAndRoles(t *testing.T) {
	t.Parallel()
	f := loadFixture(t)
	for name, p := range f.cfg.Agents {
		if p.Model.Provider != "scripted" {
			t.Errorf("agent %s: provider %q, want scripted", name, p.Model.Provider)
		}
		for _, tool := range p.Tools {
			if _, ok := f.schemas[tool]; !ok {
				t.Errorf("agent %s offers unknown tool %s", name, tool)
			}
		}
		if !slices.Equal(p.Roles, []string{"operator"}) {
			t.Errorf("agent %s roles = %v, want [operator]", name, p.Roles)
		}
		if p.Limits.MaxSteps == 0 {
			t.Errorf("agent %s has no step budget", name)
		}
	}
	roles := f.cfg.Policy.Roles
	if got := roles["operator"].Call; len(got) != 4 {
		t.Errorf("operator may call %v, want all four tools", got)
	}
	if got := roles["supervisor"].Approve; !slices.Equal(got, []string{ToolDraftEscalation}) {
		t.Errorf("supervisor may approve %v", got)
	}
	if g, ok := roles["guest"]; !ok || len(g.Call)+len(g.Approve) != 0 {
		t.Errorf("guest = %+v (present %v), want a role that may do nothing", g, ok)
	}
	limits := func(agent string) events.Limits { return f.cfg.Agents[agent].Limits }
	if l := limits("runaway-assistant"); l.MaxSteps != 4 || l.MaxRepeatedCalls != 10 {
		t.Errorf("runaway limits = %+v", l)
	}
	if l := limits("repeating-assistant"); l.MaxRepeatedCalls != 2 {
		t.Errorf("repeating limits = %+v", l)
	}
	if l := limits("confused-assistant"); l.MaxInvalidDecisions != 2 {
		t.Errorf("confused limits = %+v", l)
	}
	if l := limits("escalation-assistant"); l.MaxSteps != 8 {
		t.Errorf("escalation limits = %+v", l)
	}
}

// decision decodes one script entry the way the scripted model hands it
// over: an object is decision JSON, a string is raw text.
func decision(t *testing.T, raw json.RawMessage) (events.Decision, string) {
	t.Helper()
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			t.Fatal(err)
		}
		return events.Decision{}, text
	}
	var d events.Decision
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decision %s: %v", raw, err)
	}
	return d, ""
}

func TestScriptsTellTheirScenarios(t *testing.T) {
	t.Parallel()
	f := loadFixture(t)
	valid := func(tc events.ToolCall) bool {
		s, ok := f.schemas[tc.Tool]
		return ok && s.ValidateJSON(tc.Args).IsValid()
	}
	calls := func(agent string) (out []events.ToolCall, final *events.FinalAnswer) {
		for _, raw := range f.scripts[agent].Decisions {
			d, _ := decision(t, raw)
			out = append(out, d.ToolCalls...)
			if d.Final != nil && final == nil {
				final = d.Final
			}
		}
		return out, final
	}

	t.Run("happy", func(t *testing.T) {
		cs, final := calls("escalation-assistant")
		var seq []string
		for _, c := range cs {
			seq = append(seq, c.Tool)
			if !valid(c) {
				t.Errorf("happy call %s %s is invalid", c.Tool, c.Args)
			}
		}
		want := []string{ToolGetProcedure, ToolLookupComplaints, ToolDraftEscalation, ToolDraftEscalation, ToolDraftEscalation}
		if !slices.Equal(seq, want) {
			t.Errorf("happy calls %v, want %v", seq, want)
		}
		if final == nil || !slices.Equal(final.DraftsCreated, []string{"SR-10421", "SR-10422", "SR-10423"}) || !strings.Contains(final.Summary, "approval") {
			t.Errorf("happy final answer = %+v", final)
		}
		if n := len(f.scripts["escalation-assistant"].Decisions); n > f.cfg.Agents["escalation-assistant"].Limits.MaxSteps {
			t.Errorf("happy needs %d steps, more than its budget", n)
		}
	})
	t.Run("runaway", func(t *testing.T) {
		s := f.scripts["runaway-assistant"]
		if len(s.Decisions) != 1 || !s.RepeatLast {
			t.Errorf("runaway script = %d decisions, repeat_last %v", len(s.Decisions), s.RepeatLast)
		}
	})
	t.Run("correction", func(t *testing.T) {
		cs, final := calls("correcting-assistant")
		if len(cs) != 3 || valid(cs[0]) || !valid(cs[1]) || cs[2].Tool != "email_resident" {
			t.Errorf("correction calls = %+v", cs)
		}
		if _, ok := f.schemas["email_resident"]; ok {
			t.Error("email_resident must not be a tool")
		}
		if final == nil {
			t.Error("correction has no final answer")
		}
	})
	t.Run("slow", func(t *testing.T) {
		cs, final := calls("slow-lookup-assistant")
		if len(cs) != 2 || cs[0].Tool != ToolSlowLookup || cs[1].Tool != ToolLookupComplaints {
			t.Errorf("slow calls = %+v", cs)
		}
		if final == nil || !strings.Contains(strings.ToLower(final.Summary), "recovered after the slow tool timed out") {
			t.Errorf("slow final = %+v", final)
		}
	})
	t.Run("dry-run", func(t *testing.T) {
		cs, final := calls("dry-run-assistant")
		if len(cs) != 1 || cs[0].Tool != ToolDraftEscalation || !valid(cs[0]) {
			t.Errorf("dry-run calls = %+v", cs)
		}
		if final == nil || !strings.HasPrefix(final.Summary, "Draft previewed") {
			t.Errorf("dry-run final = %+v", final)
		}
	})
	t.Run("repeat", func(t *testing.T) {
		cs, _ := calls("repeating-assistant")
		if len(cs) != 3 || !bytes.Equal(cs[0].Args, cs[1].Args) || !bytes.Equal(cs[1].Args, cs[2].Args) {
			t.Errorf("repeat calls = %+v", cs)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		ds := f.scripts["confused-assistant"].Decisions
		if len(ds) != 4 {
			t.Fatalf("invalid script has %d decisions", len(ds))
		}
		if d, _ := decision(t, ds[0]); len(d.ToolCalls) == 0 || d.Final == nil {
			t.Errorf("first decision should have both tool calls and a final answer: %s", ds[0])
		}
		if _, text := decision(t, ds[1]); text != "I think I should look things up {" {
			t.Errorf("second decision should be raw text, got %s", ds[1])
		}
		if string(ds[2]) != "{}" {
			t.Errorf("third decision should be {}, got %s", ds[2])
		}
	})
}

func TestScenariosNameConfiguredAgents(t *testing.T) {
	t.Parallel()
	f := loadFixture(t)
	want := []string{"happy", "runaway", "correction", "slow", "dry-run", "repeat", "invalid"}
	var got []string
	for _, s := range Scenarios() {
		got = append(got, s.Name)
		if _, ok := f.cfg.Agents[s.Agent]; !ok {
			t.Errorf("scenario %s names unknown agent %s", s.Name, s.Agent)
		}
		if s.Input == "" || s.Description == "" {
			t.Errorf("scenario %s lacks input or description", s.Name)
		}
		if s.DryRun != (s.Name == "dry-run") {
			t.Errorf("scenario %s dry_run = %v", s.Name, s.DryRun)
		}
		if byName, ok := ScenarioByName(s.Name); !ok || byName != s {
			t.Errorf("ScenarioByName(%q) = %+v, %v", s.Name, byName, ok)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("scenarios = %v, want %v", got, want)
	}
	if _, ok := ScenarioByName("nope"); ok {
		t.Error("ScenarioByName found a scenario that does not exist")
	}
	s := Scenarios()
	s[0].Name = "changed"
	if Scenarios()[0].Name != "happy" {
		t.Error("Scenarios returned the package's own slice")
	}
}

func TestConfigLoadsWithLoopgatesLoader(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(Files, ConfigFile)
	if err != nil {
		t.Fatalf("config.Load(Files, %q): %v", ConfigFile, err)
	}
	if len(cfg.Tools) != 5 || len(cfg.Agents) != len(Scenarios()) {
		t.Errorf("loaded %d tools and %d agents", len(cfg.Tools), len(cfg.Agents))
	}
}
