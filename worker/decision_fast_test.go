package worker

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// decisionSeeds are model outputs around the edges of the decision
// schema, for the fast path's tests and fuzz target.
var decisionSeeds = []string{
	`{"tool_calls":[{"tool":"lookup_complaints","args":{"limit":5}}]}`,
	`{"tool_calls":[{"tool":"get_procedure","args":{"topic":"noise"},"provider_id":"call_1"},{"tool":"x","args":{ "a" : [1, 2.5e3, null, "é"] }}]}`,
	`{"final_answer":{"summary":"done"}}`,
	`{"final_answer":{"summary":"done","actions_taken":[],"drafts_created":["escalation-1.txt"]}}`,
	`{"tool\u005fcalls":[{"tool":"a","args":{}}]}`,
	`{"tool_calls":[{"tool":"a","args":{}}],"final_answer":{"summary":"both"}}`,
	`{}`,
	`I think {`,
	`{"tool_calls":[]}`,
	`{"tool_calls":[{"tool":"a","args":[]}]}`,
	`{"tool_calls":[{"tool":"","args":{}}]}`,
	`{"tool_calls":[{"tool":"a"}]}`,
	`{"tool_calls":[{"tool":"a","args":{},"Tool":"b"}]}`,
	`{"tool_calls":[{"tool":"a","args":{},"tool":"b"}]}`,
	`{"tool_calls":[{"tool":"a","args":{},"provider_id":null}]}`,
	`{"final_answer":{"summary":""}}`,
	`{"final_answer":{"summary":"ok","actions_taken":[1]}}`,
	`{"final_answer":{"summary":"ok"}} {}`,
	`{"final_answer":{"summary":"ok"},"note":"x"}`,
	`{"final_answer":null}`,
	`{"final_answer":{"summary":"` + strings.Repeat("é", 16384) + `"}}`,
	`{"final_answer":{"summary":"` + strings.Repeat("é", 16385) + `"}}`,
	`{"tool_calls":[` + strings.Repeat(`{"tool":"a","args":{}},`, 15) + `{"tool":"a","args":{}}]}`,
	`{"tool_calls":[` + strings.Repeat(`{"tool":"a","args":{}},`, 16) + `{"tool":"a","args":{}}]}`,
	"{\"final_answer\":{\"summary\":\"bad \xff utf-8\"}}",
	`{"final_answer":{"summary":"lone \ud800 surrogate"}}`,
}

// TestFastDecisionReadsPlainDecisions: the decisions models send every
// turn take the fast path (else it would save nothing, silently), and
// what it refuses still gets the schema's verdict and its field errors.
func TestFastDecisionReadsPlainDecisions(t *testing.T) {
	p, err := newDecisionParser()
	if err != nil {
		t.Fatal(err)
	}
	fast := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 20: true, 22: true}
	for i, out := range decisionSeeds {
		w, ok := fastDecision([]byte(out))
		if ok != fast[i] {
			t.Errorf("seed %d: fast path took it: %v, want %v: %.80s", i, ok, fast[i], out)
			continue
		}
		slow, errs := p.validate([]byte(out))
		if ok && (errs != nil || !reflect.DeepEqual(w, slow)) {
			t.Errorf("seed %d: fast path read %+v, the schema path %+v (errors %v)", i, w, slow, errs)
		}
	}
	// What the fast path refuses is decided by the schema, fields named.
	d, errs := p.parse([]byte(`{"tool_calls":[{"tool":"","args":{}}]}`), 1)
	if d != nil || len(errs) == 0 || !strings.Contains(errs[0].Field, "tool") {
		t.Errorf("an empty tool name: decision %v, errors %v; want the field named", d, errs)
	}
}

// FuzzFastDecisionAgreesWithTheSchema: the fast path never accepts a
// decision the schema refuses, and decodes what it accepts exactly as
// the schema path does.
func FuzzFastDecisionAgreesWithTheSchema(f *testing.F) {
	for _, s := range decisionSeeds {
		f.Add([]byte(s))
	}
	p, err := newDecisionParser()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		out = bytes.TrimSpace(out)
		w, ok := fastDecision(out)
		if !ok {
			return
		}
		slow, errs := p.validate(out)
		if errs != nil {
			t.Fatalf("fast path accepted what the schema refuses (%v): %s", errs, out)
		}
		if !reflect.DeepEqual(w, slow) {
			t.Fatalf("fast path read %+v, the schema path %+v: %s", w, slow, out)
		}
	})
}
