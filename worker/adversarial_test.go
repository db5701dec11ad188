package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
)

// A malicious model: each scenario is one hostile decision followed by a
// final answer. None may cause a side effect; each must leave the audit
// record of its class.
func TestAMaliciousModelCausesNoUnauthorizedSideEffects(t *testing.T) {
	t.Parallel()
	calls := func(n int) string {
		var parts []string
		for i := range n {
			parts = append(parts, fmt.Sprintf(`{"tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"escalation number %d of many"}}`, i))
		}
		return `{"tool_calls":[` + strings.Join(parts, ",") + `]}`
	}
	draft := func(args string) string { return `{"tool_calls":[{"tool":"draft_escalation","args":` + args + `}]}` }
	calls4 := func(reason string) string {
		call := `{"tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"` + reason + `"}}`
		return `{"tool_calls":[` + strings.Repeat(call+",", 3) + call + `]}`
	}
	cases := []struct {
		name     string
		decision string
		want     []string // the trail after "started"
		check    func(t *testing.T, evs []events.Event)
		verbatim bool   // the model's bytes as written (scripted re-encodes them, escaping '<')
		message  string // with verbatim: the provider's own message of the first decision
	}{
		{
			name: "unknown tool", decision: `{"tool_calls":[{"tool":"email_resident","args":{"to":"all"}}]}`,
			want: []string{"proposed", "validated:unknown_tool(email_resident)", "observed(email_resident)"},
		},
		{
			name: "smuggled field", decision: draft(`{"request_id":"SR-10421","reason":"Open 9 days, past threshold.","send_now":true}`),
			want: []string{"proposed", "validated:invalid_arguments(draft_escalation)", "observed(draft_escalation)"},
			check: func(t *testing.T, evs []events.Event) {
				v := last[events.ValidatedData](t, evs, events.TypeValidated)
				if len(v.Errors) == 0 || v.Errors[0].Field != "/send_now" {
					t.Errorf("errors = %+v, want one naming /send_now", v.Errors)
				}
			},
		},
		{
			name: "type confusion", decision: `{"tool_calls":[{"tool":"lookup_complaints","args":{"limit":"5; DROP TABLE"}}]}`,
			want: []string{"proposed", "validated:invalid_arguments(lookup_complaints)", "observed(lookup_complaints)"},
		},
		{
			name: "a 1 MB argument", decision: draft(`{"request_id":"SR-10421","reason":"` + strings.Repeat("A", 1<<20) + `"}`),
			want: []string{"proposed:invalid", "observed"}, // over the decision size bound: rejected before any tool is considered
		},
		{
			// '<' is stored as itself, not escaped in six bytes (as
			// json.Marshal would): 60,000 of them stay within the trail's
			// bound, and the schema refuses them.
			name: "arguments of characters JSON may escape", decision: calls4(strings.Repeat("<", 15000)), verbatim: true,
			want: []string{"proposed", "validated:invalid_arguments(draft_escalation)", "validated:invalid_arguments(draft_escalation)",
				"validated:invalid_arguments(draft_escalation)", "validated:invalid_arguments(draft_escalation)", "finished:invalid_decisions"},
			check: func(t *testing.T, evs []events.Event) {
				if n := len(evs[1].Data); n > 4*15000+4<<10 {
					t.Errorf("proposed event of %d bytes for a decision of 60,000 '<': escaped", n)
				}
			},
		},
		{
			// A small decision, but the provider's own message (recorded
			// beside it, unbounded) would take the event over the server's
			// max_payload.
			name: "a provider message past the event limit", decision: draft(`{"request_id":"SR-10421","reason":"Open 9 days."}`),
			verbatim: true, message: `"` + strings.Repeat("x", 1100<<10) + `"`,
			want: []string{"proposed:invalid", "observed"},
			check: func(t *testing.T, evs []events.Event) {
				p := last[events.ProposedData](t, evs[:2], events.TypeProposed)
				if len(p.Invalid) != 1 || !strings.Contains(p.Invalid[0].Message, "bytes as an event") {
					t.Errorf("invalid = %+v, want the event size named", p.Invalid)
				}
			},
		},
		{
			name: "path traversal in a file-writing tool", decision: draft(`{"request_id":"../../../etc/passwd","reason":"Open 9 days, past threshold."}`),
			want: []string{"proposed", "validated:invalid_arguments(draft_escalation)", "observed(draft_escalation)"},
		},
		{
			name: "another tenant's resource", decision: draft(`{"request_id":"SR-20001","reason":"Open 14 days, past threshold."}`),
			want: []string{"proposed", "validated:ok(draft_escalation)", "denied(draft_escalation)", "finished:permission_denied"},
		},
		{
			name: "1,000 calls in one decision", decision: calls(1000),
			want: []string{"proposed:invalid", "observed"},
		},
		{
			name: "tool calls and a final answer at once", decision: `{"tool_calls":[{"tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"Open 9 days, past threshold."}}],"final_answer":{"summary":"done"}}`,
			want: []string{"proposed:invalid", "observed"},
		},
		{
			name: "deeply nested arguments", decision: draft(`{"request_id":"SR-10421","reason":` + strings.Repeat("[", 60) + strings.Repeat("]", 60) + `}`),
			want: []string{"proposed", "validated:invalid_arguments(draft_escalation)", "observed(draft_escalation)"},
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			agent := fmt.Sprintf("evil-%d", i)
			final := `{"final_answer":{"summary":"all done, I promise"}}`
			m := scripted(t, c.decision, final)
			if c.verbatim {
				m = verbatim(json.RawMessage(c.message), c.decision, final)
			}
			b := setup(t, options{
				agents: map[string]config.Profile{agent: {
					Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
				}},
				scripts: map[string]model.Model{agent: m},
			})
			evs := b.waitEnd(b.submit(task("evil", agent)))
			want := append([]string{"started"}, c.want...)
			if !strings.HasPrefix(want[len(want)-1], "finished") {
				want = append(want, "proposed:final", "finished:done")
			}
			assertTrail(t, evs, want)
			if files := outboxFiles(t, b.outbox); len(files) != 0 {
				t.Fatalf("side effect: outbox = %v", files)
			}
			if n := len(all(evs, events.TypeExecuting)); n != 0 {
				t.Fatalf("%d executions began", n)
			}
			if c.check != nil {
				c.check(t, evs)
			}
			for _, e := range evs {
				if len(e.Data) > 64<<10 {
					t.Errorf("%s event %d stores %d bytes: hostile input must be bounded in the trail", e.Type, e.Seq, len(e.Data))
				}
				if !json.Valid(e.Data) {
					t.Errorf("%s event is not JSON", e.Type)
				}
			}
		})
	}
}

// verbatim is a model that answers step i with decisions[i-1], byte for
// byte, and fails past the end. Its first answer carries message as the
// provider's own message (none when empty).
func verbatim(message json.RawMessage, decisions ...string) model.Model {
	return model.Func(func(_ context.Context, req model.Request) (model.Response, error) {
		if req.Step > len(decisions) {
			return model.Response{}, fmt.Errorf("verbatim model asked for step %d of %d", req.Step, len(decisions))
		}
		resp := model.Response{Output: []byte(decisions[req.Step-1]), Name: "verbatim"}
		if req.Step == 1 && len(message) > 0 {
			resp.Message = message
		}
		return resp, nil
	})
}
