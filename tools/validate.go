package tools

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kaptinlin/jsonschema"

	"github.com/loopgate/loopgate/events"
)

// MaxArgsBytes bounds a call's arguments as the model sent them. Real
// arguments are a few hundred bytes; more is a model pasting a document
// where an id belongs.
const MaxArgsBytes = 64 << 10

// Validate checks a call's arguments against t's schema. On success it
// returns their canonical form and its hash (see CanonicalHash), which is
// what the tool is given and what approvals and idempotency keys are bound
// to. Otherwise it returns field-level errors for the model to correct,
// sorted by Field then Message: Field is a JSON pointer to the offending
// value ("" for the arguments as a whole, "/older_than_days", "/tags/1"),
// and for a missing required argument it points where the argument
// belongs.
//
// Arguments are refused when they are over MaxArgsBytes, not valid JSON
// (duplicate keys included: the validator and the tool must not read
// different values), nested deeper than MaxDepth, not an object, or not
// valid against the schema. Empty arguments are read as {}, since
// providers send nothing for a call without parameters.
//
// Validate is safe for concurrent use.
func (t *Tool) Validate(args json.RawMessage) (canonical []byte, hash string, errs []events.FieldError) {
	root := func(format string, a ...any) []events.FieldError {
		return []events.FieldError{{Field: "", Message: fmt.Sprintf(format, a...)}}
	}
	if len(args) > MaxArgsBytes {
		return nil, "", root("arguments are %d bytes; at most %d are accepted", len(args), MaxArgsBytes)
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	canonical, hash, err := CanonicalHash(args)
	switch {
	case errors.Is(err, ErrTooDeep):
		return nil, "", root("arguments nest deeper than %d levels", MaxDepth)
	case err != nil:
		return nil, "", root("arguments must be a JSON object: %v", err)
	case canonical[0] != '{':
		return nil, "", root("arguments must be a JSON object, not %s", kindOf(canonical))
	}
	t.validating.Lock()
	result := t.schema.ValidateJSON(canonical)
	t.validating.Unlock()
	if result.IsValid() {
		return canonical, hash, nil
	}
	var instance any
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	if err := dec.Decode(&instance); err != nil {
		return nil, "", root("arguments must be a JSON object: %v", err)
	}
	c := collector{instance: instance, fields: t.fields}
	c.walk(result, nil)
	if len(c.errs) == 0 {
		// Every invalid result carries an error; this only guards against
		// a shape of report walk does not know.
		c.errs = root("arguments do not match the schema: %s", firstMessage(result))
	}
	slices.SortFunc(c.errs, func(a, b events.FieldError) int {
		return cmp.Or(cmp.Compare(a.Field, b.Field), cmp.Compare(a.Message, b.Message))
	})
	return nil, "", slices.Compact(c.errs)
}

// kindOf names the JSON type of canonical, non-empty JSON.
func kindOf(canonical []byte) string {
	switch canonical[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// collector turns a kaptinlin evaluation report into field errors.
//
// The report is a tree: each node has an InstanceLocation relative to its
// parent's (one property name or index, unescaped, or "" for the same
// value), errors keyed by keyword, and details for subschemas. Keywords
// like "properties" or "$ref" only say "something below failed"; the
// details below say what, so the summary is dropped when they do.
type collector struct {
	instance any
	fields   []string
	errs     []events.FieldError
}

// summaries are keywords whose error only says that a subschema failed.
var summaries = map[string]bool{
	"properties": true, "patternProperties": true, "additionalProperties": true,
	"unevaluatedProperties": true, "propertyNames": true, "dependentSchemas": true,
	"items": true, "prefixItems": true, "unevaluatedItems": true,
	"allOf": true, "$ref": true, "$dynamicRef": true, "then": true, "else": true,
}

// opaque are subschema keywords whose details are not errors of the
// instance: "if" failing only picks "else"; a failed branch of anyOf or
// oneOf, or the inside of not, would mislead. Their own error says enough.
var opaque = []string{"/if", "/anyOf", "/oneOf", "/not", "/contains"}

// walk collects r's errors under the pointer path. It reports false when
// r is about a value that is not there.
func (c *collector) walk(r *jsonschema.EvaluationResult, path []string) bool {
	if loc := r.InstanceLocation; loc != "" {
		path = append(slices.Clip(path), loc[1:])
	}
	if !exists(c.instance, path) {
		// kaptinlin evaluates a missing required property as null, which
		// reports "Value is null but should be string" about a value that
		// is not there; the "required" error above says it properly.
		return false
	}
	before := len(c.errs)
	absent := false
	for _, d := range r.Details {
		if d.IsValid() || slices.ContainsFunc(opaque, func(p string) bool { return hasSegmentPrefix(d.EvaluationPath, p) }) {
			continue
		}
		if !c.walk(d, path) {
			absent = true
		}
	}
	// A summary is dropped when the details said it better, or when it was
	// only about absent values.
	explained := len(c.errs) > before || absent
	for _, keyword := range slices.Sorted(maps.Keys(r.Errors)) {
		e := r.Errors[keyword]
		switch {
		case keyword == "required":
			c.required(path, e)
		case e.Code == "false_schema_mismatch" && (hasSegmentPrefix(r.EvaluationPath, "/additionalProperties") || hasSegmentPrefix(r.EvaluationPath, "/unevaluatedProperties")):
			c.unknown(path)
		case summaries[keyword] && explained:
		case hasSegmentPrefix(r.EvaluationPath, "/propertyNames"):
			c.add(path, "field name: "+e.Error())
		default:
			c.add(path, e.Error())
		}
	}
	return true
}

// required reports each missing property where it belongs.
func (c *collector) required(path []string, e *jsonschema.EvaluationError) {
	list, _ := e.Params["property"].(string)
	if list == "" {
		list, _ = e.Params["properties"].(string)
	}
	names := quotedList(list)
	if names == nil {
		c.add(path, e.Error())
		return
	}
	for _, name := range names {
		c.add(append(slices.Clip(path), name), fmt.Sprintf("required field %q is missing", name))
	}
}

// unknown reports a property the schema does not allow. At the top level
// it lists the allowed ones, which is usually all a model needs to fix a
// misspelled argument.
func (c *collector) unknown(path []string) {
	if len(path) == 0 {
		c.add(path, "unknown fields are not allowed")
		return
	}
	msg := fmt.Sprintf("unknown field %q is not allowed", path[len(path)-1])
	if len(path) == 1 && c.fields != nil {
		msg += "; allowed fields: " + strings.Join(c.fields, ", ")
	}
	c.add(path, msg)
}

func (c *collector) add(path []string, msg string) {
	c.errs = append(c.errs, events.FieldError{Field: pointer(path), Message: msg})
}

// quotedList parses kaptinlin's "'a', 'b'" into a and b; nil if s is not
// in that form.
func quotedList(s string) []string {
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' {
		return nil
	}
	return strings.Split(s[1:len(s)-1], "', '")
}

// hasSegmentPrefix reports whether JSON pointer p starts with the whole
// segments of prefix.
func hasSegmentPrefix(p, prefix string) bool {
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer writes path as an RFC 6901 JSON pointer.
func pointer(path []string) string {
	var b strings.Builder
	for _, seg := range path {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(seg))
	}
	return b.String()
}

// exists reports whether path leads to a value in v.
func exists(v any, path []string) bool {
	for _, seg := range path {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[seg]
			if !ok {
				return false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return false
			}
			v = x[i]
		default:
			return false
		}
	}
	return true
}

// firstMessage is some message from an invalid report, for the fallback.
func firstMessage(r *jsonschema.EvaluationResult) string {
	for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
		return r.Errors[k].Error()
	}
	for _, d := range r.Details {
		if !d.IsValid() {
			return firstMessage(d)
		}
	}
	return "invalid"
}
