package tools

import (
	"bytes"
	"cmp"
	"context"
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
	"github.com/loopgate/loopgate/schemas"
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
// Timeout 10s, Builtin = Name for builtin executors), binds it to its
// implementation — a builtin, or for executor nats a NATS request/reply
// executor on the connection given by WithConn — and compiles its argument
// and result schemas. It fails on the first bad manifest
// with a *ManifestError (matching ErrInvalidManifest) naming the tool and
// field: a missing or malformed name, description, permission or
// args_schema; a duplicate name; a builtin that is not registered; a
// negative timeout, max_calls_per_run or view.max_items; parallel_safe on
// a write tool; a negative max_effect_delay, or one on a read tool;
// reconcile_fences without a reconcile tool or on a read tool; a write
// tool with a reconcile tool that is neither idempotent nor
// reconcile_fences and has no max_effect_delay (it has no default); a
// nats executor whose subject is not a plain subject, or
// that has a builtin too, or no connection (WithConn); a result_schema
// that does not compile. A resource's resolver must be a builtin or a tool
// of the registry (a remote resolver is a tool no profile offers).
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
func NewRegistry(manifests []Manifest, builtins Builtins, opts ...Option) (*Registry, error) {
	var o registryOptions
	for _, opt := range opts {
		opt(&o)
	}
	resolvable := make(map[string]bool, len(manifests)+len(builtins))
	for name, fn := range builtins {
		resolvable[name] = fn != nil
	}
	for _, m := range manifests {
		// A resolver runs in the policy check, before any approval: only
		// a read tool may be one.
		resolvable[m.Name] = m.Permission == Read
	}
	r := &Registry{tools: make(map[string]*Tool, len(manifests)), builtins: maps.Clone(builtins)}
	for i, m := range manifests {
		if _, dup := r.tools[m.Name]; dup {
			return nil, &ManifestError{Tool: m.Name, Index: i, Field: "name", Reason: "name is already used by an earlier manifest"}
		}
		t, err := newTool(i, m, builtins, resolvable, o)
		if err != nil {
			return nil, err
		}
		r.tools[m.Name] = t
		r.names = append(r.names, m.Name)
	}
	slices.Sort(r.names)
	return r, nil
}

// Option configures NewRegistry.
type Option func(*registryOptions)

type registryOptions struct {
	// conn carries the calls of nats executors.
	conn Requester
}

func newTool(i int, m Manifest, builtins Builtins, resolvable map[string]bool, o registryOptions) (*Tool, error) {
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
	case m.MaxEffectDelay < 0:
		return nil, bad("max_effect_delay", "tools[%d].max_effect_delay %s is negative", i, m.MaxEffectDelay.D())
	case m.MaxEffectDelay > 0 && m.Permission != Write:
		return nil, bad("max_effect_delay", "tools[%d].max_effect_delay applies only to write tools: a read's outcome is never reconciled", i)
	case m.ReconcileFences && (m.Permission != Write || m.Reconcile == ""):
		return nil, bad("reconcile_fences", "tools[%d].reconcile_fences applies only to a write tool with a reconcile tool", i)
	case m.Permission == Write && m.Reconcile != "" && !m.Idempotent && !m.ReconcileFences && m.MaxEffectDelay == 0:
		// Asked too early, a check that cannot fence answers "not
		// applied" while the attempt may still land.
		return nil, bad("max_effect_delay", "tools[%d].max_effect_delay is required: the write names reconcile %q, which does not fence (reconcile_fences), and it is not idempotent; say how long after an attempt's deadline its effect may still land", i, m.Reconcile)
	}
	m.Version = cmp.Or(m.Version, DefaultVersion)
	if m.Timeout == 0 {
		m.Timeout = events.Duration(DefaultTimeout)
	}
	var fn Func
	switch m.Executor.Kind() {
	case ExecutorNATS:
		switch {
		case m.Builtin != "":
			return nil, bad("builtin", "builtin %q applies only to builtin executors; this tool's executor is %s", m.Builtin, m.Executor)
		case !validSubject(m.Executor.NATS):
			return nil, bad("executor", "executor nats subject %q must be dot-separated tokens with no spaces or wildcards", m.Executor.NATS)
		case isReserved(m.Executor.NATS):
			ns, _ := ReservedSubject(m.Executor.NATS)
			return nil, bad("executor", "executor nats subject %q is in %s, which loopgate or JetStream uses: pick a subject of the tool's own", m.Executor.NATS, ns)
		case o.conn == nil:
			return nil, bad("executor", "executor %s needs a NATS connection: build the registry with tools.WithConn", m.Executor)
		}
	default:
		m.Builtin = cmp.Or(m.Builtin, m.Name)
		if fn = builtins[m.Builtin]; fn == nil {
			return nil, bad("builtin", "builtin %q is not registered", m.Builtin)
		}
	}
	for j, res := range m.Resources {
		if res.Arg == "" || !resolvable[res.Resolver] {
			return nil, bad(fmt.Sprintf("resources/%d", j), "resource argument %q needs a resolver that is a registered builtin or a read tool, not %q", res.Arg, res.Resolver)
		}
	}
	var result *resultSchema
	if len(m.ResultSchema) > 0 {
		rs, err := compileResultSchema(m.ResultSchema)
		if err != nil {
			return nil, &ManifestError{Tool: m.Name, Index: i, Field: "result_schema", Reason: "result_schema does not compile", Err: err}
		}
		result = rs
	}
	params, fields, err := effectiveSchema(m.ArgsSchema)
	if err != nil {
		return nil, &ManifestError{Tool: m.Name, Index: i, Field: "args_schema", Reason: "args_schema " + err.Error()}
	}
	schema, err := CompileArgsSchema(params)
	if err != nil {
		return nil, &ManifestError{Tool: m.Name, Index: i, Field: "args_schema", Reason: "args_schema does not compile", Err: err}
	}
	// The manifest keeps the schema as configured; Spec shows the
	// effective one.
	m.ArgsSchema = slices.Clone(m.ArgsSchema)
	m.ResultSchema = slices.Clone(m.ResultSchema)
	m.View.Fields = slices.Clone(m.View.Fields)
	switch {
	case m.Executor.Kind() == ExecutorNATS:
		fn = natsFunc(o.conn, m, result)
	case result != nil:
		fn = checkedResult(fn, m.Name, result)
	}
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
	fields, open := ArgNames(canonical)
	if open {
		fields = nil
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

// CompileArgsSchema compiles an effective args_schema (EffectiveSchema's
// output) as the registry does: without touching the network, asserting
// "format", and refusing a $ref that does not resolve within the schema.
// A tool service that checks arguments itself (toolsvc.ArgsSchema) uses it
// too, so it refuses exactly what loopgate refuses. Validation with the
// result must be serialized (see schemas.CompileBytes).
func CompileArgsSchema(params json.RawMessage) (*jsonschema.Schema, error) {
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

// Resolver returns the resolver called name, for resource checks: the
// builtin registered under name, else the registry's tool of that name (a
// remote resolver is a nats tool that no profile offers).
func (r *Registry) Resolver(name string) (Func, bool) {
	if fn, ok := r.builtins[name]; ok {
		return fn, ok
	}
	if t, ok := r.tools[name]; ok {
		return t.fn, true
	}
	return nil, false
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

// EffectiveSchema returns the argument schema a registry would validate
// calls against and show the model for raw: canonical JSON, with
// additionalProperties:false made explicit. Two schemas are the same
// contract when their effective schemas are byte-equal. It fails like
// NewRegistry's args_schema checks (not an object, no "type":"object",
// additionalProperties other than false).
func EffectiveSchema(raw json.RawMessage) (json.RawMessage, error) {
	params, _, err := effectiveSchema(raw)
	if err != nil {
		return nil, fmt.Errorf("args_schema %w", err)
	}
	return params, nil
}

// ErrInvalidResult marks a tool result that does not match the manifest's
// result_schema; errors.As a *ResultError for the field errors. The worker
// treats it as an unexpected failure: a tool that breaks its own contract
// is quarantined for the rest of the run.
var ErrInvalidResult = errors.New("tool result does not match its result_schema")

// ResultError says how a tool's result broke its result_schema.
type ResultError struct {
	Tool   string
	Errors []events.FieldError
}

func (e *ResultError) Error() string {
	msgs := make([]string, 0, len(e.Errors))
	for _, fe := range e.Errors {
		msgs = append(msgs, cmp.Or(fe.Field, "/")+": "+fe.Message)
	}
	return fmt.Sprintf("tool %q: %v: %s", e.Tool, ErrInvalidResult, strings.Join(msgs, "; "))
}

// Is makes every ResultError match ErrInvalidResult.
func (e *ResultError) Is(target error) bool { return target == ErrInvalidResult }

// resultSchema is a compiled result_schema. Validation is serialized: the
// library rebuilds a patternProperties schema's caches on every validation
// (see schemas.CompileBytes), and a result check costs microseconds.
type resultSchema struct {
	mu     sync.Mutex
	schema *jsonschema.Schema
}

func compileResultSchema(raw json.RawMessage) (*resultSchema, error) {
	s, err := schemas.CompileBytes(raw)
	if err != nil {
		return nil, err
	}
	if refs := s.UnresolvedReferenceURIs(); len(refs) > 0 {
		return nil, fmt.Errorf("$ref %q does not resolve within the schema", refs[0])
	}
	return &resultSchema{schema: s}, nil
}

// check validates a result, as JSON.
func (rs *resultSchema) check(tool string, result []byte) error {
	rs.mu.Lock()
	res := rs.schema.ValidateJSON(result)
	rs.mu.Unlock()
	if res.IsValid() {
		return nil
	}
	return &ResultError{Tool: tool, Errors: schemas.Errors(res)}
}

// checkedResult wraps a builtin so its result is checked against the
// manifest's result_schema; the result becomes the JSON it was checked as.
func checkedResult(fn Func, tool string, rs *resultSchema) Func {
	return func(ctx context.Context, call Call) (any, error) {
		v, err := fn(ctx, call)
		if err != nil {
			return v, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("tool %q: result does not marshal: %w", tool, err)
		}
		if err := rs.check(tool, b); err != nil {
			return nil, err
		}
		return json.RawMessage(b), nil
	}
}

func isReserved(subject string) bool {
	_, reserved := ReservedSubject(subject)
	return reserved
}

// ArgNames returns the top-level argument names an args_schema allows,
// sorted, and open when it names them in a way ArgNames does not read
// (patternProperties, or a $ref, allOf, anyOf, oneOf, if or
// dependentSchemas at the top), so that no name can be said to be missing.
// The config loader refuses policy and resource references to names a
// closed schema lacks; a refused argument's error lists them.
func ArgNames(schema json.RawMessage) (names []string, open bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(schema, &top) != nil {
		return nil, true
	}
	for _, k := range []string{"patternProperties", "$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "if", "dependentSchemas"} {
		if _, ok := top[k]; ok {
			return nil, true
		}
	}
	var props map[string]json.RawMessage
	if json.Unmarshal(top["properties"], &props) != nil {
		return nil, true
	}
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, false
}
