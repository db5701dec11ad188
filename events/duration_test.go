package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/loopgate/loopgate/events"
)

func TestDurationMarshalsAsAGoDurationString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		given time.Duration
		want  string
	}{
		{name: "zero", given: 0, want: `"0s"`},
		{name: "seconds", given: 30 * time.Second, want: `"30s"`},
		{name: "minutes and seconds", given: 90 * time.Second, want: `"1m30s"`},
		{name: "hours", given: 2 * time.Hour, want: `"2h0m0s"`},
		{name: "milliseconds", given: 1500 * time.Millisecond, want: `"1.5s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(events.Duration(tt.given))
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if string(b) != tt.want {
				t.Errorf("Marshal(%v) = %s, want %s", tt.given, b, tt.want)
			}
			var back events.Duration
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("Unmarshal(%s): %v", b, err)
			}
			if back.D() != tt.given {
				t.Errorf("round trip of %v = %v", tt.given, back.D())
			}
		})
	}
}

func TestDurationUnmarshal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		given   string
		want    time.Duration
		wantErr string
	}{
		{name: "seconds", given: `"90s"`, want: 90 * time.Second},
		{name: "minutes", given: `"2m"`, want: 2 * time.Minute},
		{name: "compound", given: `"1h30m"`, want: 90 * time.Minute},
		{name: "fraction", given: `"1.5s"`, want: 1500 * time.Millisecond},
		{name: "micro sign", given: `"250µs"`, want: 250 * time.Microsecond},
		{name: "bare zero", given: `"0"`, want: 0},

		{name: "a number", given: `90`, wantErr: `a duration must be a string like "30s"`},
		{name: "a boolean", given: `true`, wantErr: `a duration must be a string like "30s"`},
		{name: "an object", given: `{"s":90}`, wantErr: `a duration must be a string like "30s"`},
		{name: "null", given: `null`, wantErr: `duration`},
		{name: "empty string", given: `""`, wantErr: `duration ""`},
		{name: "no unit", given: `"90"`, wantErr: `duration "90"`},
		{name: "days are not a unit", given: `"1d"`, wantErr: `duration "1d"`},
		{name: "words", given: `"ninety seconds"`, wantErr: `duration "ninety seconds"`},
		{name: "a space inside", given: `"1m 30s"`, wantErr: `duration "1m 30s"`},
		{name: "negative", given: `"-5s"`, wantErr: `duration "-5s" (negative)`},
		{name: "negative compound", given: `"-1h30m"`, wantErr: `duration "-1h30m" (negative)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := events.Duration(time.Hour) // left alone on error
			err := json.Unmarshal([]byte(tt.given), &d)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Unmarshal(%s) error = %v, want it to contain %q", tt.given, err, tt.wantErr)
				}
				if d.D() != time.Hour {
					t.Errorf("Unmarshal(%s) failed but set the duration to %v", tt.given, d.D())
				}
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.given, err)
			}
			if d.D() != tt.want {
				t.Errorf("Unmarshal(%s) = %v, want %v", tt.given, d.D(), tt.want)
			}
		})
	}
}

func TestDurationInLimitsReadsFromJSONAndYAML(t *testing.T) {
	t.Parallel()
	var fromJSON events.Limits
	if err := json.Unmarshal([]byte(`{"max_steps":6,"max_active":"90s"}`), &fromJSON); err != nil {
		t.Fatalf("json: %v", err)
	}
	var fromYAML events.Limits
	if err := unmarshalYAML([]byte("max_steps: 6\nmax_active: 90s\n"), &fromYAML); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	want := events.Limits{MaxSteps: 6, MaxActive: events.Duration(90 * time.Second)}
	if fromJSON != want || fromYAML != want {
		t.Errorf("json = %+v, yaml = %+v, want %+v", fromJSON, fromYAML, want)
	}

	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"max_steps":6,"max_active":"1m30s"}` {
		t.Errorf("Marshal = %s", got)
	}
	if b, _ := json.Marshal(events.Limits{MaxSteps: 1}); strings.Contains(string(b), "max_active") {
		t.Errorf("an unset max_active is written: %s", b)
	}

	var bad events.Limits
	if err := unmarshalYAML([]byte("max_active: 90\n"), &bad); err == nil {
		t.Errorf("yaml max_active: 90 (no unit) = %+v, want an error", bad)
	}
}

// unmarshalYAML decodes YAML into v the way the config loader does: the
// document read as JSON, so v's UnmarshalJSON methods apply.
func unmarshalYAML(raw []byte, v any) error {
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// A bad duration inside a document is an *json.UnmarshalTypeError the
// decoder completes with the field's path: callers name the field from it.
func TestABadDurationNamesItsField(t *testing.T) {
	t.Parallel()
	var task events.Task
	err := json.Unmarshal([]byte(`{"task_id":"t","limits":{"max_active":"9999999999h"}}`), &task)
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		t.Fatalf("err = %T %v, want *json.UnmarshalTypeError", err, err)
	}
	if te.Field != "limits.max_active" || !strings.Contains(te.Value, `duration "9999999999h" (invalid duration`) {
		t.Errorf("Field = %q, Value = %q", te.Field, te.Value)
	}
}
