package config_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
)

const validYAML = `version: 1
tools:
  - name: lookup
    description: Looks complaints up.
    permission: read
    args_schema: schemas/lookup.json
    timeout: 2s
    view: {fields: [id], max_items: 5}
  - name: draft
    description: Writes a draft.
    permission: write
    args_schema: {type: object, additionalProperties: false, properties: {text: {type: string}}}
agents:
  helper:
    description: Helps.
    model: {provider: scripted, script: scripts/happy.json}
    tools: [lookup, draft]
    roles: [operator]
    limits:
      max_steps: 5
      max_active: 30s
policy:
  roles:
    operator: {call: [lookup, draft]}
    supervisor: {approve: [draft]}
`

const lookupSchema = `{
  "type": "object",
  "additionalProperties": false,
  "properties": {"category": {"type": "string"}}
}`

// files returns a valid config's files, the config's text replaced by
// yaml when it is not empty.
func files(yaml string) fstest.MapFS {
	return fstest.MapFS{
		"loopgate.yaml":       {Data: []byte(yaml)},
		"schemas/lookup.json": {Data: []byte(lookupSchema)},
		"scripts/happy.json":  {Data: []byte(`{"decisions": []}`)},
		"scripts/dir/x":       {Data: []byte(`x`)},
	}
}

// edit returns validYAML with old replaced by new; old must occur.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(validYAML, old) {
		t.Fatalf("edit: %q is not in validYAML", old)
	}
	return strings.Replace(validYAML, old, new, 1)
}

func TestLoadValidConfig(t *testing.T) {
	t.Parallel()
	c, err := config.Load(files(validYAML), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tools) != 2 || c.Tools[0].Name != "lookup" || c.Tools[1].Name != "draft" {
		t.Fatalf("tools = %+v", c.Tools)
	}
	if got := c.Tools[0].Timeout.D(); got != 2*time.Second {
		t.Errorf("lookup timeout = %v, want 2s", got)
	}
	if got := c.Tools[0].View; got.MaxItems != 5 || len(got.Fields) != 1 {
		t.Errorf("lookup view = %+v", got)
	}
	// A path is replaced by the file's JSON; an inline schema stays as written.
	assertJSONEqual(t, "lookup args_schema", c.Tools[0].ArgsSchema, lookupSchema)
	assertJSONEqual(t, "draft args_schema", c.Tools[1].ArgsSchema,
		`{"type": "object", "additionalProperties": false, "properties": {"text": {"type": "string"}}}`)

	p := c.Agents["helper"]
	if p.Model.Provider != "scripted" || p.Model.Script != "scripts/happy.json" {
		t.Errorf("model = %+v", p.Model)
	}
	script, err := c.ReadFile(p.Model.Script)
	if err != nil || string(script) != `{"decisions": []}` {
		t.Errorf("ReadFile(script) = %q, %v", script, err)
	}
	if c.Dir != "" {
		t.Errorf("Dir = %q, want empty from an fs.FS", c.Dir)
	}
}

func TestLoadAppliesDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load(files(validYAML), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantServer := config.Server{
		Listen: "127.0.0.1:4222", Data: "./loopgate-data", Workers: 4, SyncInterval: "always", Replicas: 1, GroupCommit: "auto",
	}
	if c.Server != wantServer {
		t.Errorf("server = %+v, want %+v", c.Server, wantServer)
	}
	if want := (config.Intake{MaxTaskBytes: 65536, MaxInputBytes: 16384}); c.Intake != want {
		t.Errorf("intake = %+v, want %+v", c.Intake, want)
	}
	want := config.DefaultLimits
	want.MaxSteps = 5
	want.MaxActive = events.Duration(30 * time.Second)
	if got := c.Agents["helper"].Limits; got != want {
		t.Errorf("limits = %+v, want %+v", got, want)
	}
}

func TestLoadKeepsSetValues(t *testing.T) {
	t.Parallel()
	given := validYAML + `server: {listen: "0.0.0.0:4333", data: /var/lib/lg, workers: 16, sync_interval: 2m, replicas: 3, group_commit: "off"}
intake: {max_task_bytes: 1000, max_input_bytes: 500}
`
	c, err := config.Load(files(given), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantServer := config.Server{Listen: "0.0.0.0:4333", Data: "/var/lib/lg", Workers: 16, SyncInterval: "2m", Replicas: 3, GroupCommit: "off"}
	if c.Server != wantServer {
		t.Errorf("server = %+v, want %+v", c.Server, wantServer)
	}
	if want := (config.Intake{MaxTaskBytes: 1000, MaxInputBytes: 500}); c.Intake != want {
		t.Errorf("intake = %+v, want %+v", c.Intake, want)
	}
}

func TestLoadResolvesPathsAgainstTheConfigsDirectory(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{}
	for name, f := range files(validYAML) {
		fsys["deploy/"+name] = f
	}
	c, err := config.Load(fsys, "deploy/loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, "lookup args_schema", c.Tools[0].ArgsSchema, lookupSchema)
	if _, err := c.ReadFile("./scripts/happy.json"); err != nil {
		t.Errorf("ReadFile: %v", err)
	}
}

func TestLoadAcceptsJSON(t *testing.T) {
	t.Parallel()
	given := `{"version": 1, "agents": {"a": {"model": {"provider": "scripted", "script": "scripts/happy.json"},
	  "roles": ["r"]}}, "policy": {"roles": {"r": {}}}}`
	c, err := config.Load(files(given), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Agents["a"].Limits != config.DefaultLimits {
		t.Errorf("limits = %+v, want the defaults", c.Agents["a"].Limits)
	}
}

func TestLoadRejectsBadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		given   string
		files   fstest.MapFS // extra files
		wantErr string
	}{
		{
			name:    "unknown top-level key",
			given:   validYAML + "colour: red\n",
			wantErr: "config loopgate.yaml: /colour: is not allowed",
		},
		{
			name:    "unknown key in a profile",
			given:   edit(t, "    description: Helps.\n", "    temprature: 0.2\n"),
			wantErr: "/agents/helper/temprature: is not allowed",
		},
		{
			name:    "unknown limit",
			given:   edit(t, "      max_steps: 5\n", "      max_stpes: 5\n"),
			wantErr: "/agents/helper/limits/max_stpes: is not allowed",
		},
		{
			name:    "limit below its minimum",
			given:   edit(t, "max_steps: 5", "max_steps: 0"),
			wantErr: "config loopgate.yaml: /agents/helper/limits/max_steps: must be >= 1",
		},
		{
			// The started event carries the session and the task in one
			// message (1 MiB by nats-server's default): a budget near
			// it would make a long session's runs' started events too
			// large for the stream.
			name:    "session budget over its maximum",
			given:   edit(t, "    description: Helps.\n", "    description: Helps.\n    session_budget_bytes: 10000000\n"),
			wantErr: "/agents/helper/session_budget_bytes: must be <= 262144",
		},
		{
			name:    "limit of the wrong type",
			given:   edit(t, "max_steps: 5", "max_steps: five"),
			wantErr: "/agents/helper/limits/max_steps: must be integer, not string",
		},
		{
			name:    "bad duration",
			given:   edit(t, "timeout: 2s", "timeout: 2 seconds"),
			wantErr: "/tools/0/timeout: must match the pattern",
		},
		{
			name:    "negative duration",
			given:   edit(t, "max_active: 30s", "max_active: -30s"),
			wantErr: "/agents/helper/limits/max_active: must match the pattern",
		},
		{
			name:    "duration as a number",
			given:   edit(t, "timeout: 2s", "timeout: 2"),
			wantErr: "/tools/0/timeout: must be string, not integer",
		},
		{
			name:    "bad sync interval",
			given:   validYAML + "server: {sync_interval: sometimes}\n",
			wantErr: "/server/sync_interval: must match the pattern",
		},
		{
			name:    "bad group commit",
			given:   validYAML + "server: {group_commit: sometimes}\n",
			wantErr: "/server/group_commit: ",
		},
		{
			name:    "missing version",
			given:   edit(t, "version: 1\n", ""),
			wantErr: "/version: is required",
		},
		{
			name:    "wrong version",
			given:   edit(t, "version: 1", "version: 2"),
			wantErr: "/version: must be 1",
		},
		{
			name:    "bad tool name",
			given:   edit(t, "name: lookup", "name: Lookup"),
			wantErr: "/tools/0/name: must match the pattern ^[a-z][a-z0-9_]{0,63}$",
		},
		{
			name:    "bad permission",
			given:   edit(t, "permission: read", "permission: admin"),
			wantErr: "/tools/0/permission: must be one of: read, write",
		},
		{
			name:    "missing description",
			given:   edit(t, "    description: Looks complaints up.\n", ""),
			wantErr: "/tools/0/description: is required",
		},
		{
			name:    "args_schema neither path nor object",
			given:   edit(t, "args_schema: schemas/lookup.json", "args_schema: 5"),
			wantErr: "/tools/0/args_schema: must be object or string",
		},
		{
			name:    "args_schema path missing",
			given:   edit(t, "schemas/lookup.json", "schemas/missing.json"),
			wantErr: `/tools/0/args_schema: tool "lookup": args schema schemas/missing.json: file does not exist`,
		},
		{
			name:    "args_schema file not JSON",
			given:   edit(t, "schemas/lookup.json", "schemas/bad.json"),
			files:   fstest.MapFS{"schemas/bad.json": {Data: []byte("type: object")}},
			wantErr: `/tools/0/args_schema: tool "lookup": args schema schemas/bad.json: is not valid JSON`,
		},
		{
			name:    "args_schema file not an object",
			given:   edit(t, "schemas/lookup.json", "schemas/list.json"),
			files:   fstest.MapFS{"schemas/list.json": {Data: []byte("[]")}},
			wantErr: `/tools/0/args_schema: tool "lookup": args schema schemas/list.json: is not a JSON object`,
		},
		{
			name:    "args_schema path outside the config's directory",
			given:   edit(t, "schemas/lookup.json", "../lookup.json"),
			wantErr: `/tools/0/args_schema: tool "lookup": args schema ../lookup.json: invalid argument: must be a relative path inside the config's directory`,
		},
		{
			name:    "duplicate tool names",
			given:   edit(t, "name: draft", "name: lookup"),
			wantErr: `/tools/1/name: duplicate tool "lookup", also /tools/0`,
		},
		{
			name:    "profile names an unknown tool",
			given:   edit(t, "tools: [lookup, draft]", "tools: [lookup, draft, send_email]"),
			wantErr: `/agents/helper/tools/2: unknown tool "send_email": no manifest of that name in /tools`,
		},
		{
			name:    "role not in policy",
			given:   edit(t, "roles: [operator]", "roles: [operator, admin]"),
			wantErr: `/agents/helper/roles/1: role "admin" is not defined in /policy/roles`,
		},
		{
			name:    "no roles",
			given:   edit(t, "roles: [operator]", "roles: []"),
			wantErr: "/agents/helper/roles: must have at least 1 items",
		},
		{
			name:    "policy names an unknown tool",
			given:   edit(t, "approve: [draft]", "approve: [draft, publish]"),
			wantErr: `/policy/roles/supervisor/approve/1: unknown tool "publish"`,
		},
		{
			name:    "policy lets a role cancel an unknown agent",
			given:   edit(t, "approve: [draft]", `approve: [draft], cancel: [helper, "*", helpr]`),
			wantErr: `/policy/roles/supervisor/cancel/2: unknown agent profile "helpr" (or "*" for every agent)`,
		},
		{
			name:    "policy cancel is not a name",
			given:   edit(t, "approve: [draft]", `approve: [draft], cancel: ["all agents"]`),
			wantErr: `/policy/roles/supervisor/cancel/0`,
		},
		{
			name:    "missing script",
			given:   edit(t, "scripts/happy.json", "scripts/sad.json"),
			wantErr: "/agents/helper/model/script: scripts/sad.json: file does not exist",
		},
		{
			name:    "script is a directory",
			given:   edit(t, "scripts/happy.json", "scripts/dir"),
			wantErr: "/agents/helper/model/script: scripts/dir: is a directory",
		},
		{
			name:    "scripted model without a script",
			given:   edit(t, ", script: scripts/happy.json", ""),
			wantErr: "/agents/helper/model/script: is required",
		},
		{
			name:    "a cost budget its model has no price for",
			given:   edit(t, "max_active: 30s", "max_active: 30s\n      max_cost_usd: 0.5") + "pricing: {gpt-4.1: {input_per_mtok: 2, output_per_mtok: 8}}\n",
			wantErr: `/agents/helper/limits/max_cost_usd: cannot be counted: model "scripted" has no entry in /pricing`,
		},
		{
			name:    "unknown provider",
			given:   edit(t, "provider: scripted", "provider: oracle"),
			wantErr: "/agents/helper/model/provider: must be one of: scripted, openai, anthropic",
		},
		{
			name:    "bad agent name",
			given:   edit(t, "  helper:\n", "  \"my helper\":\n"),
			wantErr: "/agents/my helper: property name must match the pattern",
		},
		{
			name:    "input bound above the task bound",
			given:   validYAML + "intake: {max_task_bytes: 100, max_input_bytes: 200}\n",
			wantErr: "/intake/max_input_bytes: must be <= max_task_bytes (100)",
		},
		{
			name:    "several problems at once, sorted by field",
			given:   edit(t, "max_steps: 5", "max_steps: 0\n      bogus: 1"),
			wantErr: "config loopgate.yaml: /agents/helper/limits/bogus: is not allowed; /agents/helper/limits/max_steps: must be >= 1",
		},
		{
			name:    "not YAML",
			given:   "version: [1\n",
			wantErr: "config loopgate.yaml: is not valid YAML",
		},
		{
			name:    "duplicate key",
			given:   validYAML + "agents: {}\n",
			wantErr: `config loopgate.yaml: is not valid YAML: line 26: key "agents" is already set at line 13`,
		},
		{
			name:    "empty file",
			given:   " ",
			wantErr: "config loopgate.yaml: must be object, not null",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fsys := files(tt.given)
			for name, f := range tt.files {
				fsys[name] = f
			}
			_, err := config.Load(fsys, "loopgate.yaml")
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Load() error = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Load() error = %q\nwant it to contain %q", err, tt.wantErr)
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.File != "loopgate.yaml" || len(ce.Errors) == 0 {
				t.Errorf("Load() error = %#v, want a *config.Error naming the file", err)
			}
		})
	}
}

func TestLoadMissingFileIsNotInvalid(t *testing.T) {
	t.Parallel()
	_, err := config.Load(fstest.MapFS{}, "loopgate.yaml")
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, config.ErrInvalid) {
		t.Errorf("Load() error = %v, want fs.ErrNotExist and not ErrInvalid", err)
	}
}

func TestLoadFileSetsAbsoluteDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, f := range files(validYAML) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := config.LoadFile(filepath.Join(dir, "loopgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Dir != dir || !filepath.IsAbs(c.Dir) {
		t.Errorf("Dir = %q, want %q", c.Dir, dir)
	}
	assertJSONEqual(t, "lookup args_schema", c.Tools[0].ArgsSchema, lookupSchema)

	_, err = config.LoadFile(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadFile(missing) error = %v, want fs.ErrNotExist", err)
	}
}

func TestReadFileStaysInsideTheConfigsDirectory(t *testing.T) {
	t.Parallel()
	c, err := config.Load(files(validYAML), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		given   string
		wantErr error
	}{
		{given: "scripts/happy.json"},
		{given: "./scripts/../scripts/happy.json"},
		{given: "../etc/passwd", wantErr: fs.ErrInvalid},
		{given: "/etc/passwd", wantErr: fs.ErrInvalid},
		{given: "", wantErr: fs.ErrInvalid},
		{given: "scripts/none.json", wantErr: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.given, func(t *testing.T) {
			t.Parallel()
			_, err := c.ReadFile(tt.given)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("ReadFile(%q) error = %v, want %v", tt.given, err, tt.wantErr)
			}
		})
	}
	var zero config.Config
	if _, err := zero.ReadFile("x"); err == nil {
		t.Error("ReadFile on a config without FS succeeded")
	}
}

func TestCityOpsExampleLoads(t *testing.T) {
	t.Parallel()
	const path = "../examples/cityops/loopgate.yaml"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no example config: %v", err)
	}
	c, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tools) == 0 || len(c.Agents) == 0 {
		t.Errorf("example has %d tools and %d agents", len(c.Tools), len(c.Agents))
	}
	for _, m := range c.Tools {
		if len(m.ArgsSchema) == 0 || m.ArgsSchema[0] != '{' {
			t.Errorf("tool %s: args_schema not resolved: %s", m.Name, m.ArgsSchema)
		}
	}
	for name, p := range c.Agents {
		if _, err := c.ReadFile(p.Model.Script); err != nil {
			t.Errorf("agent %s: %v", name, err)
		}
	}
}

func assertJSONEqual(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v: %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("%s = %s, want %s", what, gb, wb)
	}
}

// server.data set in a file is relative to the file, as its other paths
// are: the same config started from another directory (a service manager
// starts in /) opens the same store. The default stays relative to the
// working directory, where it always was.
func TestAFilesDataDirectoryIsRelativeToTheFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ data, want string }{
		{"server:\n  data: ./store\n", "cfgdir/store"},
		{"", "./loopgate-data"},
		{"server:\n  data: /var/lib/loopgate\n", "/var/lib/loopgate"},
	} {
		dir := t.TempDir()
		cfgDir := filepath.Join(dir, "cfgdir")
		for name, f := range files(strings.Replace(validYAML, "version: 1\n", "version: 1\n"+tc.data, 1)) {
			p := filepath.Join(cfgDir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c, err := config.LoadFile(filepath.Join(cfgDir, "loopgate.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if strings.HasPrefix(want, "cfgdir/") {
			want = filepath.Join(dir, want)
		}
		if c.Server.Data != want {
			t.Errorf("server.data %q: got %q, want %q", strings.TrimSpace(tc.data), c.Server.Data, want)
		}
	}
}

// A cost budget loads when its model has a pricing entry.
func TestLoadAcceptsACostBudgetItsModelIsPricedFor(t *testing.T) {
	t.Parallel()
	yaml := edit(t, "max_active: 30s", "max_active: 30s\n      max_cost_usd: 0.5") + "pricing: {scripted: {input_per_mtok: 2, output_per_mtok: 8}}\n"
	cfg, err := config.Load(files(yaml), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Agents["helper"].Limits.MaxCostUSD; got != 0.5 || !cfg.CostCounted(cfg.Agents["helper"]) {
		t.Errorf("max_cost_usd = %v, counted %v", got, cfg.CostCounted(cfg.Agents["helper"]))
	}
}
