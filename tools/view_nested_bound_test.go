package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Apply runs on Bound's output and keeps the shape of Apply on the whole
// result. An array nested in an array that Bound shortens becomes the
// wrapper {"items":[…],"total":N,"truncated":true}. Apply used to
// recognise that wrapper only at the top level, so the nested one was
// projected as an object, to {}, and every item in it was lost. Now it is
// kept as a wrapper with its items projected.
func TestApplyKeepsNestedBoundArrays(t *testing.T) {
	t.Parallel()
	var rows []string
	for i := range 200 {
		rows = append(rows, fmt.Sprintf(`{"request_id":"SR-%05d","phone":"555-%04d","notes":"%s"}`, i, i, strings.Repeat("n", 40)))
	}
	doc := `[[` + strings.Join(rows, ",") + `]]`
	bounded, truncated := Bound([]byte(doc), 2048)
	if !truncated {
		t.Fatalf("precondition: Bound did not cut the document")
	}
	for _, view := range []View{{Fields: []string{"request_id"}}, {Fields: []string{"request_id"}, MaxItems: 5}} {
		got, err := view.Apply(bounded)
		if err != nil {
			t.Fatal(err)
		}
		// Without MaxItems the array of one wrapper; with it, that array as
		// {"count":1,"items":[…],"truncated":false}.
		outer := got
		if view.MaxItems > 0 {
			var w struct{ Items json.RawMessage }
			if err := json.Unmarshal(got, &w); err != nil {
				t.Fatalf("Apply(Bound(doc)) = %s: %v", got, err)
			}
			outer = w.Items
		}
		var shape []struct {
			Items     []map[string]string
			Total     int
			Truncated bool
		}
		if err := json.Unmarshal(outer, &shape); err != nil {
			t.Fatalf("%+v.Apply(Bound(doc)) = %.300s…: %v", view, got, err)
		}
		if len(shape) != 1 || shape[0].Total != 200 || !shape[0].Truncated || len(shape[0].Items) == 0 {
			t.Fatalf("%+v.Apply(Bound(doc)) = %.300s…\nBound(doc) = %.300s…\nwant one wrapper of 200 rows with the first rows in it", view, got, bounded)
		}
		for i, item := range shape[0].Items {
			if want := fmt.Sprintf("SR-%05d", i); len(item) != 1 || item["request_id"] != want {
				t.Fatalf("%+v.Apply(Bound(doc)) item %d = %v, want only request_id %s", view, i, item, want)
			}
		}
		if bytes.Contains(got, []byte("555-")) || bytes.Contains(got, []byte("notes")) {
			t.Fatalf("%+v.Apply(Bound(doc)) = %s shows a field outside the view", view, got)
		}
	}
}

// A tool's own item that looks like Bound's wrapper is read as one only
// when it is exactly one; either way no member outside Fields survives,
// and nothing but a count comes through "total".
func TestApplyNestedWrapperLookAlikesShowNoOtherFields(t *testing.T) {
	t.Parallel()
	view := View{Fields: []string{"request_id"}}
	tests := []struct {
		name  string
		given string
		want  string
	}{
		{
			name:  "exactly the wrapper: its items are projected",
			given: `[{"items":[{"request_id":"SR-1","phone":"555-0100"}],"total":3,"truncated":true}]`,
			want:  `[{"items":[{"request_id":"SR-1"}],"total":3,"truncated":true}]`,
		},
		{
			name:  "a wrapper in a wrapper",
			given: `[{"items":[{"items":[{"request_id":"SR-1","phone":"555-0100"}],"total":9,"truncated":true}],"total":2,"truncated":true}]`,
			want:  `[{"items":[{"items":[{"request_id":"SR-1"}],"total":9,"truncated":true}],"total":2,"truncated":true}]`,
		},
		{
			name:  "a fourth member: an object",
			given: `[{"items":[{"request_id":"SR-1"}],"total":3,"truncated":true,"phone":"555-0100"}]`,
			want:  `[{}]`,
		},
		{
			name:  "not truncated: an object",
			given: `[{"items":[{"request_id":"SR-1"}],"total":3,"truncated":false}]`,
			want:  `[{}]`,
		},
		{
			name:  "items not an array: an object",
			given: `[{"items":"555-0100","total":3,"truncated":true}]`,
			want:  `[{}]`,
		},
		{
			name:  "total not a count: an object",
			given: `[{"items":[],"total":"555-0100","truncated":true}]`,
			want:  `[{}]`,
		},
		{
			name:  "total below the items: an object",
			given: `[{"items":[{"request_id":"SR-1"},{"request_id":"SR-2"}],"total":1,"truncated":true}]`,
			want:  `[{}]`,
		},
		{
			name:  "a wrapper as a member's value: kept whole when named, dropped when not",
			given: `[{"request_id":{"items":[{"phone":"555-0100"}],"total":3,"truncated":true},"rows":{"items":[{"phone":"555-0199"}],"total":3,"truncated":true}}]`,
			want:  `[{"request_id":{"items":[{"phone":"555-0100"}],"total":3,"truncated":true}}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := view.Apply([]byte(tt.given))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Apply(%s)\n got %s\nwant %s", tt.given, got, tt.want)
			}
		})
	}
}
