package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// complaints is a lookup result like CityOps': rows with fields the view
// must keep from the model.
func complaints(n int) string {
	rows := make([]string, n)
	for i := range rows {
		rows[i] = fmt.Sprintf(`{"request_id":"SR-%d","days_open":%d,"resident":"Resident %d","phone":"555-01%02d"}`, 10421+i, 9-i, i, i)
	}
	return "[" + strings.Join(rows, ",") + "]"
}

func TestViewApply(t *testing.T) {
	t.Parallel()

	lookup := View{Fields: []string{"request_id", "days_open"}, MaxItems: 5}
	tests := []struct {
		name    string
		view    View
		given   string
		want    string
		wantErr error
	}{
		{
			name:  "CityOps lookup view",
			view:  lookup,
			given: complaints(3),
			want:  `{"count":3,"items":[{"request_id":"SR-10421","days_open":9},{"request_id":"SR-10422","days_open":8},{"request_id":"SR-10423","days_open":7}],"truncated":false}`,
		},
		{
			name:  "more items than MaxItems are counted and cut",
			view:  View{Fields: []string{"request_id"}, MaxItems: 2},
			given: complaints(4),
			want:  `{"count":4,"items":[{"request_id":"SR-10421"},{"request_id":"SR-10422"}],"truncated":true}`,
		},
		{
			name:  "exactly MaxItems is not truncated",
			view:  View{Fields: []string{"request_id"}, MaxItems: 2},
			given: complaints(2),
			want:  `{"count":2,"items":[{"request_id":"SR-10421"},{"request_id":"SR-10422"}],"truncated":false}`,
		},
		{
			name:  "empty array with MaxItems",
			view:  lookup,
			given: `[]`,
			want:  `{"count":0,"items":[],"truncated":false}`,
		},
		{
			name:  "array without MaxItems stays an array",
			view:  View{Fields: []string{"days_open"}},
			given: complaints(2),
			want:  `[{"days_open":9},{"days_open":8}]`,
		},
		{
			name:  "MaxItems without Fields keeps whole items",
			view:  View{MaxItems: 1},
			given: `[{"b":1,"a":2},{"c":3}]`,
			want:  `{"count":2,"items":[{"b":1,"a":2}],"truncated":true}`,
		},
		{
			name:  "object keeps only Fields, in their order",
			view:  View{Fields: []string{"status", "id"}},
			given: `{"id":"SR-1","phone":"555","status":"open","notes":{"x":1}}`,
			want:  `{"status":"open","id":"SR-1"}`,
		},
		{
			name:  "object without Fields is compacted whole",
			view:  View{},
			given: "{ \"b\" : 1,\n \"a\" : [1, 2] }",
			want:  `{"b":1,"a":[1,2]}`,
		},
		{
			name:  "MaxItems does not apply to an object",
			view:  View{MaxItems: 1},
			given: `{"rows":[1,2,3]}`,
			want:  `{"rows":[1,2,3]}`,
		},
		{
			name:  "missing field is left out, not null",
			view:  View{Fields: []string{"id", "missing"}},
			given: `{"id":1}`,
			want:  `{"id":1}`,
		},
		{
			name:  "a field named twice is written once",
			view:  View{Fields: []string{"id", "id"}},
			given: `{"id":1}`,
			want:  `{"id":1}`,
		},
		{
			name:  "kept values are whole and compacted",
			view:  View{Fields: []string{"a"}},
			given: `{"a": {"phone": "555", "n": [1, 2]}, "b": 2}`,
			want:  `{"a":{"phone":"555","n":[1,2]}}`,
		},
		{
			name:  "scalar items pass through, nested arrays are projected",
			view:  View{Fields: []string{"id"}},
			given: `[1,"x",null,[{"id":2,"phone":"555"}],{"id":3,"phone":"555"}]`,
			want:  `[1,"x",null,[{"id":2}],{"id":3}]`,
		},
		{name: "scalar passes through", view: lookup, given: ` "done" `, want: `"done"`},
		{name: "number passes through as written", view: lookup, given: `1.50`, want: `1.50`},
		{name: "HTML characters are not escaped", view: View{Fields: []string{"a<b"}}, given: `{"a<b":"x&y"}`, want: `{"a<b":"x&y"}`},
		{
			name:  "Bound's wrapper is read as the array it shortened",
			view:  lookup,
			given: `{"items":[{"request_id":"SR-1","days_open":9,"phone":"555"}],"total":40,"truncated":true}`,
			want:  `{"count":40,"items":[{"request_id":"SR-1","days_open":9}],"truncated":true}`,
		},
		{
			name:  "Bound's wrapper without MaxItems stays a wrapper",
			view:  View{Fields: []string{"request_id"}},
			given: `{"items":[{"request_id":"SR-1","phone":"555"}],"total":40,"truncated":true}`,
			want:  `{"items":[{"request_id":"SR-1"}],"total":40,"truncated":true}`,
		},
		{
			name:  "an object that only looks like the wrapper is an object",
			view:  View{Fields: []string{"items"}},
			given: `{"items":[1],"total":40,"truncated":false}`,
			want:  `{"items":[1]}`,
		},
		{
			name:  "Bound's last resort passes through",
			view:  lookup,
			given: `{"truncated":true,"omitted_bytes":123456}`,
			want:  `{"truncated":true,"omitted_bytes":123456}`,
		},
		{name: "invalid JSON", view: lookup, given: `{"a":`, wantErr: ErrInvalidJSON},
		{name: "empty result", view: lookup, given: ``, wantErr: ErrInvalidJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.view.Apply([]byte(tt.given))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply(%s) error = %v, want %v", tt.given, err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("Apply(%s)\n got %s\nwant %s", tt.given, got, tt.want)
			}
		})
	}
}

func TestViewApplyNeverShowsFieldsOutsideTheView(t *testing.T) {
	t.Parallel()

	view := View{Fields: []string{"request_id", "days_open"}, MaxItems: 5}
	for _, max := range []int{100, 300, 1 << 20} {
		bounded, _ := Bound([]byte(complaints(50)), max)
		got, err := view.Apply(bounded)
		if err != nil {
			t.Fatalf("Apply(Bound(_, %d)): %v", max, err)
		}
		for _, leak := range []string{"resident", "phone", "555-"} {
			if bytes.Contains(got, []byte(leak)) {
				t.Errorf("Apply(Bound(_, %d)) = %s shows %q", max, got, leak)
			}
		}
	}
}

func TestBound(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name          string
		given         string
		max           int
		want          string
		wantTruncated bool
	}{
		{
			name:  "fits: returned as is, whitespace and all",
			given: `{ "a" : [1, 2] }`,
			max:   16,
			want:  `{ "a" : [1, 2] }`,
		},
		{
			name:  "fits once compacted: nothing is lost",
			given: `{ "a" : [1, 2] }`,
			max:   11,
			want:  `{"a":[1,2]}`,
		},
		{
			name:          "top-level array is wrapped",
			given:         `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30]`,
			max:           64,
			want:          `{"items":[1,2,3,4,5,6,7,8,9,10,11],"total":30,"truncated":true}`,
			wantTruncated: true,
		},
		{
			name:          "object holding a shortened array is marked",
			given:         `{"rows":[10,20,30,40,50,60,70,80,90,100,110,120,130,140,150,160,170,180,190,200]}`,
			max:           64,
			want:          `{"rows":[10,20,30,40,50,60,70,80],"truncated":true,"total":20}`,
			wantTruncated: true,
		},
		{
			name:          "the view's own truncated flag is set, not repeated",
			given:         `{"count":20,"items":[10,20,30,40,50,60,70,80,90,100,110,120,130,140,150,160,170,180,190,200],"truncated":false}`,
			max:           80,
			want:          `{"count":20,"items":[10,20,30,40,50,60,70,80,90],"truncated":true,"total":20}`,
			wantTruncated: true,
		},
		{
			name:          "an object with its own total keeps it; the array is wrapped",
			given:         `{"total":7,"rows":[10,20,30,40,50,60,70,80,90,100,110,120,130,140,150,160,170,180,190,200]}`,
			max:           80,
			want:          `{"total":7,"rows":{"items":[10,20,30,40,50,60,70],"total":20,"truncated":true}}`,
			wantTruncated: true,
		},
		{
			name:          "several shortened arrays get totals",
			given:         `{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20],"b":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}`,
			max:           80,
			want:          `{"a":[1,2,3,4,5,6],"b":[1,2,3,4,5,6],"truncated":true,"totals":{"a":20,"b":20}}`,
			wantTruncated: true,
		},
		{
			name:          "long string is cut with a marker",
			given:         `{"id":1,"body":"` + strings.Repeat("abcdefghij", 20) + `"}`,
			max:           64,
			want:          `{"id":1,"body":"abcdefghijabcdefghijabcdefghija…[+169 bytes]"}`,
			wantTruncated: true,
		},
		{
			name:          "string is cut on a rune boundary",
			given:         `"` + strings.Repeat("é", 100) + `"`,
			max:           64,
			want:          `"` + strings.Repeat("é", 23) + `…[+154 bytes]"`,
			wantTruncated: true,
		},
		{
			name:          "the last item of an array is shrunk rather than dropped",
			given:         `[{"id":1,"body":"` + strings.Repeat("x", 200) + `"}]`,
			max:           100,
			want:          `[{"id":1,"body":"` + strings.Repeat("x", 65) + `…[+135 bytes]"}]`,
			wantTruncated: true,
		},
		{
			name:          "a number too long to fit gives the last resort",
			given:         strings.Repeat("1", 80),
			max:           64,
			want:          `{"truncated":true,"omitted_bytes":80}`,
			wantTruncated: true,
		},
		{
			name:          "invalid JSON over max gives the last resort",
			given:         `{"a":` + strings.Repeat(" ", 100),
			max:           64,
			want:          `{"truncated":true,"omitted_bytes":105}`,
			wantTruncated: true,
		},
		{
			name:          "invalid JSON that fits is not Bound's business",
			given:         `{"a":`,
			max:           64,
			want:          `{"a":`,
			wantTruncated: false,
		},
		{
			name:          "a max below the last resort cannot be honoured",
			given:         `{"a":1,"b":2}`,
			max:           10,
			want:          `{"truncated":true,"omitted_bytes":13}`,
			wantTruncated: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, truncated := Bound([]byte(tt.given), tt.max)
			if string(got) != tt.want || truncated != tt.wantTruncated {
				t.Errorf("Bound(%s, %d)\n got %s, %v\nwant %s, %v", tt.given, tt.max, got, truncated, tt.want, tt.wantTruncated)
			}
			if tt.wantTruncated && !json.Valid(got) {
				t.Errorf("Bound(%s, %d) = %s is not valid JSON", tt.given, tt.max, got)
			}
		})
	}
}

func TestBoundSharesTheBudgetAcrossAnObject(t *testing.T) {
	t.Parallel()

	doc := `{"summary":"` + strings.Repeat("s", 2000) + `","rows":` + complaints(40) + `}`
	got, truncated := Bound([]byte(doc), 1000)
	if !truncated || len(got) > 1000 {
		t.Fatalf("Bound = %d bytes, truncated %v; want at most 1000, true", len(got), truncated)
	}
	var v struct {
		Summary   string            `json:"summary"`
		Rows      []json.RawMessage `json:"rows"`
		Truncated bool              `json:"truncated"`
		Total     int               `json:"total"`
	}
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("Bound output %s: %v", got, err)
	}
	// Neither member may starve the other: both keep a fair share.
	if len(v.Summary) < 300 || len(v.Rows) < 3 {
		t.Errorf("summary %d bytes, %d rows; want both kept in part: %s", len(v.Summary), len(v.Rows), got)
	}
	if !strings.HasSuffix(v.Summary, " bytes]") || !v.Truncated || v.Total != 40 {
		t.Errorf("marks missing: %s", got)
	}
}

func TestBoundObservationLikeTheWorkerMakes(t *testing.T) {
	t.Parallel()

	view := View{Fields: []string{"request_id", "days_open"}, MaxItems: 50}
	data, err := view.Apply([]byte(complaints(50)))
	if err != nil {
		t.Fatal(err)
	}
	obs := `{"tool":"lookup_complaints","status":"ok","data":` + string(data) + `}`
	got, truncated := Bound([]byte(obs), 512)
	if !truncated || len(got) > 512 {
		t.Fatalf("Bound = %d bytes, %v", len(got), truncated)
	}
	var v struct {
		Tool string `json:"tool"`
		Data struct {
			Count     int               `json:"count"`
			Items     []json.RawMessage `json:"items"`
			Truncated bool              `json:"truncated"`
			Total     int               `json:"total"`
		} `json:"data"`
	}
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if v.Tool != "lookup_complaints" || v.Data.Count != 50 || !v.Data.Truncated || v.Data.Total != 50 || len(v.Data.Items) == 0 {
		t.Errorf("Bound lost the frame: %s", got)
	}
}

func TestBoundSizeAccountingMatchesEncoding(t *testing.T) {
	t.Parallel()

	docs := []string{
		complaints(30),
		`{"truncated":false,"a":[1,2,3,4,5,6,7,8,9],"b":["` + strings.Repeat(`\n\"\\\u0001é`, 30) + `"]}`,
		`[[[1,2,3],[4,5,6]],{"k":[7,8,9]}]`,
		`{"\u2028key":"\u0000` + strings.Repeat("<&>", 50) + `"}`,
	}
	for _, doc := range docs {
		for max := 0; max < len(doc)+2; max += 7 {
			root, err := parseTree([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			shrink(root, max)
			if got := len(root.encode(nil)); got != root.size {
				t.Fatalf("shrink(%s, %d): size %d, encoding %d bytes: %s", doc, max, root.size, got, root.encode(nil))
			}
		}
	}
}

func FuzzBound(f *testing.F) {
	f.Add([]byte(complaints(5)), 200)
	f.Add([]byte(`{"count":3,"items":[{"request_id":"SR-10421","days_open":9}],"truncated":false}`), 64)
	f.Add([]byte(`{"a":"`+strings.Repeat("é\n", 40)+`","b":[1,2,3]}`), 64)
	f.Add([]byte(`[[["x","y"],{"total":1,"t":[1,2]}]]`), 30)
	f.Add([]byte(`{"truncated":null,"x":[1,2,3,4,5,6,7,8,9,10]}`), 20)
	f.Fuzz(func(t *testing.T, doc []byte, max int) {
		max %= 1 << 12
		got, truncated := Bound(doc, max)
		if len(doc) <= max {
			if !bytes.Equal(got, doc) || truncated {
				t.Fatalf("Bound(%q, %d) changed a document that fits: %q", doc, max, got)
			}
			return
		}
		if !json.Valid(got) || !utf8.Valid(got) {
			t.Fatalf("Bound(%q, %d) = %q is not valid JSON", doc, max, got)
		}
		if max >= 64 && len(got) > max {
			t.Fatalf("Bound(%q, %d) = %d bytes: %q", doc, max, len(got), got)
		}
		if !json.Valid(doc) {
			return
		}
		root, err := parseTree(doc)
		if err != nil {
			t.Fatal(err)
		}
		shrink(root, max)
		if enc := root.encode(nil); len(enc) != root.size {
			t.Fatalf("size %d, encoding %d bytes: %q", root.size, len(enc), enc)
		}
	})
}
