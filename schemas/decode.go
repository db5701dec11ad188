package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/loopgate/loopgate/events"
)

// DecodeError explains why a document the schema accepted still does not
// decode into its Go type: a number with a fraction or past the range of
// its field ("max_steps": 3.0, 1e20), a duration time.ParseDuration
// refuses or cannot hold. Field is the JSON pointer of the value, read
// from the decoder's path; encoding/json's path leaves out array indices,
// so a value inside an array is named by its array's pointer and its own
// property ("/tools/timeout"). An error of another kind has Field "".
func DecodeError(err error) events.FieldError {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type == nil {
		return events.FieldError{Message: "does not decode: " + err.Error()}
	}
	field := ""
	if te.Field != "" {
		parts := strings.Split(te.Field, ".")
		for i, p := range parts {
			parts[i] = escape(p)
		}
		field = "/" + strings.Join(parts, "/")
	}
	if te.Type == reflect.TypeFor[events.Duration]() {
		return events.FieldError{Field: field, Message: "is not a usable duration: " + te.Value}
	}
	return events.FieldError{Field: field, Message: fmt.Sprintf("%s does not fit: want %s", te.Value, wanted(te.Type))}
}

// wanted names, for an operator, the values a Go type holds.
func wanted(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number written without a fraction or exponent, within range"
	case reflect.Float32, reflect.Float64:
		return "a number within range"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// DecodeErrorIn is DecodeError for an error from decoding doc. Where
// encoding/json's path leaves out a map key or an array index
// ("/agents/limits/max_steps"), it finds in doc the value that does not
// decode into the field's type and names it by its full pointer
// ("/agents/helper/limits/max_steps", "/tools/0/timeout"). When doc holds
// no such value it answers as DecodeError does.
func DecodeErrorIn(doc []byte, err error) events.FieldError {
	fe := DecodeError(err)
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type == nil || te.Field == "" {
		return fe
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber() // 3.0 stays 3.0, which an int refuses
	var root any
	if dec.Decode(&root) != nil {
		return fe
	}
	if at, ok := locate(root, strings.Split(te.Field, "."), "", te.Type); ok {
		fe.Field = at
	}
	return fe
}

// locate walks v along path, stepping also through any map key or array
// index the path leaves out, to a value that t refuses; it returns that
// value's pointer.
func locate(v any, path []string, at string, t reflect.Type) (string, bool) {
	if len(path) == 0 {
		b, err := json.Marshal(v)
		if err == nil && json.Unmarshal(b, reflect.New(t).Interface()) != nil {
			return at, true
		}
		return "", false
	}
	switch n := v.(type) {
	case map[string]any:
		if c, ok := n[path[0]]; ok {
			if p, ok := locate(c, path[1:], at+"/"+escape(path[0]), t); ok {
				return p, true
			}
		}
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if p, ok := locate(n[k], path, at+"/"+escape(k), t); ok {
				return p, true
			}
		}
	case []any:
		for i, c := range n {
			if p, ok := locate(c, path, fmt.Sprintf("%s/%d", at, i), t); ok {
				return p, true
			}
		}
	}
	return "", false
}
