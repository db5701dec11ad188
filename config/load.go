package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kaptinlin/jsonschema"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/schemas"
	"github.com/loopgate/loopgate/tools"
)

// LoadFile reads the config at the OS path name (see Load). Relative paths
// in it are resolved against its directory, which becomes Config.Dir as an
// absolute path; they cannot leave that directory.
func LoadFile(name string) (*Config, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	dir := filepath.Dir(abs)
	c, err := load(os.DirFS(dir), filepath.Base(abs), name)
	if err != nil {
		return nil, err
	}
	c.Dir = dir
	if !c.dataDefaulted && !filepath.IsAbs(c.Server.Data) {
		// Paths in the file are relative to it: started from another
		// directory (a service manager starts in /), the same config
		// must open the same store, not a new, empty one.
		c.Server.Data = filepath.Join(dir, c.Server.Data)
	}
	return c, nil
}

// Load reads the config at name in fsys: YAML 1.2 (or JSON), in which only
// true and false are booleans (on, off, yes, no, y and n are strings),
// checked against schemas/config.schema.json, each tool's args_schema (and result_schema)
// path replaced by the JSON it names, decoded strictly, defaults applied, then cross-checked
// (profiles' tools, roles and scripts exist; policy names known tools; tool
// names are unique). Paths in the file are relative to name's directory
// within fsys, which becomes Config.FS.
//
// A file that cannot be read gives the read error, wrapped; a file that is
// read but not accepted gives an *Error matching ErrInvalid that names every
// bad field it found.
func Load(fsys fs.FS, name string) (*Config, error) {
	return load(fsys, name, name)
}

func load(fsys fs.FS, name, display string) (*Config, error) {
	invalid := func(errs ...events.FieldError) error { return &Error{File: display, Errors: errs} }

	name, err := cleanPath(name)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", display, err)
	}
	raw, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", display, err)
	}
	dir, err := fs.Sub(fsys, path.Dir(name))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", display, err)
	}

	doc, err := yamlToJSON(raw) // a duplicate key is an error, not a silent overwrite
	if err != nil {
		return nil, invalid(events.FieldError{Message: "is not valid YAML: " + strings.Join(strings.Fields(err.Error()), " ")})
	}
	schema, err := configSchema()
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", display, err)
	}
	if res := schema.ValidateJSON(doc); !res.IsValid() {
		return nil, invalid(schemas.Errors(res)...)
	}
	doc, errs := resolveArgsSchemas(dir, doc)
	if len(errs) > 0 {
		return nil, invalid(errs...)
	}

	var c Config
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// A value the schema allows that the field cannot hold (a number
		// past int64, a duration past time.Duration), or a backstop for
		// what the schema should have caught.
		return nil, invalid(schemas.DecodeErrorIn(doc, err))
	}
	if errs := zeroLimits(doc, &c); len(errs) > 0 {
		return nil, invalid(errs...)
	}
	c.FS = dir
	c.setDefaults()
	if errs := c.validate(); len(errs) > 0 {
		return nil, invalid(errs...)
	}
	return &c, nil
}

// zeroLimits refuses a profile limit written as a value that reads as
// zero (see ZeroLimits): "0s" used to become the 2-minute default.
func zeroLimits(doc []byte, c *Config) []events.FieldError {
	var given struct {
		Agents map[string]struct {
			Limits map[string]json.RawMessage `json:"limits"`
		} `json:"agents"`
	}
	if json.Unmarshal(doc, &given) != nil {
		return nil
	}
	var errs []events.FieldError
	for _, name := range sortedKeys(given.Agents) {
		errs = append(errs, ZeroLimits(given.Agents[name].Limits, c.Agents[name].Limits, "/agents/"+escape(name)+"/limits", "the default")...)
	}
	return errs
}

var configSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return schemas.Compile("config.schema.json")
})

// resolveArgsSchemas replaces each tool's args_schema and result_schema
// that is a path with the JSON object in that file. doc has passed the
// config schema.
func resolveArgsSchemas(dir fs.FS, doc []byte) ([]byte, []events.FieldError) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, []events.FieldError{{Message: err.Error()}}
	}
	if top["tools"] == nil {
		return doc, nil
	}
	var manifests []map[string]json.RawMessage
	if err := json.Unmarshal(top["tools"], &manifests); err != nil {
		return nil, []events.FieldError{{Field: "/tools", Message: err.Error()}}
	}
	var errs []events.FieldError
	for i, m := range manifests {
		for _, key := range []string{"args_schema", "result_schema"} {
			var rel string
			if json.Unmarshal(m[key], &rel) != nil {
				continue // inline, or absent
			}
			var tool string
			_ = json.Unmarshal(m["name"], &tool)
			b, err := readFile(dir, rel)
			if err == nil {
				if b, err = jsonObject(b); err != nil {
					err = fmt.Errorf("%s: %w", rel, err)
				}
			}
			if err != nil {
				errs = append(errs, events.FieldError{
					Field:   fmt.Sprintf("/tools/%d/%s", i, key),
					Message: fmt.Sprintf("tool %q: %s %s", tool, strings.ReplaceAll(key, "_", " "), err),
				})
				continue
			}
			m[key] = b
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	var err error
	if top["tools"], err = json.Marshal(manifests); err != nil {
		return nil, []events.FieldError{{Field: "/tools", Message: err.Error()}}
	}
	if doc, err = json.Marshal(top); err != nil {
		return nil, []events.FieldError{{Message: err.Error()}}
	}
	return doc, nil
}

// jsonObject returns b compacted if it is one JSON object.
func jsonObject(b []byte) ([]byte, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("is not a JSON object")
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	return out.Bytes(), nil
}

// ReadFile reads the file at rel, a path relative to the config file's
// directory, from c.FS. A path that leaves that directory is an error.
func (c *Config) ReadFile(rel string) ([]byte, error) {
	if c.FS == nil {
		return nil, fmt.Errorf("read %s: config has no file system (not loaded by Load or LoadFile)", rel)
	}
	return readFile(c.FS, rel)
}

// readFile reads rel from dir, with errors that name rel the way the
// config wrote it ("scripts/a.json: file does not exist").
func readFile(dir fs.FS, rel string) ([]byte, error) {
	p, err := cleanPath(rel)
	if err != nil {
		return nil, err
	}
	b, err := fs.ReadFile(dir, p)
	if err != nil {
		return nil, fileError(rel, err)
	}
	return b, nil
}

// statFile checks that rel names a regular file in dir.
func statFile(dir fs.FS, rel string) error {
	p, err := cleanPath(rel)
	if err != nil {
		return err
	}
	fi, err := fs.Stat(dir, p)
	if err != nil {
		return fileError(rel, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%s: is a directory", rel)
	}
	return nil
}

func fileError(rel string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // drop the op and the (possibly absolute) path
	}
	return fmt.Errorf("%s: %w", rel, err)
}

// cleanPath turns a path as written in the config ("./scripts/a.json",
// "scripts\a.json") into an fs.FS path, refusing absolute paths and paths
// that climb out of the config's directory.
func cleanPath(rel string) (string, error) {
	p := path.Clean(filepath.ToSlash(rel))
	if !fs.ValidPath(p) || rel == "" {
		return "", fmt.Errorf("%s: %w: must be a relative path inside the config's directory", rel, fs.ErrInvalid)
	}
	return p, nil
}

// setDefaults fills every zero field that has a default; it is the one
// place defaults are set.
func (c *Config) setDefaults() {
	c.Server.Listen = cmp.Or(c.Server.Listen, "127.0.0.1:4222")
	if c.Server.Data == "" {
		c.Server.Data, c.dataDefaulted = "./loopgate-data", true
	}
	c.Server.Workers = cmp.Or(c.Server.Workers, 4)
	c.Server.SyncInterval = cmp.Or(c.Server.SyncInterval, "always")
	c.Server.Replicas = cmp.Or(c.Server.Replicas, 1)
	c.Server.GroupCommit = cmp.Or(c.Server.GroupCommit, "auto")
	c.Intake.MaxTaskBytes = cmp.Or(c.Intake.MaxTaskBytes, 65536)
	c.Intake.MaxInputBytes = cmp.Or(c.Intake.MaxInputBytes, 16384)
	c.Policy.ApprovalMaxAge = cmp.Or(c.Policy.ApprovalMaxAge, DefaultApprovalMaxAge)
	for name, p := range c.Agents {
		p.Limits = withDefaults(p.Limits)
		p.ApprovalTTL = cmp.Or(p.ApprovalTTL, DefaultApprovalTTL)
		p.SessionBudgetBytes = cmp.Or(p.SessionBudgetBytes, 8192)
		c.Agents[name] = p
	}
}

// DefaultApprovalTTL is how long an approval stays pending when neither the
// tool nor the profile says.
const DefaultApprovalTTL = events.Duration(24 * time.Hour)

// DefaultApprovalMaxAge is policy.approval_max_age when the file does not
// say.
const DefaultApprovalMaxAge = events.Duration(5 * time.Minute)

// validate cross-checks what the schema cannot: names that refer to other
// parts of the file, and files the config refers to. It runs after
// setDefaults and returns every problem, sorted by field.
func (c *Config) validate() []events.FieldError {
	var errs []events.FieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, events.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}

	if c.Version != 1 {
		bad("/version", "must be 1")
	}
	if c.Intake.MaxInputBytes > c.Intake.MaxTaskBytes {
		bad("/intake/max_input_bytes", "must be <= max_task_bytes (%d)", c.Intake.MaxTaskBytes)
	}
	// What the server would refuse at startup, in the file's names.
	if s := c.Server.SyncInterval; s != "always" {
		if d, err := time.ParseDuration(s); err != nil || d <= 0 {
			bad("/server/sync_interval", "must be always or a positive duration such as 2m, not %q", s)
		}
	}
	if d := c.Server.AckWait.D(); d != 0 && d < 100*time.Millisecond {
		bad("/server/ack_wait", "must be at least 100ms, not %s", d)
	}

	toolAt := make(map[string]int, len(c.Tools))
	for i, m := range c.Tools {
		if j, dup := toolAt[m.Name]; dup {
			bad(fmt.Sprintf("/tools/%d/name", i), "duplicate tool %q, also /tools/%d", m.Name, j)
			continue
		}
		toolAt[m.Name] = i
	}
	knownTool := func(field, tool string) {
		if _, ok := toolAt[tool]; !ok {
			bad(field, "unknown tool %q: no manifest of that name in /tools", tool)
		}
	}

	for _, name := range sortedKeys(c.Agents) {
		p := c.Agents[name]
		at := "/agents/" + escape(name)
		for i, t := range p.Tools {
			knownTool(fmt.Sprintf("%s/tools/%d", at, i), t)
		}
		if len(p.Roles) == 0 {
			bad(at+"/roles", "is required")
		}
		for i, r := range p.Roles {
			if _, ok := c.Policy.Roles[r]; !ok {
				bad(fmt.Sprintf("%s/roles/%d", at, i), "role %q is not defined in /policy/roles", r)
			}
		}
		if p.Limits.MaxCostUSD > 0 && !c.CostCounted(p) {
			bad(at+"/limits/max_cost_usd", "cannot be counted: model %q has no entry in /pricing, so this budget would never stop a run; add /pricing/%s", p.Model.PricedAs(), escape(p.Model.PricedAs()))
		}
		switch p.Model.Provider {
		case "scripted":
			if p.Model.Script == "" {
				bad(at+"/model/script", "is required")
			} else if err := statFile(c.FS, p.Model.Script); err != nil {
				bad(at+"/model/script", "%v", err)
			}
			for _, f := range p.Model.httpSettings() {
				bad(at+"/model/"+f, "is a setting of the openai and anthropic providers, not of scripted")
			}
		case "openai", "anthropic":
			validateHTTPModel(at+"/model", p.Model, bad)
		default:
			bad(at+"/model/provider", "unknown provider %q", p.Model.Provider)
		}
	}

	for _, name := range sortedKeys(c.Policy.Roles) {
		r := c.Policy.Roles[name]
		at := "/policy/roles/" + escape(name)
		for i, t := range r.Call {
			knownTool(fmt.Sprintf("%s/call/%d", at, i), t)
		}
		for i, t := range r.Approve {
			knownTool(fmt.Sprintf("%s/approve/%d", at, i), t)
		}
		for i, a := range r.Cancel {
			if _, ok := c.Agents[a]; !ok && a != "*" {
				bad(fmt.Sprintf("%s/cancel/%d", at, i), "unknown agent profile %q (or \"*\" for every agent)", a)
			}
		}
		// A constraint on a tool or an argument that does not exist
		// constrains nothing: a typo would let the role pass any value.
		for _, tool := range sortedKeys(r.Args) {
			field := at + "/args/" + escape(tool)
			j, ok := toolAt[tool]
			if !ok {
				knownTool(field, tool)
				continue
			}
			names, open := tools.ArgNames(c.Tools[j].ArgsSchema)
			for _, arg := range sortedKeys(r.Args[tool]) {
				if !open && !slices.Contains(names, arg) {
					bad(field+"/"+escape(arg), "tool %q has no argument %q (its arguments: %s)", tool, arg, strings.Join(names, ", "))
				}
			}
		}
	}

	for i, m := range c.Tools {
		if ns, reserved := tools.ReservedSubject(m.Executor.NATS); m.Executor.NATS != "" && reserved {
			bad(fmt.Sprintf("/tools/%d/executor/nats", i), "subject %q is in %s, which loopgate or JetStream uses: pick a subject of the tool's own", m.Executor.NATS, ns)
		}
		names, open := tools.ArgNames(m.ArgsSchema)
		for k, res := range m.Resources {
			at := fmt.Sprintf("/tools/%d/resources/%d", i, k)
			// An argument the schema does not have never comes, so the
			// resource check would never run for the tool.
			if !open && !slices.Contains(names, res.Arg) {
				bad(at+"/arg", "tool %q has no argument %q (its arguments: %s)", m.Name, res.Arg, strings.Join(names, ", "))
			}
			// A resolver runs during the policy check, before any
			// approval: it must not be able to change anything.
			if j, ok := toolAt[res.Resolver]; ok && c.Tools[j].Permission != "read" {
				bad(at+"/resolver", "resolver tool %q must be a read tool: it runs before any approval", res.Resolver)
			}
		}
	}

	for i, m := range c.Tools {
		if m.Reconcile == "" {
			continue
		}
		at := fmt.Sprintf("/tools/%d/reconcile", i)
		j, ok := toolAt[m.Reconcile]
		switch {
		case !ok:
			knownTool(at, m.Reconcile)
		case c.Tools[j].Permission != "read":
			bad(at, "reconcile tool %q must be a read tool", m.Reconcile)
		}
	}
	keyOf := map[string]string{} // public key → approver id
	for _, id := range sortedKeys(c.Policy.Approvers) {
		a := c.Policy.Approvers[id]
		for i, r := range a.Roles {
			if _, ok := c.Policy.Roles[r]; !ok {
				bad(fmt.Sprintf("/policy/approvers/%s/roles/%d", escape(id), i), "role %q is not defined in /policy/roles", r)
			}
		}
		at := fmt.Sprintf("/policy/approvers/%s/public_key", escape(id))
		switch {
		case a.PublicKey == "" && c.Policy.RequireSignatures:
			bad(at, "is required: /policy/require_signatures is set, and %s could sign nothing", id)
		case a.PublicKey == "":
		case strings.HasPrefix(a.PublicKey, "S"):
			bad(at, "is a seed, a private key: put only the public key (U…) here, and keep the seed secret")
		case !nkeys.IsValidPublicUserKey(a.PublicKey):
			bad(at, "is not an nkey user public key (U… from loopgate keys new)")
		case keyOf[a.PublicKey] != "":
			bad(at, "is also the key of approver %s: each approver signs with their own key", keyOf[a.PublicKey])
		default:
			keyOf[a.PublicKey] = id
		}
	}

	slices.SortStableFunc(errs, func(a, b events.FieldError) int { return cmp.Compare(a.Field, b.Field) })
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// httpSettings lists the HTTP providers' settings m has, by JSON name.
func (m Model) httpSettings() []string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"base_url", m.BaseURL != ""},
		{"model", m.Name != ""},
		{"api_key_env", m.APIKeyEnv != ""},
		{"request_timeout", m.RequestTimeout != 0},
		{"max_retries", m.MaxRetries != nil},
		{"max_tokens", m.MaxTokens != 0},
		{"strict", m.Strict != nil},
	} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return set
}

// validateHTTPModel checks the settings of an openai or anthropic model at
// the JSON pointer at.
func validateHTTPModel(at string, m Model, bad func(field, format string, args ...any)) {
	if m.Script != "" {
		bad(at+"/script", "is a setting of the scripted provider, not of %s", m.Provider)
	}
	if m.Name == "" {
		bad(at+"/model", "is required: the model to ask, as the server names it")
	}
	if m.BaseURL != "" {
		u, err := url.Parse(m.BaseURL)
		switch {
		case err != nil:
			bad(at+"/base_url", "is not a URL: %v", err)
		case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
			bad(at+"/base_url", "must be an absolute http or https URL")
		case u.User != nil:
			bad(at+"/base_url", "must not carry credentials: name the key's variable in api_key_env")
		case u.RawQuery != "" || u.Fragment != "":
			bad(at+"/base_url", "must not have a query or fragment")
		}
	}
	if m.RequestTimeout < 0 {
		bad(at+"/request_timeout", "must be positive")
	}
	if m.Strict != nil && m.Provider != "openai" {
		bad(at+"/strict", "is a setting of the openai provider")
	}
}

// escape escapes one JSON pointer reference token (RFC 6901).
func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
