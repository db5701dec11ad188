package config_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/schemas"
)

// docs/configuration.md is the operators' reference: every key
// config.schema.json accepts is named there in backticks, alone
// (`max_steps`) or as the last part of a path (`server.ack_wait`). A key
// added to the schema without a word for operators fails here.
func TestTheDocsNameEveryConfigKey(t *testing.T) {
	page, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section, ok := between(string(page), "# Configuration\n", "")
	if !ok {
		t.Fatal("docs/configuration.md does not start with \"# Configuration\"")
	}
	raw, err := schemas.Bytes("config")
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	defs, _ := root["$defs"].(map[string]any)
	keys := map[string]string{} // key → a path it has in the schema
	var walk func(path string, node map[string]any, depth int)
	walk = func(path string, node map[string]any, depth int) {
		if depth > 20 {
			t.Fatalf("%s: the schema nests deeper than this test follows", path)
		}
		for {
			ref, ok := node["$ref"].(string)
			if !ok {
				break
			}
			node, _ = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		props, _ := node["properties"].(map[string]any)
		for name, sub := range props {
			p := strings.TrimPrefix(path+"."+name, ".")
			if _, seen := keys[name]; !seen {
				keys[name] = p
			}
			if m, ok := sub.(map[string]any); ok {
				walk(p, m, depth+1)
			}
		}
		for _, kw := range []string{"items", "additionalProperties"} {
			if m, ok := node[kw].(map[string]any); ok {
				walk(path+"[]", m, depth+1)
			}
		}
		for _, kw := range []string{"oneOf", "anyOf", "allOf"} {
			branches, _ := node[kw].([]any)
			for _, b := range branches {
				if m, ok := b.(map[string]any); ok {
					walk(path, m, depth+1)
				}
			}
		}
	}
	walk("", root, 0)
	if len(keys) < 60 {
		t.Fatalf("found %d keys in config.schema.json, want the 60 or more it has", len(keys))
	}
	for name, path := range keys {
		named := regexp.MustCompile("`(?:[^`\\s]*[.])?" + regexp.QuoteMeta(name) + "(?:\\[\\])?(?:[.][^`\\s]*)?`")
		if !named.MatchString(section) {
			t.Errorf("docs/configuration.md does not name %s (`%s`)", path, name)
		}
	}
}

// between returns the text of s from after start to before end (to the
// end of s when end is "").
func between(s, start, end string) (string, bool) {
	_, rest, ok := strings.Cut(s, start)
	if !ok {
		return "", false
	}
	if end == "" {
		return rest, true
	}
	in, _, ok := strings.Cut(rest, end)
	return in, ok
}
