package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
)

// lookupSchema is CityOps' lookup_complaints argument schema.
const lookupSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "lookup_complaints arguments",
  "type": "object",
  "properties": {
    "category": {"type": "string", "enum": ["sanitation", "noise", "pothole", "streetlight", "graffiti"], "default": "sanitation"},
    "status": {"type": "string", "enum": ["open", "in_progress", "closed"], "default": "open"},
    "older_than_days": {"type": "integer", "minimum": 0, "maximum": 365, "default": 0},
    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5}
  },
  "additionalProperties": false
}`

// draftSchema leaves additionalProperties out: the registry adds it.
const draftSchema = `{
  "type": "object",
  "properties": {
    "request_id": {"type": "string", "pattern": "^SR-[0-9]+$"},
    "reason": {"type": "string", "minLength": 10, "maxLength": 500},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "contact": {"type": "string", "format": "email"},
    "meta": {"type": "object", "properties": {"a/b~c": {"type": "integer"}}, "additionalProperties": false}
  },
  "required": ["request_id", "reason"]
}`

type fixture struct {
	builtins  Builtins
	manifests []Manifest
}

func setup(t testing.TB) fixture {
	t.Helper()
	b := Builtins{}
	b.MustRegister("lookup_complaints", func(context.Context, Call) (any, error) { return "lookup", nil })
	b.MustRegister("draft_escalation", func(context.Context, Call) (any, error) { return "draft", nil })
	return fixture{
		builtins: b,
		manifests: []Manifest{
			{Name: "lookup_complaints", Description: "Find complaints.", Permission: Read, ArgsSchema: json.RawMessage(lookupSchema), Timeout: events.Duration(2 * time.Second), ParallelSafe: true},
			{Name: "draft_escalation", Version: "2", Description: "Draft an escalation.", Permission: Write, ArgsSchema: json.RawMessage(draftSchema)},
			{Name: "slow_lookup", Description: "The vendor copy.", Permission: Read, ArgsSchema: json.RawMessage(lookupSchema), Builtin: "lookup_complaints"},
		},
	}
}

func TestNewRegistryRefusesBadManifests(t *testing.T) {
	t.Parallel()

	schema := func(s string) json.RawMessage { return json.RawMessage(s) }
	ok := Manifest{Name: "x", Description: "d", Permission: Read, ArgsSchema: schema(`{"type":"object"}`)}
	with := func(change func(*Manifest)) []Manifest {
		m := ok
		change(&m)
		return []Manifest{m}
	}
	withSchema := func(s string) []Manifest { return with(func(m *Manifest) { m.ArgsSchema = schema(s) }) }
	tests := []struct {
		name      string
		given     []Manifest
		wantField string
		wantMsg   string
	}{
		{name: "missing name", given: with(func(m *Manifest) { m.Name = "" }), wantField: "name", wantMsg: "tool #0: name is required"},
		{name: "name with capitals", given: with(func(m *Manifest) { m.Name = "Lookup" }), wantField: "name", wantMsg: `tool "Lookup": name "Lookup" must match`},
		{name: "name with a dash", given: with(func(m *Manifest) { m.Name = "look-up" }), wantField: "name", wantMsg: "must match"},
		{name: "name too long", given: with(func(m *Manifest) { m.Name = "a" + strings.Repeat("b", 64) }), wantField: "name", wantMsg: "must match"},
		{name: "duplicate name", given: []Manifest{ok, ok}, wantField: "name", wantMsg: `tool "x": name is already used`},
		{name: "missing description", given: with(func(m *Manifest) { m.Description = "  " }), wantField: "description", wantMsg: `tool "x": description is required`},
		{name: "missing permission", given: with(func(m *Manifest) { m.Permission = "" }), wantField: "permission", wantMsg: `permission "" must be "read" or "write"`},
		{name: "unknown permission", given: with(func(m *Manifest) { m.Permission = "admin" }), wantField: "permission", wantMsg: `permission "admin"`},
		{name: "builtin not registered", given: with(func(m *Manifest) { m.Builtin = "y" }), wantField: "builtin", wantMsg: `tool "x": builtin "y" is not registered`},
		{name: "builtin defaults to the name", given: with(func(m *Manifest) { m.Name = "z" }), wantField: "builtin", wantMsg: `tool "z": builtin "z" is not registered`},
		{name: "negative timeout", given: with(func(m *Manifest) { m.Timeout = events.Duration(-time.Second) }), wantField: "timeout", wantMsg: "negative"},
		{name: "negative max calls", given: with(func(m *Manifest) { m.MaxCallsPerRun = -1 }), wantField: "max_calls_per_run", wantMsg: "negative"},
		{name: "negative max items", given: with(func(m *Manifest) { m.View.MaxItems = -1 }), wantField: "view", wantMsg: "negative"},
		{name: "parallel-safe write", given: with(func(m *Manifest) { m.Permission, m.ParallelSafe = Write, true }), wantField: "parallel_safe", wantMsg: "only to read tools"},
		{name: "missing schema", given: with(func(m *Manifest) { m.ArgsSchema = nil }), wantField: "args_schema", wantMsg: `tool "x": args_schema is required`},
		{name: "schema not JSON", given: withSchema(`{"type":`), wantField: "args_schema", wantMsg: "args_schema is not usable JSON"},
		{name: "schema with duplicate keys", given: withSchema(`{"type":"object","type":"string"}`), wantField: "args_schema", wantMsg: "Duplicate key"},
		{name: "schema not an object", given: withSchema(`true`), wantField: "args_schema", wantMsg: "must be a JSON object"},
		{name: "schema without type", given: withSchema(`{"properties":{}}`), wantField: "args_schema", wantMsg: `must have "type":"object"`},
		{name: "schema of a string", given: withSchema(`{"type":"string"}`), wantField: "args_schema", wantMsg: `must have "type":"object"`},
		{name: "schema of several types", given: withSchema(`{"type":["object","null"]}`), wantField: "args_schema", wantMsg: `must have "type":"object"`},
		{name: "additional properties allowed", given: withSchema(`{"type":"object","additionalProperties":true}`), wantField: "args_schema", wantMsg: "additionalProperties true: it must be false"},
		{name: "additional properties by schema", given: withSchema(`{"type":"object","additionalProperties":{"type":"string"}}`), wantField: "args_schema", wantMsg: "it must be false"},
		{name: "unresolved ref", given: withSchema(`{"type":"object","properties":{"a":{"$ref":"#/$defs/nope"}}}`), wantField: "args_schema", wantMsg: `$ref "#/$defs/nope" does not resolve`},
		{name: "remote ref is not fetched", given: withSchema(`{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`), wantField: "args_schema", wantMsg: "does not resolve"},
		{name: "bad pattern", given: withSchema(`{"type":"object","properties":{"a":{"pattern":"("}}}`), wantField: "args_schema", wantMsg: "args_schema does not compile"},
		{name: "a write tool as a resolver", given: []Manifest{
			with(func(m *Manifest) { m.Resources = []ResourceArg{{Arg: "a", Resolver: "w"}} })[0],
			{Name: "w", Description: "d", Permission: Write, Builtin: "x", ArgsSchema: schema(`{"type":"object"}`)},
		}, wantField: "resources/0", wantMsg: "a registered builtin or a read tool"},
		{name: "executor on loopgate's subjects", given: with(func(m *Manifest) { m.Executor.NATS = "loopgate.events.t.r.finished" }), wantField: "executor", wantMsg: "is in loopgate.>"},
		{name: "executor on a bucket", given: with(func(m *Manifest) { m.Executor.NATS = "$KV.loopgate_approvals.k" }), wantField: "executor", wantMsg: "is in $KV.>"},
		{name: "non-fencing reconcile without max_effect_delay", given: []Manifest{ok,
			{Name: "w", Description: "d", Permission: Write, Builtin: "x", ArgsSchema: schema(`{"type":"object"}`), Reconcile: "x"},
		}, wantField: "max_effect_delay", wantMsg: `tool "w": tools[1].max_effect_delay is required`},
		{name: "negative max_effect_delay", given: with(func(m *Manifest) {
			m.Permission, m.Reconcile, m.MaxEffectDelay = Write, "x", events.Duration(-time.Second)
		}), wantField: "max_effect_delay", wantMsg: "tools[0].max_effect_delay -1s is negative"},
		{name: "max_effect_delay on a read", given: with(func(m *Manifest) { m.MaxEffectDelay = events.Duration(time.Second) }), wantField: "max_effect_delay", wantMsg: "tools[0].max_effect_delay applies only to write tools"},
		{name: "reconcile_fences without a reconcile", given: with(func(m *Manifest) { m.Permission, m.ReconcileFences = Write, true }), wantField: "reconcile_fences", wantMsg: "tools[0].reconcile_fences applies only to a write tool with a reconcile tool"},
		{name: "too deep", given: withSchema(`{"type":"object","x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`), wantField: "args_schema", wantMsg: "nests too deeply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := Builtins{}
			b.MustRegister("x", func(context.Context, Call) (any, error) { return nil, nil })
			r, err := NewRegistry(tt.given, b)
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("NewRegistry() = %v, %v; want ErrInvalidManifest", r, err)
			}
			var me *ManifestError
			if !errors.As(err, &me) || me.Field != tt.wantField {
				t.Errorf("error %v: field %q, want %q", err, me.Field, tt.wantField)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestNewRegistryAppliesDefaults(t *testing.T) {
	t.Parallel()
	f := setup(t)

	r, err := NewRegistry(f.manifests, f.builtins)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool        string
		wantVersion string
		wantTimeout time.Duration
		wantBuiltin string
		wantRuns    string
	}{
		{tool: "lookup_complaints", wantVersion: "1", wantTimeout: 2 * time.Second, wantBuiltin: "lookup_complaints", wantRuns: "lookup"},
		{tool: "draft_escalation", wantVersion: "2", wantTimeout: 10 * time.Second, wantBuiltin: "draft_escalation", wantRuns: "draft"},
		{tool: "slow_lookup", wantVersion: "1", wantTimeout: 10 * time.Second, wantBuiltin: "lookup_complaints", wantRuns: "lookup"},
	}
	for _, tt := range tests {
		tool, ok := r.Lookup(tt.tool)
		if !ok {
			t.Fatalf("Lookup(%q) found nothing", tt.tool)
		}
		m := tool.Manifest()
		if m.Version != tt.wantVersion || m.Timeout.D() != tt.wantTimeout || m.Builtin != tt.wantBuiltin {
			t.Errorf("%s: version %q timeout %s builtin %q; want %q %s %q", tt.tool, m.Version, m.Timeout.D(), m.Builtin, tt.wantVersion, tt.wantTimeout, tt.wantBuiltin)
		}
		if got, err := tool.Func()(t.Context(), Call{}); got != tt.wantRuns || err != nil {
			t.Errorf("%s: Func() = %v, %v; want the %s builtin", tt.tool, got, err, tt.wantRuns)
		}
	}
	if _, ok := r.Lookup("send_email"); ok {
		t.Error(`Lookup("send_email") found a tool that was never registered`)
	}
	if got := strings.Join(r.Names(), ","); got != "draft_escalation,lookup_complaints,slow_lookup" {
		t.Errorf("Names() = %s, want sorted", got)
	}
}

func TestSpecsShowTheEffectiveSchema(t *testing.T) {
	t.Parallel()
	f := setup(t)

	r, err := NewRegistry(f.manifests, f.builtins)
	if err != nil {
		t.Fatal(err)
	}
	specs := r.Specs([]string{"draft_escalation", "send_email", "lookup_complaints"})
	if len(specs) != 2 || specs[0].Name != "draft_escalation" || specs[1].Name != "lookup_complaints" {
		t.Fatalf("Specs() = %+v; want draft_escalation, lookup_complaints in that order", specs)
	}
	draft := specs[0]
	if draft.Description != "Draft an escalation." || draft.Permission != Write || draft.Version != "2" {
		t.Errorf("draft spec = %+v", draft)
	}
	canonical, err := Canonical(draft.Parameters)
	if err != nil || string(canonical) != string(draft.Parameters) {
		t.Errorf("Parameters are not canonical JSON: %s (%v)", draft.Parameters, err)
	}
	var params struct {
		Type                 string          `json:"type"`
		AdditionalProperties *bool           `json:"additionalProperties"`
		Required             []string        `json:"required"`
		Properties           json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(draft.Parameters, &params); err != nil {
		t.Fatal(err)
	}
	if params.Type != "object" || params.AdditionalProperties == nil || *params.AdditionalProperties || len(params.Required) != 2 || params.Properties == nil {
		t.Errorf("Parameters = %s; want the configured schema with additionalProperties false", draft.Parameters)
	}
	tool, _ := r.Lookup("draft_escalation")
	if string(tool.Manifest().ArgsSchema) != draftSchema {
		t.Errorf("Manifest().ArgsSchema changed: %s", tool.Manifest().ArgsSchema)
	}
	if got := r.Specs(nil); len(got) != 0 {
		t.Errorf("Specs(nil) = %+v; want none, never all", got)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r, err := NewRegistry(f.manifests, f.builtins)
	if err != nil {
		t.Fatal(err)
	}

	const allowed = "allowed fields: category, limit, older_than_days, status"
	tests := []struct {
		name    string
		tool    string
		given   string
		want    string
		wantErr []events.FieldError
	}{
		{name: "valid", tool: "lookup_complaints", given: `{"category":"sanitation","older_than_days":7}`, want: `{"category":"sanitation","older_than_days":7}`},
		{name: "valid is canonicalized", tool: "lookup_complaints", given: "{\n \"older_than_days\": 7.0,\n \"category\": \"\\u0073anitation\"\n}", want: `{"category":"sanitation","older_than_days":7}`},
		{name: "empty means no arguments", tool: "lookup_complaints", given: ``, want: `{}`},
		{name: "no arguments", tool: "lookup_complaints", given: `{}`, want: `{}`},
		{
			name: "wrong type", tool: "lookup_complaints", given: `{"older_than_days":"7"}`,
			wantErr: []events.FieldError{{Field: "/older_than_days", Message: "Value is string but should be integer"}},
		},
		{
			name: "fraction for an integer", tool: "lookup_complaints", given: `{"limit":2.5}`,
			wantErr: []events.FieldError{{Field: "/limit", Message: "Value is number but should be integer"}},
		},
		{
			name: "below minimum", tool: "lookup_complaints", given: `{"older_than_days":-5}`,
			wantErr: []events.FieldError{{Field: "/older_than_days", Message: "-5 should be at least 0"}},
		},
		{
			name: "above maximum", tool: "lookup_complaints", given: `{"limit":50}`,
			wantErr: []events.FieldError{{Field: "/limit", Message: "50 should be at most 20"}},
		},
		{
			name: "not in enum", tool: "lookup_complaints", given: `{"category":"parking"}`,
			wantErr: []events.FieldError{{Field: "/category", Message: "Value parking should be one of the allowed values: sanitation, noise, pothole, streetlight, graffiti"}},
		},
		{
			name: "unknown field", tool: "lookup_complaints", given: `{"category":"noise","smuggled":true}`,
			wantErr: []events.FieldError{{Field: "/smuggled", Message: `unknown field "smuggled" is not allowed; ` + allowed}},
		},
		{
			name: "unknown field added by the registry's additionalProperties", tool: "draft_escalation", given: `{"request_id":"SR-1","reason":"open 40 days, threshold 30","send":true}`,
			wantErr: []events.FieldError{{Field: "/send", Message: `unknown field "send" is not allowed; allowed fields: contact, meta, reason, request_id, tags`}},
		},
		{
			name: "missing required", tool: "draft_escalation", given: `{"tags":["a"]}`,
			wantErr: []events.FieldError{
				{Field: "/reason", Message: `required field "reason" is missing`},
				{Field: "/request_id", Message: `required field "request_id" is missing`},
			},
		},
		{
			name: "several errors, sorted by field", tool: "draft_escalation", given: `{"request_id":"R1","reason":"short","tags":["a",2,"c","d"],"x":1}`,
			wantErr: []events.FieldError{
				{Field: "/reason", Message: "Value should be at least 10 characters"},
				{Field: "/request_id", Message: "Value does not match the required pattern ^SR-[0-9]+$"},
				{Field: "/tags", Message: "Value should have at most 3 items"},
				{Field: "/tags/1", Message: "Value is integer but should be string"},
				{Field: "/x", Message: `unknown field "x" is not allowed; allowed fields: contact, meta, reason, request_id, tags`},
			},
		},
		{
			name: "nested names are escaped in the pointer", tool: "draft_escalation", given: `{"request_id":"SR-1","reason":"open 40 days, threshold 30","meta":{"a/b~c":"x","zz":1}}`,
			wantErr: []events.FieldError{
				{Field: "/meta/a~1b~0c", Message: "Value is string but should be integer"},
				{Field: "/meta/zz", Message: `unknown field "zz" is not allowed`},
			},
		},
		{
			name: "format is asserted", tool: "draft_escalation", given: `{"request_id":"SR-1","reason":"open 40 days, threshold 30","contact":"not an address"}`,
			wantErr: []events.FieldError{{Field: "/contact", Message: "Value does not match format 'email'"}},
		},
		{name: "array", tool: "lookup_complaints", given: `[{"category":"noise"}]`, wantErr: []events.FieldError{{Field: "", Message: "arguments must be a JSON object, not an array"}}},
		{name: "string", tool: "lookup_complaints", given: `"noise"`, wantErr: []events.FieldError{{Field: "", Message: "arguments must be a JSON object, not a string"}}},
		{name: "null", tool: "lookup_complaints", given: `null`, wantErr: []events.FieldError{{Field: "", Message: "arguments must be a JSON object, not null"}}},
		{name: "not JSON", tool: "lookup_complaints", given: `{"category":`, wantErr: []events.FieldError{{Field: "", Message: "arguments must be a JSON object: invalid JSON: Unexpected EOF reached"}}},
		{name: "duplicate key", tool: "lookup_complaints", given: `{"limit":1,"limit":20}`, wantErr: []events.FieldError{{Field: "", Message: `arguments must be a JSON object: invalid JSON: Duplicate key: "limit"`}}},
		{name: "too deep", tool: "draft_escalation", given: `{"tags":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, wantErr: []events.FieldError{{Field: "", Message: "arguments nest deeper than 32 levels"}}},
		{name: "too big", tool: "draft_escalation", given: `{"reason":"` + strings.Repeat("x", MaxArgsBytes) + `"}`, wantErr: []events.FieldError{{Field: "", Message: "arguments are 65549 bytes; at most 65536 are accepted"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tool, _ := r.Lookup(tt.tool)
			canonical, hash, errs := tool.Validate(json.RawMessage(tt.given))
			if !equalErrors(errs, tt.wantErr) {
				t.Fatalf("Validate(%.80s) errors\n got %+v\nwant %+v", tt.given, errs, tt.wantErr)
			}
			if string(canonical) != tt.want {
				t.Errorf("Validate(%.80s) = %s, want %s", tt.given, canonical, tt.want)
			}
			if tt.wantErr == nil && hash != Hash([]byte(tt.want)) {
				t.Errorf("hash %s is not Hash(%s)", hash, tt.want)
			}
			if tt.wantErr != nil && hash != "" {
				t.Errorf("hash %q returned with errors", hash)
			}
		})
	}
}

func equalErrors(a, b []events.FieldError) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestValidateIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r, err := NewRegistry(f.manifests, f.builtins)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Lookup("draft_escalation")

	// All start at once, so the schema's first use (where kaptinlin fills
	// its caches) happens in several goroutines together.
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			<-start
			for range 20 {
				args := `{"request_id":"SR-1","reason":"open 40 days, threshold 30"}`
				if i%2 == 1 {
					args = `{"request_id":"R-1","reason":"short","x":[1]}`
				}
				_, _, errs := tool.Validate(json.RawMessage(args))
				if (i%2 == 1) != (len(errs) > 0) {
					t.Errorf("Validate(%s) = %v", args, errs)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"request_id":"SR-10421","reason":"open 40 days, threshold 30","tags":["a"]}`,
		`{"request_id":1,"reason":null,"smuggled":{"a":[1,2]}}`,
		`{"meta":{"a/b~c":1,"zz":"x"},"contact":"a@b.c"}`,
		`{"tags":[[[[]]]]}`,
		`[1,2]`,
		``,
		`{"reason":"x","reason":"y"}`,
	} {
		f.Add([]byte(s))
	}
	fx := setup(f)
	r, err := NewRegistry(fx.manifests, fx.builtins)
	if err != nil {
		f.Fatal(err)
	}
	tool, _ := r.Lookup("draft_escalation")
	f.Fuzz(func(t *testing.T, args []byte) {
		canonical, hash, errs := tool.Validate(args)
		if len(errs) > 0 {
			if canonical != nil || hash != "" {
				t.Fatalf("Validate(%q) returned arguments with errors %v", args, errs)
			}
			for i, e := range errs {
				if e.Field != "" && !strings.HasPrefix(e.Field, "/") || e.Message == "" {
					t.Fatalf("Validate(%q): bad error %+v", args, e)
				}
				if i > 0 && (errs[i-1].Field > e.Field || errs[i-1] == e) {
					t.Fatalf("Validate(%q): errors not sorted and distinct: %v", args, errs)
				}
			}
			return
		}
		if !json.Valid(canonical) || canonical[0] != '{' || hash != Hash(canonical) {
			t.Fatalf("Validate(%q) = %q, %s", args, canonical, hash)
		}
		again, hash2, errs := tool.Validate(canonical)
		if len(errs) > 0 || string(again) != string(canonical) || hash2 != hash {
			t.Fatalf("valid canonical %q revalidates as %q, %v", canonical, again, errs)
		}
	})
}

// A write with a reconcile tool needs no max_effect_delay when it dedupes
// (idempotent) or its reconcile fences; one whose reconcile does neither
// registers with a max_effect_delay.
func TestNewRegistryAcceptsEveryWayToSettleAnUnknownWrite(t *testing.T) {
	t.Parallel()
	b := Builtins{}
	b.MustRegister("x", func(context.Context, Call) (any, error) { return nil, nil })
	write := Manifest{Name: "w", Description: "d", Permission: Write, Builtin: "x", ArgsSchema: json.RawMessage(`{"type":"object"}`), Reconcile: "s"}
	status := Manifest{Name: "s", Description: "d", Permission: Read, Builtin: "x", ArgsSchema: json.RawMessage(`{"type":"object"}`)}
	for name, change := range map[string]func(*Manifest){
		"idempotent":       func(m *Manifest) { m.Idempotent = true },
		"reconcile_fences": func(m *Manifest) { m.ReconcileFences = true },
		"max_effect_delay": func(m *Manifest) { m.MaxEffectDelay = events.Duration(30 * time.Second) },
		"no reconcile":     func(m *Manifest) { m.Reconcile = "" },
	} {
		m := write
		change(&m)
		if _, err := NewRegistry([]Manifest{m, status}, b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
