package schemas_test

import (
	"errors"
	"io/fs"
	"os"
	"reflect"
	"sync"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/schemas"
)

// tiny exercises each keyword Errors has to explain.
const tiny = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["task_id", "principal"],
  "properties": {
    "task_id": {"type": "string", "pattern": "^[a-z]+$"},
    "n": {"type": "integer", "minimum": 1},
    "principal": {
      "type": "object",
      "additionalProperties": false,
      "required": ["id", "roles"],
      "properties": {
        "id": {"type": "string"},
        "roles": {"type": "array", "minItems": 1, "items": {"type": "string"}}
      }
    },
    "args": {"oneOf": [{"type": "string"}, {"type": "object"}]},
    "refargs": {"oneOf": [{"$ref": "#/$defs/positive"}, {"type": "object"}]},
    "shape": {"oneOf": [
      {"type": "object", "additionalProperties": false, "required": ["r"], "properties": {"r": {"type": "number", "minimum": 0}}},
      {"type": "string"}
    ]},
    "either": {"type": "object", "oneOf": [
      {"required": ["a"], "not": {"required": ["b"]}},
      {"required": ["b"], "not": {"required": ["a"]}}
    ]},
    "multi": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
    "mode": {"enum": ["a", "b"]},
    "one": {"enum": [1]},
    "ref": {"$ref": "#/$defs/positive"},
    "byname": {"type": "object", "additionalProperties": {"$ref": "#/$defs/entry"}, "propertyNames": {"pattern": "^[a-z]+$"}},
    "model": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"provider": {"enum": ["scripted", "other"]}, "script": {"type": "string"}},
      "if": {"properties": {"provider": {"const": "scripted"}}},
      "then": {"required": ["script"]}
    }
  },
  "$defs": {
    "positive": {"type": "integer", "minimum": 1},
    "entry": {"type": "object", "additionalProperties": false, "properties": {"x": {"type": "integer", "minimum": 1}}}
  }
}`

func TestErrors(t *testing.T) {
	t.Parallel()
	schema, err := schemas.CompileBytes([]byte(tiny))
	if err != nil {
		t.Fatal(err)
	}
	const ok = `"task_id": "a", "principal": {"id": "p", "roles": ["r"]}`

	tests := []struct {
		name  string
		given string
		want  []events.FieldError
	}{
		{
			name:  "valid",
			given: `{` + ok + `, "args": "x", "shape": {"r": 1}, "model": {"provider": "other"}}`,
		},
		{
			name:  "missing required properties point at themselves",
			given: `{}`,
			want: []events.FieldError{
				{Field: "/principal", Message: "is required"},
				{Field: "/task_id", Message: "is required"},
			},
		},
		{
			name:  "nested required",
			given: `{"task_id": "a", "principal": {}}`,
			want: []events.FieldError{
				{Field: "/principal/id", Message: "is required"},
				{Field: "/principal/roles", Message: "is required"},
			},
		},
		{
			name:  "unknown properties are not allowed",
			given: `{"task_id": "a", "zzz": 1, "yyy": 2, "principal": {"id": "p", "roles": ["r"], "extra": true}}`,
			want: []events.FieldError{
				{Field: "/principal/extra", Message: "is not allowed"},
				{Field: "/yyy", Message: "is not allowed"},
				{Field: "/zzz", Message: "is not allowed"},
			},
		},
		{
			name:  "type, minimum, pattern, minItems, items",
			given: `{"task_id": "ABC", "principal": {"id": 1, "roles": []}, "n": 0}`,
			want: []events.FieldError{
				{Field: "/n", Message: "must be >= 1"},
				{Field: "/principal/id", Message: "must be string, not integer"},
				{Field: "/principal/roles", Message: "must have at least 1 items"},
				{Field: "/task_id", Message: "must match the pattern ^[a-z]+$"},
			},
		},
		{
			name:  "array items by index",
			given: `{"task_id": "a", "principal": {"id": "p", "roles": ["r", 2]}, "n": 1.5}`,
			want: []events.FieldError{
				{Field: "/n", Message: "must be integer, not number"},
				{Field: "/principal/roles/1", Message: "must be string, not integer"},
			},
		},
		{
			name:  "duplicate keys are not valid JSON",
			given: `{"task_id": "a", "task_id": "b", "principal": {"id": "p", "roles": ["r"]}}`,
			want:  []events.FieldError{{Field: "", Message: "is not valid JSON"}},
		},
		{
			name:  "root type",
			given: `[]`,
			want:  []events.FieldError{{Field: "", Message: "must be object, not array"}},
		},
		{
			name:  "not JSON",
			given: `{`,
			want:  []events.FieldError{{Field: "", Message: "is not valid JSON"}},
		},
		{
			name:  "oneOf of types names the types",
			given: `{` + ok + `, "args": 5}`,
			want:  []events.FieldError{{Field: "/args", Message: "must be object or string"}},
		},
		{
			name:  "oneOf of types looks through $ref",
			given: `{` + ok + `, "refargs": "x"}`,
			want:  []events.FieldError{{Field: "/refargs", Message: "must be integer or object"}},
		},
		{
			name:  "oneOf through $ref with the right type explains it",
			given: `{` + ok + `, "refargs": 0}`,
			want:  []events.FieldError{{Field: "/refargs", Message: "must be >= 1"}},
		},
		{
			name:  "oneOf with one branch of the right type explains that branch",
			given: `{` + ok + `, "shape": {"r": -1, "q": 1}}`,
			want: []events.FieldError{
				{Field: "/shape/q", Message: "is not allowed"},
				{Field: "/shape/r", Message: "must be >= 0"},
			},
		},
		{
			name:  "oneOf of required properties names them",
			given: `{` + ok + `, "either": {}}`,
			want:  []events.FieldError{{Field: "/either", Message: "must have exactly one of: a, b"}},
		},
		{
			name:  "oneOf of required properties with both present",
			given: `{` + ok + `, "args": "x", "either": {"a": 1, "b": 2}}`,
			want:  []events.FieldError{{Field: "/either", Message: "must match exactly one of the allowed forms"}},
		},
		{
			name:  "oneOf matching several",
			given: `{` + ok + `, "multi": 1}`,
			want:  []events.FieldError{{Field: "/multi", Message: "must match exactly one of the allowed forms, matches several"}},
		},
		{
			name:  "enum",
			given: `{` + ok + `, "mode": "c", "one": 2}`,
			want: []events.FieldError{
				{Field: "/mode", Message: "must be one of: a, b"},
				{Field: "/one", Message: "must be 1"},
			},
		},
		{
			name:  "ref and additionalProperties schema",
			given: `{` + ok + `, "ref": 0, "byname": {"k": {"x": 0, "y": 1}}}`,
			want: []events.FieldError{
				{Field: "/byname/k/x", Message: "must be >= 1"},
				{Field: "/byname/k/y", Message: "is not allowed"},
				{Field: "/ref", Message: "must be >= 1"},
			},
		},
		{
			name:  "property names and escaping",
			given: `{` + ok + `, "byname": {"A/b~": {}}}`,
			want: []events.FieldError{
				{Field: "/byname/A~1b~0", Message: "property name must match the pattern ^[a-z]+$"},
			},
		},
		{
			name:  "if/then",
			given: `{` + ok + `, "model": {"provider": "scripted"}}`,
			want:  []events.FieldError{{Field: "/model/script", Message: "is required"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := schemas.Errors(schema.ValidateJSON([]byte(tt.given)))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Errors(%s)\n got %q\nwant %q", tt.given, got, tt.want)
			}
		})
	}
}

func TestErrorsOfNilIsNil(t *testing.T) {
	t.Parallel()
	if got := schemas.Errors(nil); got != nil {
		t.Errorf("Errors(nil) = %v", got)
	}
}

func TestEmbeddedSchemasCompile(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(os.DirFS("."), "*.schema.json")
	if err != nil || len(names) == 0 {
		t.Fatalf("no schemas: %v", err)
	}
	for _, name := range names {
		if _, err := schemas.Compile(name); err != nil {
			t.Errorf("Compile(%s): %v", name, err)
		}
	}
}

func TestBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		given   string
		wantErr error
	}{
		{given: "config.schema.json"},
		{given: "config"},
		{given: "nope", wantErr: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.given, func(t *testing.T) {
			t.Parallel()
			b, err := schemas.Bytes(tt.given)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Bytes(%q) error = %v, want %v", tt.given, err, tt.wantErr)
			}
			if err == nil && len(b) == 0 {
				t.Errorf("Bytes(%q) is empty", tt.given)
			}
		})
	}
}

// TestConcurrentValidation guards against the library's lazily compiled
// patterns: run it with -race.
func TestConcurrentValidation(t *testing.T) {
	t.Parallel()
	s, err := schemas.Compile("config")
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte(`{"version": 1, "tools": [{"name": "Bad", "description": "d", "permission": "read",
	  "args_schema": "a.json", "timeout": "2s"}], "agents": {"a b": {"model": {"provider": "scripted",
	  "script": "s.json"}, "roles": ["r"], "limits": {"max_active": "1m"}}}, "server": {"sync_interval": "always"}}`)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := schemas.Errors(s.ValidateJSON(doc)); len(got) != 2 {
				t.Errorf("errors = %q, want /agents/a b and /tools/0/name", got)
			}
		})
	}
	wg.Wait()
}
