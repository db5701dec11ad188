package schemas

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kaptinlin/jsonschema"

	"github.com/loopgate/loopgate/events"
)

// Errors explains a failed validation as field-level errors: each Field is
// a JSON pointer to the offending value ("" for the document itself), each
// Message a short phrase meant to follow it ("/n: must be >= 1"). The
// result is sorted by Field, then Message, without duplicates. A nil or
// valid result gives nil.
//
// Errors reads the evaluation tree rather than DetailedErrors, whose keys
// are "<instance path>/<keyword>" and which keeps one message per key,
// reports summaries ("Properties 'a', 'b' do not match their schemas")
// beside their causes and a missing required property only as a message on
// its parent. Here:
//   - a missing required property is reported at its own pointer,
//     "is required" (the validator also checks it as if it were null; those
//     errors are dropped);
//   - a property additionalProperties:false forbids is reported at its own
//     pointer, "is not allowed";
//   - summaries (properties, items, $ref, allOf, then/else…) give way to
//     the errors that caused them;
//   - oneOf/anyOf: branches whose type does not fit are set aside; if one
//     branch is left its errors are reported, if none the value "must be
//     string or object"; branches that only lack properties give "must have
//     exactly one of: a, b"; otherwise the alternatives are named as a whole.
//
// Property names in pointers are escaped per RFC 6901 (~0, ~1).
func Errors(res *jsonschema.EvaluationResult) []events.FieldError {
	if res == nil || res.IsValid() {
		return nil
	}
	var c collector
	c.explain(res, "")
	slices.SortFunc(c.errs, func(a, b events.FieldError) int {
		return cmp.Or(cmp.Compare(a.Field, b.Field), cmp.Compare(a.Message, b.Message))
	})
	return slices.Compact(c.errs)
}

type collector struct {
	errs []events.FieldError
}

func (c *collector) add(field, message string) {
	c.errs = append(c.errs, events.FieldError{Field: field, Message: message})
}

// Keywords whose details are evaluations of a child value (one pointer
// segment further down), and those whose details evaluate the same value.
var (
	childKeywords = map[string]bool{
		"properties": true, "additionalProperties": true, "patternProperties": true,
		"unevaluatedProperties": true, "items": true, "prefixItems": true,
		"unevaluatedItems": true,
	}
	sameKeywords = map[string]bool{
		"$ref": true, "$dynamicRef": true, "allOf": true, "then": true, "else": true,
		"dependentSchemas": true,
	}
)

// keyword returns the keyword of parent r that produced detail d, and the
// keyword under which r records that keyword's error. The library leaves the
// evaluation path of $ref, $dynamicRef and else results empty, and files
// unevaluatedProperties failures under "properties".
func keyword(d *jsonschema.EvaluationResult) (kw, errKey string) {
	p := strings.TrimPrefix(d.EvaluationPath, "/")
	kw, _, _ = strings.Cut(p, "/")
	switch kw {
	case "":
		return "", ""
	case "unevaluatedProperties":
		return kw, "properties"
	}
	return kw, kw
}

// explain reports why r, a failed evaluation of the value at pointer at,
// failed.
func (c *collector) explain(r *jsonschema.EvaluationResult, at string) {
	missing := map[string]bool{}
	if e := r.Errors["required"]; e != nil {
		for _, p := range quotedList(e.Params) {
			missing[p] = true
			c.add(at+"/"+escape(p), "is required")
		}
	}

	explained := map[string]bool{}
	for _, d := range r.Details {
		if d.IsValid() {
			continue
		}
		kw, errKey := keyword(d)
		seg := strings.TrimPrefix(d.InstanceLocation, "/")
		switch {
		case kw == "":
			// $ref, $dynamicRef or else: the same value.
			if r.Errors["$ref"] == nil && r.Errors["$dynamicRef"] == nil && r.Errors["else"] == nil {
				continue
			}
			explained["$ref"], explained["$dynamicRef"], explained["else"] = true, true, true
			c.explain(d, at)
		case r.Errors[errKey] == nil:
			// A detail whose failure did not fail r: an "if", a oneOf
			// branch beside the one that matched, a contains miss.
			continue
		case kw == "properties" && missing[seg]:
			explained[errKey] = true // checked as null because missing
		case childKeywords[kw]:
			explained[errKey] = true
			c.explain(d, at+"/"+escape(seg))
		case sameKeywords[kw]:
			explained[errKey] = true
			c.explain(d, at)
		case kw == "propertyNames":
			explained[errKey] = true
			var sub collector
			sub.explain(d, "")
			for _, e := range sub.errs {
				c.add(at+"/"+escape(seg), "property name "+e.Message)
			}
		}
	}

	for kw, e := range r.Errors {
		switch {
		case kw == "required" || explained[kw]:
		case kw == "oneOf" || kw == "anyOf":
			c.alternatives(r, kw, e, at)
		case e.Code == "additional_property_false":
			// The library's shortcut for additionalProperties:false on
			// recursive schemas names the property in params, unquoted.
			c.add(at+"/"+escape(fmt.Sprint(e.Params["property"])), "is not allowed")
		default:
			c.add(at, message(e))
		}
	}
}

// alternatives explains a failed oneOf or anyOf of r.
func (c *collector) alternatives(r *jsonschema.EvaluationResult, kw string, e *jsonschema.EvaluationError, at string) {
	if e.Code == "one_of_multiple_matches" {
		c.add(at, "must match exactly one of the allowed forms, matches several")
		return
	}
	var types []string
	var candidates []*jsonschema.EvaluationResult
	for _, d := range r.Details {
		if k, _ := keyword(d); k != kw || d.IsValid() {
			continue
		}
		if t := typeMismatch(d); t != nil {
			types = append(types, t...)
			continue
		}
		candidates = append(candidates, d)
	}
	switch {
	case len(candidates) == 1:
		c.explain(candidates[0], at)
	case len(candidates) == 0 && len(types) > 0:
		slices.Sort(types)
		c.add(at, "must be "+orList(slices.Compact(types)))
	case requiredOnly(candidates) != nil:
		// The common "one of these properties" form.
		names := requiredOnly(candidates)
		if kw == "oneOf" {
			c.add(at, "must have exactly one of: "+strings.Join(names, ", "))
		} else {
			c.add(at, "must have at least one of: "+strings.Join(names, ", "))
		}
	case kw == "oneOf":
		c.add(at, "must match exactly one of the allowed forms")
	default:
		c.add(at, "must match at least one of the allowed forms")
	}
}

// requiredOnly returns the missing properties if each branch failed only
// for lacking properties (and perhaps a "not"), sorted; otherwise nil.
func requiredOnly(branches []*jsonschema.EvaluationResult) []string {
	var names []string
	for _, b := range branches {
		req := b.Errors["required"]
		if req == nil {
			return nil
		}
		for kw := range b.Errors {
			if kw != "required" && kw != "not" {
				return nil
			}
		}
		names = append(names, quotedList(req.Params)...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// typeMismatch returns the types r expected if r failed because the value
// has another type, looking through $ref.
func typeMismatch(r *jsonschema.EvaluationResult) []string {
	if t := r.Errors["type"]; t != nil && t.Code == "type_mismatch" {
		return strings.Split(fmt.Sprint(t.Params["expected"]), ", ")
	}
	if r.Errors["$ref"] == nil && r.Errors["$dynamicRef"] == nil {
		return nil
	}
	for _, d := range r.Details {
		if d.EvaluationPath == "" && !d.IsValid() {
			return typeMismatch(d)
		}
	}
	return nil
}

// message renders one error as a phrase to follow a field's pointer.
func message(e *jsonschema.EvaluationError) string {
	p := func(k string) string { return fmt.Sprint(e.Params[k]) }
	switch e.Code {
	case "type_mismatch":
		return fmt.Sprintf("must be %s, not %s", orList(strings.Split(p("expected"), ", ")), p("received"))
	case "value_below_minimum":
		return "must be >= " + p("minimum")
	case "value_above_maximum":
		return "must be <= " + p("maximum")
	case "exclusive_minimum_mismatch":
		return "must be > " + p("exclusive_minimum")
	case "exclusive_maximum_mismatch":
		return "must be < " + p("exclusive_maximum")
	case "not_multiple_of":
		return "must be a multiple of " + p("divisor")
	case "pattern_mismatch":
		return "must match the pattern " + p("pattern")
	case "value_not_in_enum":
		if !strings.Contains(p("expected"), ", ") {
			return "must be " + p("expected")
		}
		return "must be one of: " + p("expected")
	case "const_mismatch", "const_mismatch_null":
		return "must be the one allowed value"
	case "string_too_short":
		return "must be at least " + p("min_length") + " characters long"
	case "string_too_long":
		return "must be at most " + p("max_length") + " characters long"
	case "items_too_short":
		return "must have at least " + p("min_items") + " items"
	case "items_too_long":
		return "must have at most " + p("max_items") + " items"
	case "too_few_properties":
		return "must have at least " + p("min_properties") + " properties"
	case "too_many_properties":
		return "must have at most " + p("max_properties") + " properties"
	case "unique_items_mismatch":
		return "must not repeat items"
	case "format_mismatch":
		return "must be a valid " + p("format")
	case "false_schema_mismatch":
		return "is not allowed"
	case "not_schema_mismatch":
		return "must not match the excluded form"
	case "invalid_json":
		return "is not valid JSON"
	}
	msg := e.Error()
	if msg == "" {
		return e.Keyword + " failed"
	}
	return strings.ToLower(msg[:1]) + msg[1:]
}

// quotedList reads the names in a required error's params: "'a'" or
// "'a', 'b'".
func quotedList(params map[string]any) []string {
	s, ok := params["property"].(string)
	if !ok {
		s, _ = params["properties"].(string)
	}
	if s == "" {
		return nil
	}
	parts := strings.Split(s, "', '")
	for i, p := range parts {
		parts[i] = strings.TrimSuffix(strings.TrimPrefix(p, "'"), "'")
	}
	return parts
}

// orList joins ["a", "b", "c"] as "a, b or c".
func orList(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// escape escapes one JSON pointer reference token (RFC 6901).
func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
