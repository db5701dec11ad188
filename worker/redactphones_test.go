package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// European phone numbers, written internationally with spaces and
// nationally, and an IBAN, in a read tool's result, are in no stored
// event and in no request to the model; a request id that looks like
// digits stays as it was.
func TestEuropeanPhoneNumbersAndIBANsInAToolResultAreRedacted(t *testing.T) {
	t.Parallel()
	pii := []string{
		"+49 30 12345678", "+33 1 23 45 67 89", "+44 20 7946 0958", // E.164 with spaces
		"030 12345678", "01 23 45 67 89", "020 7946 0958", // national
		"DE89 3704 0044 0532 0130 00",
	}
	// What must not be left of them either: their subscriber numbers.
	digits := []string{"12345678", "23 45 67 89", "7946 0958", "3704 0044", "0532 0130"}
	var calls atomic.Int32
	var sent requestLog
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("resident_lookup", tools.Read, false)},
		builtins: tools.Builtins{"resident_lookup": func(context.Context, tools.Call) (any, error) {
			calls.Add(1)
			return map[string]any{
				"request_id": "311-2024-000123",
				"residents": []map[string]string{
					{"name": "Ines Marlow", "phone": pii[0], "home": pii[3]},
					{"name": "Paul Adeyemi", "phone": pii[1], "home": pii[4]},
					{"name": "Tomasz Wren", "phone": pii[2], "home": pii[5]},
				},
				"note": "refund to " + pii[6] + " once the case closes",
			}, nil
		}},
		roles:  map[string]config.Role{"operator": {Call: []string{"resident_lookup", "lookup_complaints"}}},
		agents: map[string]config.Profile{"residents": profile("resident_lookup")},
		scripts: map[string]model.Model{"residents": sent.recording(t, scripted(t,
			`{"tool_calls":[{"tool":"resident_lookup","args":{}}]}`,
			`{"final_answer":{"summary":"three residents found"}}`))},
	})
	evs := b.waitEnd(b.submit(task("eu-phones-1", "residents")))
	assertTrail(t, evs, concat([]string{"started"}, okStep("resident_lookup"), []string{"proposed:final", "finished:done"}))
	if n := calls.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
	reqs := sent.requests()
	if len(reqs) != 2 {
		t.Fatalf("the model was asked %d times, want 2", len(reqs))
	}
	for _, s := range append(pii, digits...) {
		if got := holding(evs, s); len(got) > 0 {
			t.Errorf("the stored events %v hold %q", got, s)
		}
		for i, r := range reqs {
			if strings.Contains(r, s) {
				t.Errorf("the model's request %d holds %q: %s", i+1, s, r)
			}
		}
		if strings.Contains(b.logs.String(), s) {
			t.Errorf("the log holds %q", s)
		}
	}
	x := last[events.ExecutedData](t, evs, events.TypeExecuted)
	if got := strings.Count(string(x.Result), "[phone]"); got != 6 || !strings.Contains(string(x.Result), "[iban]") {
		t.Errorf("the executed result has %d phone markers, want 6, and an IBAN marker: %s", got, x.Result)
	}
	obs := string(last[events.ObservedData](t, evs, events.TypeObserved).Observation)
	if strings.Count(obs, "[phone]") != 6 || !strings.Contains(obs, "[iban]") || !strings.Contains(obs, "311-2024-000123") {
		t.Errorf("the observation is not the result redacted, its request id kept: %s", obs)
	}
	if !strings.Contains(reqs[1], "[iban]") || !strings.Contains(reqs[1], "311-2024-000123") {
		t.Errorf("the model's second request does not show the redacted result: %s", reqs[1])
	}
}
