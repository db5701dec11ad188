package providers_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loopgate/loopgate/providers"
	"github.com/loopgate/loopgate/tools"
)

// Answers a server may send that the protocols' happy path does not: empty
// or null content, tool calls without ids, negative or missing usage, a
// connection cut mid-answer. Each must leave the run able to go on.

// anthropicBody is a Messages response with the given content blocks (a
// JSON array) and stop_reason.
func anthropicBody(content, stop string) string {
	return `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":` + content +
		`,"stop_reason":"` + stop + `","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}`
}

// openAIBody is a chat completion with the given message (a JSON object)
// and finish_reason.
func openAIBody(message, finish string) string {
	return `{"id":"x","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"finish_reason":"` + finish +
		`","message":` + message + `}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`
}

// TestAnthropicEmptyAnswerCanBeCorrected: Claude sometimes ends a turn
// with no content at all (end_turn with "content": [], or a lone empty
// text block; a refusal with no content). That is no decision, and the
// model must get the error and a chance to correct it. The provider used
// to keep the empty message as Response.Message and replay it verbatim,
// which the Messages API refuses ("all messages must have non-empty
// content except for the optional final assistant message", "text content
// blocks must be non-empty"): the run stopped on an HTTP 400. Now such a
// message is not kept, and the turn is rebuilt from the invalid output.
func TestAnthropicEmptyAnswerCanBeCorrected(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, content, stop string }{
		{"end_turn with no content", `[]`, "end_turn"},
		{"end_turn with an empty text block", `[{"type":"text","text":"","citations":null}]`, "end_turn"},
		{"max_tokens with a blank text block", `[{"type":"text","text":"  \n","citations":null}]`, "max_tokens"},
		{"refusal with no content", `[]`, "refusal"},
		{"max_tokens with no content", `[]`, "max_tokens"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupAnthropic(t, "", nil, nil)
			b.fake.script(reply{status: 200, body: anthropicBody(tt.content, tt.stop)}, ok(answer{text: "SR-10422 is the oldest."}))
			tr := newTrail(t, "oldest?")
			resp, err := b.model.Propose(t.Context(), tr.request(1))
			if err != nil {
				t.Fatal(err)
			}
			if d := tr.proposed(1, resp); d != nil {
				t.Fatalf("an empty answer became decision %s", resp.Output)
			}
			if resp.Message != nil {
				t.Errorf("Message = %s, want none: the API refuses it back", resp.Message)
			}
			tr.observeInvalid(1)
			// The fake refuses, as the API does, a message with no content
			// or an empty text block.
			if _, err := b.model.Propose(t.Context(), tr.request(2)); err != nil {
				t.Fatalf("step 2 after an empty answer: %v", err)
			}
			req, _ := b.fake.decode(1)
			if len(req.Messages) != 3 || req.Messages[1].Role != "assistant" || req.Messages[2].Role != "user" {
				t.Errorf("step 2 messages = %+v, want task, the rebuilt answer, the error", req.Messages)
			}
		})
	}
	t.Run("tool_use beside an empty text block is rebuilt under its ids", func(t *testing.T) {
		t.Parallel()
		b := setupAnthropic(t, "", []tools.Spec{statusSpec}, nil)
		b.fake.script(reply{status: 200, body: anthropicBody(`[{"type":"text","text":""},{"type":"tool_use","id":"toolu_1","name":"complaint_status","input":{"request_id":"SR-1"}}]`, "tool_use")},
			ok(answer{text: "done"}))
		tr := newTrail(t, "x")
		resp, err := b.model.Propose(t.Context(), tr.request(1, statusSpec))
		if err != nil {
			t.Fatal(err)
		}
		if d := tr.proposed(1, resp); d == nil || d.ToolCalls[0].ProviderID != "toolu_1" {
			t.Fatalf("decision = %s, want the call under toolu_1", resp.Output)
		}
		tr.observe(1, "s1c1", `{"status":"ok"}`)
		if _, err := b.model.Propose(t.Context(), tr.request(2, statusSpec)); err != nil {
			t.Fatalf("step 2: %v", err)
		}
		req, _ := b.fake.decode(1)
		if c := req.Messages[1].Content; len(c) != 1 || c[0].Type != "tool_use" || c[0].ID != "toolu_1" {
			t.Errorf("step 2 assistant content = %+v, want the tool_use alone, under toolu_1", c)
		}
	})
	t.Run("an answer with content is still replayed verbatim", func(t *testing.T) {
		t.Parallel()
		b := setupAnthropic(t, "", nil, nil)
		b.fake.script(ok(answer{text: "The oldest complaint is SR-10", stop: "max_tokens"}))
		resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(resp.Message), "The oldest complaint is SR-10") {
			t.Errorf("Message = %s, want the provider's message", resp.Message)
		}
	})
}

// TestOpenAINullContentAnswerCanBeCorrected: a chat completion whose
// message has neither content nor tool calls (content null: a refusal, a
// reasoning model that spent the answer thinking, a local server) is no
// decision. It used to be replayed verbatim, an assistant message with
// "content": null and no tool_calls, which Chat Completions refuses
// ("content: required unless tool_calls or function_call is specified").
// Now it is not kept, and the turn is rebuilt with the invalid output as
// its text.
func TestOpenAINullContentAnswerCanBeCorrected(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, message, finish string }{
		{"content null", `{"role":"assistant","content":null,"refusal":null,"annotations":[]}`, "stop"},
		{"content empty", `{"role":"assistant","content":""}`, "stop"},
		{"a refusal", `{"role":"assistant","content":null,"refusal":"I can't help with that."}`, "stop"},
		{"cut short with content null", `{"role":"assistant","content":null}`, "length"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupOpenAI(t, "", nil, nil)
			b.fake.script(reply{status: 200, body: openAIBody(tt.message, tt.finish)}, ok(answer{text: "SR-10422 is the oldest."}))
			tr := newTrail(t, "oldest?")
			resp, err := b.model.Propose(t.Context(), tr.request(1))
			if err != nil {
				t.Fatal(err)
			}
			if d := tr.proposed(1, resp); d != nil {
				t.Fatalf("an empty answer became decision %s", resp.Output)
			}
			if resp.Message != nil {
				t.Errorf("Message = %s, want none: the API refuses it back", resp.Message)
			}
			tr.observeInvalid(1)
			if _, err := b.model.Propose(t.Context(), tr.request(2)); err != nil {
				t.Fatal(err)
			}
			_, raw := b.fake.decode(1)
			for i, m := range raw {
				var msg struct {
					Role      string          `json:"role"`
					Content   json.RawMessage `json:"content"`
					ToolCalls []any           `json:"tool_calls"`
				}
				json.Unmarshal(m, &msg)
				if msg.Role != "assistant" || len(msg.ToolCalls) > 0 {
					continue
				}
				var s string
				if json.Unmarshal(msg.Content, &s) != nil || s == "" {
					t.Errorf("step 2 messages[%d] = %s: an assistant message without tool_calls must have content", i, m)
				}
			}
		})
	}
	t.Run("an answer with content is still replayed verbatim", func(t *testing.T) {
		t.Parallel()
		b := setupOpenAI(t, "", nil, nil)
		b.fake.script(ok(answer{text: "The oldest complaint is SR-10", stop: "length"}))
		resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(resp.Message), "The oldest complaint is SR-10") {
			t.Errorf("Message = %s, want the provider's message", resp.Message)
		}
	})
}

// TestTruncatedToolCallsWithoutIDsCanBeCorrected: a local server that
// sends tool calls without ids (TestOpenAIToolCallsWithoutIDsAre-
// ReplayedUnderLoopgatesIDs) and cuts the answer short (finish_reason
// length; stop_reason max_tokens). translate used to check the ids only
// for a decision, not for an answer that is no decision, so the message
// was kept and replayed verbatim: its call had no id, and the error about
// the invalid decision went back as a result with tool_call_id "", which
// the API refuses. Now the message is not kept and the turn is rebuilt
// from the output, followed by the error; calls with ids of their own are
// still replayed and answered with the error.
func TestTruncatedToolCallsWithoutIDsCanBeCorrected(t *testing.T) {
	t.Parallel()
	cut := answerCall{name: "complaint_status", args: `{"request_id":"SR-1`}
	for _, tt := range []struct {
		name     string
		provider string
		id       string
		stop     string
		wantKept bool
	}{
		{"openai without an id", "openai", "", "length", false},
		{"openai with an id", "openai", "call_1", "length", true},
		{"anthropic without an id", "anthropic", "", "max_tokens", false},
		{"anthropic with an id", "anthropic", "toolu_1", "max_tokens", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := cut
			c.id = tt.id
			if tt.provider == "anthropic" {
				c.args = `{"request_id":"SR-1"}` // Anthropic's input is JSON even when cut
			}
			first := ok(answer{calls: []answerCall{c}, stop: tt.stop})
			var m providers.Model
			var requests func() int
			if tt.provider == "openai" {
				b := setupOpenAI(t, "", []tools.Spec{statusSpec}, nil)
				b.fake.script(first, ok(answer{text: "done"}))
				m, requests = b.model, b.fake.count
			} else {
				b := setupAnthropic(t, "", []tools.Spec{statusSpec}, nil)
				b.fake.script(first, ok(answer{text: "done"}))
				m, requests = b.model, b.fake.count
			}
			tr := newTrail(t, "x")
			resp, err := m.Propose(t.Context(), tr.request(1, statusSpec))
			if err != nil {
				t.Fatal(err)
			}
			if d := tr.proposed(1, resp); d != nil {
				t.Fatalf("a truncated answer became decision %s", resp.Output)
			}
			if kept := resp.Message != nil; kept != tt.wantKept {
				t.Errorf("Message kept = %v, want %v", kept, tt.wantKept)
			}
			tr.observeInvalid(1)
			// The fakes refuse a call without an id, or a result answering none.
			if _, err := m.Propose(t.Context(), tr.request(2, statusSpec)); err != nil {
				t.Fatalf("step 2: %v", err)
			}
			if n := requests(); n != 2 {
				t.Errorf("%d requests, want 2", n)
			}
		})
	}
}

// TestUsageIsNeverNegative: token counts come from the server's response.
// A negative count (a buggy or hostile OpenAI-compatible server) used to
// be recorded as is, subtracting from the run's token total and cost so
// that its budgets could be talked down. Now each count is at least 0, and
// a negative one is logged.
func TestUsageIsNeverNegative(t *testing.T) {
	t.Parallel()
	t.Run("openai", func(t *testing.T) {
		t.Parallel()
		b := setupOpenAI(t, "", nil, nil)
		b.fake.script(reply{status: 200, body: `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop",` +
			`"message":{"role":"assistant","content":"done"}}],"usage":{"prompt_tokens":-100000,"completion_tokens":-7,"total_tokens":-100007}}`})
		resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage.InputTokens != 0 || resp.Usage.OutputTokens != 0 {
			t.Errorf("Usage = %+v, want 0 for each negative count", resp.Usage)
		}
		if logs := b.logs.String(); !strings.Contains(logs, "negative token count") || !strings.Contains(logs, "prompt_tokens") {
			t.Errorf("logs = %q, want the negative counts logged", logs)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		t.Parallel()
		b := setupAnthropic(t, "", nil, nil)
		// Each count is clamped on its own: the cached input still counts.
		b.fake.script(reply{status: 200, body: `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],` +
			`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":-100000,"cache_creation_input_tokens":0,"cache_read_input_tokens":40,"output_tokens":-5}}`})
		resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage.InputTokens != 40 || resp.Usage.OutputTokens != 0 {
			t.Errorf("Usage = %+v, want input 40 (the cached input), output 0", resp.Usage)
		}
		if logs := b.logs.String(); !strings.Contains(logs, "negative token count") || !strings.Contains(logs, "input_tokens") {
			t.Errorf("logs = %q, want the negative counts logged", logs)
		}
	})
}

// TestUsageLeftOutIsLogged: a server that leaves usage out of its answer
// is recorded as 0 tokens, so the run's token and cost budgets never bind;
// that used to pass silently. Now each such response logs a warning, and
// one that reports its usage logs none.
func TestUsageLeftOutIsLogged(t *testing.T) {
	t.Parallel()
	const warning = "no token usage"
	for _, tt := range []struct {
		name, provider, body string
		wantWarning          bool
	}{
		{"openai without usage", "openai", `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"done"}}]}`, true},
		{"openai with usage null", "openai", `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"done"}}],"usage":null}`, true},
		{"openai with usage", "openai", openAIBody(`{"role":"assistant","content":"done"}`, "stop"), false},
		{"anthropic without usage", "anthropic", `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"done"}],"stop_reason":"end_turn","stop_sequence":null}`, true},
		{"anthropic with usage", "anthropic", anthropicBody(`[{"type":"text","text":"done"}]`, "end_turn"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				m    providers.Model
				logs *bytes.Buffer
			)
			if tt.provider == "openai" {
				b := setupOpenAI(t, "", nil, nil)
				b.fake.script(reply{status: 200, body: tt.body})
				m, logs = b.model, b.logs
			} else {
				b := setupAnthropic(t, "", nil, nil)
				b.fake.script(reply{status: 200, body: tt.body})
				m, logs = b.model, b.logs
			}
			resp, err := m.Propose(t.Context(), newTrail(t, "x").request(1))
			if err != nil {
				t.Fatal(err)
			}
			mustDecision(t, resp.Output)
			if got := strings.Count(logs.String(), warning); got != map[bool]int{true: 1, false: 0}[tt.wantWarning] {
				t.Errorf("%d warnings %q in logs %q, want one if and only if usage is missing: %v", got, warning, logs, tt.wantWarning)
			}
		})
	}
}

// TestLostConnectionMidResponseIsRetried: the retry policy (README
// "Failures", Retry's doc) retries "a lost connection": a request that got
// no answer. A connection that drops after the status line, while the body
// is read (a proxy or load balancer cutting a slow answer), is no answer
// either, but the SDK's "error reading response body: unexpected EOF" is
// no *url.Error, so it used to be returned at once and the run stopped with
// reason error. Now it is retried; a body that arrived whole and does not
// decode still is not.
func TestLostConnectionMidResponseIsRetried(t *testing.T) {
	t.Parallel()
	const partial = `{"id":"x","object":"chat.completion","choices":[{"index":0,`
	for _, tt := range []struct {
		name         string
		provider     string
		cut          bool // true: the connection drops mid-body; false: the partial body is all there is
		wantRequests int32
	}{
		{"openai cut mid-body", "openai", true, 2},
		{"anthropic cut mid-body", "anthropic", true, 2},
		{"openai whole body that does not decode", "openai", false, 1},
		{"anthropic whole body that does not decode", "anthropic", false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				if n.Add(1) == 1 {
					if !tt.cut {
						io.WriteString(w, partial)
						return
					}
					w.Header().Set("Content-Length", "4000")
					w.WriteHeader(http.StatusOK)
					io.WriteString(w, partial)
					w.(http.Flusher).Flush()
					conn, _, _ := w.(http.Hijacker).Hijack()
					conn.Close()
					return
				}
				if tt.provider == "openai" {
					io.WriteString(w, renderOpenAI(answer{text: "done"}))
				} else {
					io.WriteString(w, (&fakeAnthropic{}).render(answer{text: "done"}))
				}
			}))
			t.Cleanup(srv.Close)
			logger := slog.New(slog.DiscardHandler)
			var m providers.Model
			var err error
			if tt.provider == "openai" {
				m, err = providers.NewOpenAI(&providers.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "gpt-4.1", Retry: fastRetry(nil), Logger: logger})
			} else {
				m, err = providers.NewAnthropic(&providers.AnthropicConfig{BaseURL: srv.URL, Model: "claude-sonnet-4-5", Retry: fastRetry(nil), Logger: logger})
			}
			if err != nil {
				t.Fatal(err)
			}
			resp, err := m.Propose(t.Context(), newTrail(t, "x").request(1))
			if tt.cut {
				if err != nil {
					t.Fatalf("Propose after %d requests: %v; want the cut response retried", n.Load(), err)
				}
				mustDecision(t, resp.Output)
			} else if err == nil {
				t.Fatalf("Propose = %s, want the undecodable body's error", resp.Output)
			}
			if got := n.Load(); got != tt.wantRequests {
				t.Errorf("%d requests, want %d", got, tt.wantRequests)
			}
		})
	}
}
