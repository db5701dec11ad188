package events

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Duration is a time.Duration that reads and writes as a Go duration string
// ("90s", "2m") in JSON and YAML, the form operators type.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts a duration string. Its errors are
// *json.UnmarshalTypeError, which the decoder completes with the path of
// the field, so a caller can name the field at fault (schemas.DecodeError);
// Value says what was wrong with it.
func (d *Duration) UnmarshalJSON(b []byte) error {
	bad := func(what string) error {
		return &json.UnmarshalTypeError{Value: what, Type: reflect.TypeFor[Duration]()}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return bad(fmt.Sprintf("%s (a duration must be a string like \"30s\")", b))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return bad(fmt.Sprintf("duration %q (%v)", s, strings.TrimPrefix(err.Error(), "time: ")))
	}
	if v < 0 {
		return bad(fmt.Sprintf("duration %q (negative)", s))
	}
	*d = Duration(v)
	return nil
}
