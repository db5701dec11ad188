package providers

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/events"
)

func TestBuildConversation(t *testing.T) {
	t.Parallel()
	task := events.Turn{Role: events.RoleUser, Content: json.RawMessage(`"do it"`)}
	calls := func(ids ...string) *events.Decision {
		d := &events.Decision{}
		for i, id := range ids {
			d.ToolCalls = append(d.ToolCalls, events.ToolCall{ID: fmt.Sprintf("s1c%d", i+1), ProviderID: id, Tool: "t", Args: json.RawMessage(`{}`)})
		}
		return d
	}
	obs := func(callID, providerID, content string) events.Turn {
		return events.Turn{Role: events.RoleObservation, Step: 1, CallID: callID, ProviderCallID: providerID, Content: json.RawMessage(content)}
	}
	msg := json.RawMessage(`{"tool_calls":[{"id":"p1"},{"id":"p2"}]}`)
	tests := []struct {
		name    string
		given   []events.Turn
		want    string // the conversation, summarized
		wantErr string
	}{
		{
			name:  "the task alone",
			given: []events.Turn{task},
			want:  "user(do it)",
		},
		{
			name:  "an object input is its JSON",
			given: []events.Turn{{Role: events.RoleUser, Content: json.RawMessage(`{"a":1}`)}},
			want:  `user({"a":1})`,
		},
		{
			name:  "a provider message is replayed verbatim and its calls answered by provider id",
			given: []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: calls("p1", "p2"), ProviderMessage: msg}, obs("s1c1", "p1", `{"status":"ok"}`), obs("s1c2", "p2", `{"status":"error"}`)},
			want:  `user(do it) assistant(verbatim) results(p1:{"status":"ok"} p2!:{"status":"error"})`,
		},
		{
			name:  "results in another order than the calls are kept in observed order",
			given: []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: calls("p1", "p2"), ProviderMessage: msg}, obs("s1c2", "p2", `1`), obs("s1c1", "p1", `2`)},
			want:  `user(do it) assistant(verbatim) results(p2:1 p1:2)`,
		},
		{
			name:  "without a provider message the calls are rebuilt under provider ids, or loopgate's",
			given: []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: calls("p1", "")}, obs("s1c1", "p1", `1`), obs("s1c2", "", `2`)},
			want:  `user(do it) assistant(calls p1 s1c2) results(p1:1 s1c2:2)`,
		},
		{
			name:  "an observation without its provider id finds it through the decision",
			given: []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: calls("p1")}, obs("s1c1", "", `1`)},
			want:  `user(do it) assistant(calls p1) results(p1:1)`,
		},
		{
			name:  "an invalid text output and its error are assistant text and a user message",
			given: []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Content: json.RawMessage(`"I think"`)}, obs("", "", `{"error":"invalid_decision"}`)},
			want:  `user(do it) assistant(I think) user({"error":"invalid_decision"})`,
		},
		{
			name:  "an invalid provider message without calls: its error is a user message",
			given: []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Content: json.RawMessage(`{"x":1}`), ProviderMessage: json.RawMessage(`{"content":"x"}`)}, obs("", "", `E`)},
			want:  `user(do it) assistant(verbatim) user(E)`,
		},
		{
			name:  "an invalid provider message with calls: each call gets the error as its result",
			given: []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Content: json.RawMessage(`{"x":1}`), ProviderMessage: msg}, obs("", "", `E`)},
			want:  `user(do it) assistant(verbatim) results(p1!:E p2!:E)`,
		},
		{
			name:  "a final answer of an earlier run is assistant text",
			given: []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: &events.Decision{Final: &events.FinalAnswer{Summary: "done"}}}, task},
			want:  `user(do it) assistant(done) user(do it)`,
		},
		{
			name:  "session memory comes before the task",
			given: []events.Turn{{Role: events.RoleSession, Content: json.RawMessage(`{"id":"s-1","summary":"asked about SR-1"}`)}, task},
			want:  `user(Memory of this session's earlier runs (JSON): {"id":"s-1","summary":"asked about SR-1"}) user(do it)`,
		},
		{
			name:    "a call left without a result",
			given:   []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: calls("p1", "p2"), ProviderMessage: msg}, obs("s1c1", "p1", `1`)},
			wantErr: `history: the assistant turn of step 1 has calls with no result: ["p2"]`,
		},
		{
			name:    "a call left without a result before the next turn",
			given:   []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: calls("p1")}, task},
			wantErr: `calls with no result: ["p1"]`,
		},
		{
			name:    "a result answering no call",
			given:   []events.Turn{task, obs("s1c1", "p1", `1`)},
			wantErr: "answers no unanswered call",
		},
		{
			name:    "a result given twice",
			given:   []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: calls("p1", "p2")}, obs("s1c1", "p1", `1`), obs("s1c1", "p1", `1`)},
			wantErr: "answers no unanswered call",
		},
		{
			name:    "a provider message that does not parse",
			given:   []events.Turn{task, {Role: events.RoleAssistant, Step: 1, Decision: calls("p1"), ProviderMessage: json.RawMessage(`[1]`)}},
			wantErr: "history: the provider message of step 1",
		},
		{
			name:    "an unknown role",
			given:   []events.Turn{{Role: "system"}},
			wantErr: `unknown role "system"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conv, err := buildConversation(tt.given, openAICallIDs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := summarize(conv); got != tt.want {
				t.Errorf("conversation =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

func summarize(c conversation) string {
	var parts []string
	for _, m := range c {
		switch m.kind {
		case userMessage:
			parts = append(parts, "user("+m.text+")")
		case assistantMessage:
			switch {
			case m.verbatim != nil:
				parts = append(parts, "assistant(verbatim)")
			case len(m.calls) > 0:
				var ids []string
				for _, c := range m.calls {
					ids = append(ids, c.ID)
				}
				parts = append(parts, "assistant(calls "+strings.Join(ids, " ")+")")
			default:
				parts = append(parts, "assistant("+m.text+")")
			}
		case resultsMessage:
			var rs []string
			for _, r := range m.results {
				mark := ""
				if r.IsError {
					mark = "!"
				}
				rs = append(rs, r.CallID+mark+":"+r.Content)
			}
			parts = append(parts, "results("+strings.Join(rs, " ")+")")
		}
	}
	return strings.Join(parts, " ")
}
