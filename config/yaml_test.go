package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestYAMLToJSONReadsTheCoreSchema(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		given string
		want  string
	}{
		{"YAML 1.1 booleans are strings", "{n: y, yes: no, on: off, Y: N, On: OFF}", `{"n":"y","yes":"no","on":"off","Y":"N","On":"OFF"}`},
		{"the core schema's booleans", "[true, True, TRUE, false, False, FALSE]", `[true,true,true,false,false,false]`},
		{"nulls", "{a: ~, b: null, c: NULL, d: }", `{"a":null,"b":null,"c":null,"d":null}`},
		{"integers", "[1, +2, -3, 010, 0o10, 0x1F, 18446744073709551616]", `[1,2,-3,10,8,31,18446744073709551616]`},
		{"not integers in YAML 1.2", "[1_000, 0b11, 0777x, 1:20]", `["1_000","0b11","0777x","1:20"]`},
		{"floats", "[1.5, .5, 1e3, -2., 0.50]", `[1.5,0.5,1000,-2,0.5]`},
		{"no timestamps", "d: 2024-01-01", `{"d":"2024-01-01"}`},
		{"quoted and tagged strings", `["true", 'on', !!str 5, !!str yes]`, `["true","on","5","yes"]`},
		{"block strings", "a: |\n  x\n  y\nb: >-\n  on\n  off\n", `{"a":"x\ny\n","b":"on off"}`},
		{"keys in the file's order", "{b: 1, a: 2, c: 3}", `{"b":1,"a":2,"c":3}`},
		{"keys are their text", "{1: a, true: b, null: c, 010: d}", `{"1":"a","true":"b","null":"c","010":"d"}`},
		{"HTML characters as themselves", `a: "<&>"`, `{"a":"<&>"}`},
		{"anchors and aliases", "a: &x {k: [v, w]}\nb: *x\nc: &s on\nd: *s", `{"a":{"k":["v","w"]},"b":{"k":["v","w"]},"c":"on","d":"on"}`},
		{"an alias as a key", "a: &k on\n*k : 1", `{"a":"on","on":1}`},
		{"merge: own keys win", "base: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}", `{"base":{"x":1,"y":2},"c":{"x":1,"y":3}}`},
		{"merge: the first mapping wins", "a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc: {z: 0, <<: [*a, *b]}", `{"a":{"x":1},"b":{"x":2,"y":2},"c":{"z":0,"x":1,"y":2}}`},
		{"a quoted << is a key", `{"<<": 1}`, `{"<<":1}`},
		{"JSON", `{"version": 1, "tools": [{"name": "x", "strict": true}]}`, `{"version":1,"tools":[{"name":"x","strict":true}]}`},
		{"empty", " \n# nothing\n", `null`},
		{"an empty document", "---\n", `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := yamlToJSON([]byte(tt.given))
			if err != nil {
				t.Fatalf("yamlToJSON(%q) error = %v", tt.given, err)
			}
			if string(got) != tt.want {
				t.Errorf("yamlToJSON(%q)\n got %s\nwant %s", tt.given, got, tt.want)
			}
		})
	}
}

func TestYAMLToJSONRefusesWhatJSONCannotSayNamingTheLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		given   string
		wantErr string
	}{
		{"duplicate key", "a: 1\nb: {k: 1,\n  k: 2}\n", `line 3: key "k" is already set at line 2`},
		{"duplicate key spelt differently", "a: 1\n'a': 2\n", `line 2: key "a" is already set at line 1`},
		{"two merge keys", "a: &a {x: 1}\nb: {<<: *a, <<: *a}", `line 2: key "<<" is already set at line 2`},
		{"second document", "a: 1\n---\nb: 2\n", "line 2: a second YAML document"},
		{"syntax", "a: [1\n", "line 1: did not find expected ',' or ']'"},
		{"alias inside its anchor", "a: &x [1, *x]\n", "line 1: alias *x is inside its own anchor"},
		{"merge inside its anchor", "a: &x {<<: *x}\n", "line 1: alias *x is inside its own anchor"},
		{"merge of a list", "a: &l [1]\nb: {<<: *l}\n", "line 1: a merge key (<<) takes a mapping or a list of mappings"},
		{"unknown anchor", "a: *x\n", "unknown anchor 'x' referenced"},
		{"mapping as a key", "? [a]\n: 1\n", "line 1: a key must be a plain value"},
		{"infinity", "a: .inf\n", "line 1: .inf is not a number JSON can hold"},
		{"not a number", "a: .NaN\n", "line 1: .NaN is not a number JSON can hold"},
		{"past float64", "a: 1e400\n", "line 1: 1e400 is not a number JSON can hold"},
		{"tag outside the core schema", "a: !!binary aGk=\n", "line 1: tag !!binary is not supported"},
		{"local tag", "a: !secret x\n", "line 1: tag !secret is not supported"},
		{"tag against its value", "a: !!bool yes\n", `line 1: "yes" is not a !!bool`},
		{"tagged mapping", "a: !!set {x: ~}\n", "line 1: tag !!set is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := yamlToJSON([]byte(tt.given))
			if err == nil {
				t.Fatalf("yamlToJSON(%q) = %s, want an error", tt.given, got)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("yamlToJSON(%q) error = %q\nwant it to contain %q", tt.given, err, tt.wantErr)
			}
		})
	}
}

// Nested aliases (a "billion laughs") stop at maxYAMLJSON instead of
// filling memory.
func TestYAMLToJSONBoundsAliasExpansion(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [*l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d]\n", i, i, i-1)
	}
	start := time.Now()
	_, err := yamlToJSON([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "aliases expand the config past 16 MiB") {
		t.Errorf("yamlToJSON(billion laughs) error = %v, want the expansion bound", err)
	}
	t.Logf("refused in %v", time.Since(start))
}
