package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/events"
)

// A cancel message is a trust boundary: whatever its bytes, parsing it
// never panics, and a message it accepts is one the schema admits, with
// every member the handler relies on present.
func FuzzParseCancel(f *testing.F) {
	for _, seed := range []string{
		`{"run_id":"r-1","requested_by":{"id":"dev@cityops"},"reason":"stop"}`,
		`{"run_id":"r-1","requested_by":{"id":"dev@cityops"}}`,
		`{"run_id":"r-1","requested_by":{"id":""},"reason":"x"}`,
		`{"run_id":"r.1","requested_by":{"id":"a"},"reason":"x","extra":1}`,
		`{"run_id":"r-1","run_id":"r-2","requested_by":{"id":"a"},"reason":"x"}`,
		`not json`, `[]`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, errs := parseCancel(data)
		if errs != nil {
			if len(errs) == 0 {
				t.Fatal("refused with no error")
			}
			return
		}
		if m == nil || !events.ValidToken(m.RunID) || m.RequestedBy.ID == "" || m.Reason == "" {
			t.Fatalf("accepted %q as %+v", data, m)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, errs := parseCancel(again); errs != nil {
			t.Fatalf("accepted %q, but not its own encoding %s: %v", data, again, errs)
		}
	})
}

// Each refusal names what is wrong.
func TestParseCancelNamesTheField(t *testing.T) {
	tests := []struct {
		given string
		want  string
	}{
		{`{"run_id":"r-1","requested_by":{"id":"a"}}`, "reason"},
		{`{"run_id":"r-1","reason":"x"}`, "requested_by"},
		{`{"run_id":"r-1","requested_by":{"id":"a"},"reason":""}`, "/reason"},
		{`{"run_id":"r-1","requested_by":{"id":"a"},"reason":"x","by":"b"}`, "by"},
		{`{"run_id":"r 1","requested_by":{"id":"a"},"reason":"x"}`, "/run_id"},
		{`{"run_id":"r-1","requested_by":{"id":"a"},"reason":"x","reason":"y"}`, "repeats a member name"},
		{`not json`, "not valid JSON"},
		{`{"run_id":"r-1","requested_by":{"id":"a"},"reason":"` + strings.Repeat("x", maxCancelBytes) + `"}`, "over the limit"},
	}
	for _, tt := range tests {
		_, errs := parseCancel([]byte(tt.given))
		if got := fieldList(errs); errs == nil || !strings.Contains(got, tt.want) {
			t.Errorf("parseCancel(%.60s…) = %q, want an error naming %q", tt.given, got, tt.want)
		}
	}
}
