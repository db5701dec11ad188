package tools

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kaptinlin/jsonschema"

	"github.com/loopgate/loopgate/events"
)

// Manifest defaults, applied by NewRegistry.
const (
	DefaultVersion = "1"
	DefaultTimeout = 10 * time.Second
)

// ErrInvalidManifest marks every registration error; errors.As a
// *ManifestError for the tool and field.
var ErrInvalidManifest = errors.New("invalid tool manifest")

// ManifestError says which manifest NewRegistry refused, which field and
// why.
type ManifestError struct {
	// Tool is the manifest's name as written; empty when that is what is
	// wrong.
	Tool string
	// Index is the manifest's position in the list given to NewRegistry.
	Index int
	// Field is the manifest's JSON field at fault: "name", "builtin",
	// "args_schema"…
	Field string
	// Reason says what is wrong, starting with the field.
	Reason string
	// Err is the underlying error, if any (a schema compile error).
	Err error
}

func (e *ManifestError) Error() string {
	who := fmt.Sprintf("tool %q", e.Tool)
	if e.Tool == "" {
		who = fmt.Sprintf("tool #%d", e.Index)
	}
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", who, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s: %s", who, e.Reason)
}

// Is makes every ManifestError match ErrInvalidManifest.
func (e *ManifestError) Is(target error) bool { return target == ErrInvalidManifest }

func (e *ManifestError) Unwrap() error { return e.Err }

// validName is what a model can be asked to call: short, lowercase, and
// the same in every provider's function-calling dialect.
var validName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// Registry is the closed set of tools a worker knows, built once at startup
// by NewRegistry. It is immutable and safe for concurrent use.
type Registry struct {
	tools    map[string]*Tool
	names    []string
	builtins Builtins
}

// Tool is one registered tool: its manifest with defaults applied, its
// compiled argument schema and its implementation. It is immutable and
// safe for concurrent use.
type Tool struct {
	manifest Manifest
	fn       Func
	schema   *jsonschema.Schema
	// validating serializes schema.ValidateJSON: kaptinlin v0.9.8
	// compiles a "pattern" regexp lazily, on first use, without locking
	// (a data race under -race; v0.9.10 compiles them up front). Validation
	// takes microseconds, so one call at a time per tool costs nothing
	// that matters.
	validating sync.Mutex
	// params is the effective schema, canonical: the one calls are
	// validated against and the one the model is shown.
	params json.RawMessage
	// fields are the top-level properties, listed to a model that sent an
	// unknown one; nil when patternProperties makes such a list misleading.
	fields []string
}

// Spec is what the model is shown of a tool.
type Spec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Permission  Permission      `json:"permission"`
	Version     string          `json:"version"`
	Parameters  json.RawMessage `json:"parameters"`
}

// NewRegistry checks every manifest, applies its defaults (Version "1",
// Timeout 10s, Builtin = Name), binds it to its implementation in builtins
// and compiles its argument schema. It fails on the first bad manifest
// with a *ManifestError (matching ErrInvalidManifest) naming the tool and
// field: a missing or malformed name, description, permission or
// args_schema; a duplicate name; a builtin that is not registered; a
// negative timeout, max_calls_per_run or view.max_items; parallel_safe on
// a write tool.
//
// The args_schema must be a JSON Schema (draft 2020-12 unless it says
// otherwise) whose top level is "type":"object". Unknown arguments are
// always refused: a schema without additionalProperties gets
// "additionalProperties":false added (in the schema the model is shown,
// too), and any other explicit value is an error. The schema may only
// refer to itself: remote $refs are not fetched, and a $ref that does not
// resolve is an error. "format" is asserted, not just annotated.
//
// manifests and builtins are not retained.
func NewRegistry(manifests []Manifest, builtins Builtins) (*Registry, error) {
	r := &Registry{tools: make(map[string]*Tool, len(manifests)), builtins: maps.Clone(builtins)}
	for i, m := range manifests {
		if _, dup := r.tools[m.Name]; dup {
			return nil, &ManifestError{Tool: m.Name, Index: i, Field: "name", Reason: "name is already used by an earlier manifest"}
		}
		t, err := newTool(i, m, builtins)
		if err != nil {
			return nil, err
		}
		r.tools[m.Name] = t
		r.names = append(r.names, m.Name)
	}
	slices.Sort(r.names)
	return r, nil
}

func newTool(i int, m Manifest, builtins Builtins) (*Tool, error) {
	bad := func(field, format string, args ...any) error {
		return &ManifestError{Tool: m.Name, Index: i, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case m.Name == "":
		return nil, bad("name", "name is required")
	case !validName.MatchString(m.Name):
		return nil, bad("name", "name %q must match %s", m.Name, validName)
	case strings.TrimSpace(m.Description) == "":
		return nil, bad("description", "description is required: it tells the model when to use the tool")
	case m.Permission != Read && m.Permission != Write:
		return nil, bad("permission", "permission %q must be %q or %q", m.Permission, Read, Write)
	case m.Timeout < 0:
		return nil, bad("timeout", "timeout %s is negative", m.Timeout.D())
	case m.MaxCallsPerRun < 0:
		return nil, bad("max_calls_per_run", "max_calls_per_run %d is negative", m.MaxCallsPerRun)
	case m.View.MaxItems < 0:
		return nil, bad("view", "view.max_items %d is negative", m.View.MaxItems)
	case m.ParallelSafe && m.Permission == Write:
		return nil, bad("parallel_safe", "parallel_safe applies only to read tools")
	}
	m.Version = cmp.Or(m.Version, DefaultVersion)
	if m.Timeout == 0 {
		m.Timeout = events.Duration(DefaultTimeout)
	}
	m.Builtin = cmp.Or(m.Builtin, m.Name)
	fn := builtins[m.Builtin]
	if fn == nil {
		return nil, bad("builtin", "builtin %q is not registered", m.Builtin)
	}
	for j, res := range m.Resources {
		if res.Arg == "" || builtins[res.Resolver] == nil {
			return nil, bad(fmt.Sprintf("resources/%d", j), "resource argument %q needs a registered resolver builtin, not %q", res.Arg, res.Resolver)
		}
	}
	params, fields, err := effectiveSchema(m.ArgsSchema)
	if err != nil {
		return nil, &ManifestError{Tool: m.Name, Index: i, Field: "args_schema", Reason: "args_schema " + err.Error()}
	}
	schema, err := compileSchema(params)
	if err != nil {
		return nil, &ManifestError{Tool: m.Name, Index: i, Field: "args_schema", Reason: "args_schema does not compile", Err: err}
	}
	// The manifest keeps the schema as configured; Spec shows the
	// effective one.
	m.ArgsSchema = slices.Clone(m.ArgsSchema)
	m.View.Fields = slices.Clone(m.View.Fields)
	return &Tool{manifest: m, fn: fn, schema: schema, params: params, fields: fields}, nil
}

// effectiveSchema checks the top of an args_schema and returns it, canonical,
// with additionalProperties:false made explicit, and its top-level property
// names. Errors read after "args_schema ".
func effectiveSchema(raw json.RawMessage) (json.RawMessage, []string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil, errors.New("is required")
	}
	canonical, err := Canonical(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("is not usable JSON: %w", err)
	}
	var top map[string]json.RawMessage
	if canonical[0] != '{' || json.Unmarshal(canonical, &top) != nil {
		return nil, nil, errors.New("must be a JSON object")
	}
	if string(top["type"]) != `"object"` {
		return nil, nil, errors.New(`must have "type":"object" at the top: arguments are always an object`)
	}
	switch ap, ok := top["additionalProperties"]; {
	case !ok:
		top["additionalProperties"] = json.RawMessage("false")
	case string(ap) != "false":
		return nil, nil, fmt.Errorf("has additionalProperties %s: it must be false (or left out, which means false) so unknown arguments are refused", ap)
	}
	var fields []string
	if _, ok := top["patternProperties"]; !ok {
		var props map[string]json.RawMessage
		if json.Unmarshal(top["properties"], &props) == nil {
			for name := range props {
				fields = append(fields, name)
			}
			slices.Sort(fields)
		}
	}
	b, err := json.Marshal(top)
	if err != nil {
		return nil, nil, fmt.Errorf("does not marshal: %w", err)
	}
	// Marshal escapes <, > and &; canonical form is the one we hash and show.
	params, err := Canonical(b)
	if err != nil {
		return nil, nil, fmt.Errorf("is not usable JSON: %w", err)
	}
	return params, fields, nil
}

// compileSchema compiles an effective schema without touching the network.
func compileSchema(params json.RawMessage) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	// The compiler fetches http(s) $refs by default. A registry is built at
	// startup from local config: it must not depend on, or be steered by,
	// what some server returns.
	clear(c.Loaders)
	// Tool arguments are checked strictly: a "format": "date" that is not
	// a date is a wrong argument, not an annotation.
	c.SetAssertFormat(true)
	s, err := c.Compile(params)
	if err != nil {
		return nil, err
	}
	if refs := s.UnresolvedReferenceURIs(); len(refs) > 0 {
		return nil, fmt.Errorf("$ref %q does not resolve within the schema", refs[0])
	}
	return s, nil
}

// Resolver returns the builtin registered under name, for resource checks.
func (r *Registry) Resolver(name string) (Func, bool) {
	fn, ok := r.builtins[name]
	return fn, ok
}

// Lookup returns the named tool.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	t, ok := r.tools[name]
	return t, ok
}

// Names returns every tool's name, sorted. The slice is the caller's.
func (r *Registry) Names() []string { return slices.Clone(r.names) }

// Specs returns what the model is shown of the named tools, in the order
// given. Names not registered are skipped, and nil or empty names give
// none: a run is offered exactly the tools its principal may call, never
// "all" by default.
func (r *Registry) Specs(names []string) []Spec {
	specs := make([]Spec, 0, len(names))
	for _, name := range names {
		if t, ok := r.tools[name]; ok {
			specs = append(specs, t.Spec())
		}
	}
	return specs
}

// Spec returns what the model is shown of t. Parameters is the effective
// schema; the caller must not modify it.
func (t *Tool) Spec() Spec {
	return Spec{
		Name:        t.manifest.Name,
		Description: t.manifest.Description,
		Permission:  t.manifest.Permission,
		Version:     t.manifest.Version,
		Parameters:  t.params,
	}
}

// Manifest returns t's manifest with defaults applied. ArgsSchema is as
// configured; Spec().Parameters is the effective schema. The returned
// value shares slices with t: do not modify them.
func (t *Tool) Manifest() Manifest { return t.manifest }

// Func returns t's implementation.
func (t *Tool) Func() Func { return t.fn }
