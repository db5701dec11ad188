package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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
