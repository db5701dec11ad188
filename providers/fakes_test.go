package providers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// answer is what a fake model says, independent of the wire format: tool
// calls, or a text. Each fake server renders it the way its provider's API
// documents its responses.
type answer struct {
	calls []answerCall
	text  string
	usage events.Usage
	// stop overrides the finish_reason / stop_reason.
	stop string
}

type answerCall struct {
	id   string
	name string
	// args is the arguments as the provider sends them: OpenAI's
	// arguments string, Anthropic's input JSON.
	args string
}

// reply is one HTTP answer of a fake server: an answer rendered as a 200,
// or an error status with a body and headers; hang waits for the client to
// give up.
type reply struct {
	answer *answer
	status int
	header map[string]string
	body   string
	hang   bool
}

func ok(a answer) reply { return reply{answer: &a} }

// recorded is one request a fake server received.
type recorded struct {
	header http.Header
	body   []byte
}

// fake is the part of both fake servers that does not depend on the wire
// format: the script of replies, the record of requests, and the checks
// every request must pass.
type fake struct {
	t   *testing.T
	srv *httptest.Server
	// key is the API key every request must carry; "" means none may.
	key string
	// specs are the tools every request must offer, with their schemas.
	specs []tools.Spec
	// strict: the tool schemas are expected in OpenAI's strict form where
	// they fit it.
	strict bool
	// received is closed when the first request arrives.
	received chan struct{}
	once     sync.Once

	mu       sync.Mutex
	replies  []reply
	requests []recorded
}

// serve runs the fake: check validates a request's headers and body and
// returns the protocol rules it breaks; render turns an answer into a
// response body; refuse writes the provider's error body for a broken
// request.
func (f *fake) serve(path string, check func(http.Header, []byte) []string, render func(answer) string, refuse func(string) string) {
	f.received = make(chan struct{})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.requests)
		f.requests = append(f.requests, recorded{header: r.Header.Clone(), body: body})
		rep := reply{status: http.StatusInternalServerError, body: `{"error":"no reply scripted"}`}
		if len(f.replies) > 0 {
			rep = f.replies[min(n, len(f.replies)-1)]
		}
		f.mu.Unlock()
		f.once.Do(func() { close(f.received) })

		var broken []string
		if r.Method != http.MethodPost || r.URL.Path != path {
			broken = append(broken, fmt.Sprintf("%s %s, want POST %s", r.Method, r.URL.Path, path))
		}
		broken = append(broken, check(r.Header, body)...)
		if len(broken) > 0 {
			for _, b := range broken {
				f.t.Errorf("request %d breaks the protocol: %s", n+1, b)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, refuse(strings.Join(broken, "; ")))
			return
		}
		if rep.hang {
			<-r.Context().Done()
			return
		}
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		if rep.answer != nil {
			io.WriteString(w, render(*rep.answer))
			return
		}
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
	}))
	f.t.Cleanup(f.srv.Close)
}

// script sets the replies, in order; past the end the last one repeats.
func (f *fake) script(replies ...reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies = replies
}

func (f *fake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fake) request(i int) recorded {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.requests) {
		f.t.Fatalf("request %d: only %d received", i+1, len(f.requests))
	}
	return f.requests[i]
}

// checkKey checks the credentials a request carries: exactly the key,
// in one of the headers given, or none at all when no key is set.
func (f *fake) checkKey(h http.Header, bearerOK, xAPIKeyOK bool) []string {
	auth, xkey := h.Get("Authorization"), h.Get("X-Api-Key")
	if f.key == "" {
		if auth != "" || xkey != "" {
			return []string{"credentials sent, but no key is configured"}
		}
		return nil
	}
	if (bearerOK && auth == "Bearer "+f.key) || (xAPIKeyOK && xkey == f.key) {
		return nil
	}
	return []string{fmt.Sprintf("the API key is not sent (Authorization %q, X-Api-Key %q)", redactedHeader(auth), redactedHeader(xkey))}
}

func redactedHeader(v string) string {
	if v == "" {
		return ""
	}
	return "<set>"
}

// sameJSON reports whether two JSON texts are the same value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

// withoutSchemaKeyword is a schema without its root "$schema", as the
// providers send it.
func withoutSchemaKeyword(schema []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(schema, &m) != nil {
		return schema
	}
	delete(m, "$schema")
	b, _ := json.Marshal(m)
	return b
}

// ---- OpenAI Chat Completions ----

// fakeOpenAI speaks OpenAI's Chat Completions (POST /v1/chat/completions)
// and checks the conversation protocol on every request it receives.
type fakeOpenAI struct{ fake }

func newFakeOpenAI(t *testing.T, key string, specs []tools.Spec) *fakeOpenAI {
	f := &fakeOpenAI{fake{t: t, key: key, specs: specs}}
	f.serve("/v1/chat/completions", f.check, renderOpenAI, openAIError)
	return f
}

// baseURL is what a provider is configured with.
func (f *fakeOpenAI) baseURL() string { return f.srv.URL + "/v1" }

type openAIRequest struct {
	Model    string          `json:"model"`
	Messages []openAIMessage `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		} `json:"function"`
	} `json:"tools"`
	ParallelToolCalls   *bool `json:"parallel_tool_calls"`
	MaxCompletionTokens *int  `json:"max_completion_tokens"`
	Stream              *bool `json:"stream"`
}

type openAIMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (f *fakeOpenAI) decode(i int) (openAIRequest, []json.RawMessage) {
	f.t.Helper()
	body := f.request(i).body
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		f.t.Fatalf("request %d: %v", i+1, err)
	}
	var raw struct {
		Messages []json.RawMessage `json:"messages"`
	}
	json.Unmarshal(body, &raw)
	return req, raw.Messages
}

// check is what every Chat Completions request must be.
func (f *fakeOpenAI) check(h http.Header, body []byte) []string {
	broken := f.checkKey(h, true, false)
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		broken = append(broken, "Content-Type "+ct)
	}
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return append(broken, "body: "+err.Error())
	}
	if req.Model == "" {
		broken = append(broken, "no model")
	}
	if req.Stream != nil && *req.Stream {
		broken = append(broken, "streaming asked for")
	}
	broken = append(broken, openAIProtocol(req.Messages)...)

	// Tools are sent with their schemas, in the run's order.
	if len(req.Tools) != len(f.specs) {
		broken = append(broken, fmt.Sprintf("%d tools sent, want %d", len(req.Tools), len(f.specs)))
	} else {
		for i, s := range f.specs {
			tool := req.Tools[i]
			if tool.Type != "function" || tool.Function.Name != s.Name || tool.Function.Description != s.Description {
				broken = append(broken, fmt.Sprintf("tools[%d] = %s %q %q, want function %q", i, tool.Type, tool.Function.Name, tool.Function.Description, s.Name))
			}
			// Sent as validated, less the root "$schema" annotation.
			want := withoutSchemaKeyword(s.Parameters)
			if tool.Function.Strict != nil && *tool.Function.Strict && !f.strict {
				broken = append(broken, fmt.Sprintf("tools[%d] is strict; strict mode is off", i))
			}
			if !sameJSON(tool.Function.Parameters, want) {
				broken = append(broken, fmt.Sprintf("tools[%d] parameters = %s, want %s", i, tool.Function.Parameters, want))
			}
		}
	}
	// OpenAI refuses parallel_tool_calls without tools.
	if len(req.Tools) > 0 && (req.ParallelToolCalls == nil || !*req.ParallelToolCalls) {
		broken = append(broken, "parallel tool calls not allowed")
	}
	if len(req.Tools) == 0 && req.ParallelToolCalls != nil {
		broken = append(broken, "parallel_tool_calls without tools")
	}
	return broken
}

// openAIProtocol checks the conversation: an assistant message with tool
// calls is followed at once by one tool message per call, each carrying
// the id of a call of that assistant message, all of them before any other
// message; a tool message appears nowhere else.
func openAIProtocol(msgs []openAIMessage) []string {
	var broken []string
	if len(msgs) == 0 {
		return []string{"no messages"}
	}
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		switch m.Role {
		case "system", "developer":
			if i != 0 {
				broken = append(broken, fmt.Sprintf("messages[%d]: a system message after the first", i))
			}
		case "user":
		case "tool":
			broken = append(broken, fmt.Sprintf("messages[%d]: tool message %q does not follow the assistant message of its call", i, m.ToolCallID))
		case "assistant":
			if len(m.ToolCalls) == 0 {
				continue
			}
			want := map[string]bool{}
			for _, c := range m.ToolCalls {
				if c.ID == "" || want[c.ID] {
					broken = append(broken, fmt.Sprintf("messages[%d]: tool call id %q missing or repeated", i, c.ID))
				}
				if c.Type != "function" {
					broken = append(broken, fmt.Sprintf("messages[%d]: tool call type %q", i, c.Type))
				}
				want[c.ID] = true
			}
			j := i + 1
			for ; j < len(msgs) && msgs[j].Role == "tool"; j++ {
				id := msgs[j].ToolCallID
				if !want[id] {
					broken = append(broken, fmt.Sprintf("messages[%d]: tool message %q answers no pending call of messages[%d]", j, id, i))
				}
				delete(want, id)
				var content string
				if json.Unmarshal(msgs[j].Content, &content) != nil || content == "" {
					broken = append(broken, fmt.Sprintf("messages[%d]: tool message content %s is not a non-empty string", j, msgs[j].Content))
				}
			}
			if len(want) > 0 {
				broken = append(broken, fmt.Sprintf("messages[%d]: calls %v have no tool message right after", i, slices.Sorted(maps.Keys(want))))
			}
			i = j - 1
		default:
			broken = append(broken, fmt.Sprintf("messages[%d]: role %q", i, m.Role))
		}
	}
	if first := msgs[0].Role; first != "system" && first != "user" {
		broken = append(broken, "the conversation starts with "+first)
	}
	return broken
}

// renderOpenAI is a chat.completion as OpenAI documents it.
func renderOpenAI(a answer) string {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
	finish := "stop"
	if len(a.calls) > 0 {
		var calls []any
		for _, c := range a.calls {
			calls = append(calls, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		msg["tool_calls"] = calls
		finish = "tool_calls"
	}
	if a.text != "" {
		msg["content"] = a.text
	}
	if a.stop != "" {
		finish = a.stop
	}
	b, _ := json.Marshal(map[string]any{
		"id":      "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
		"object":  "chat.completion",
		"created": 1741569952,
		"model":   "gpt-4.1-2025-04-14",
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage": map[string]any{
			"prompt_tokens": a.usage.InputTokens, "completion_tokens": a.usage.OutputTokens,
			"total_tokens":              a.usage.InputTokens + a.usage.OutputTokens,
			"prompt_tokens_details":     map[string]any{"cached_tokens": 0, "audio_tokens": 0},
			"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
		},
		"service_tier":       "default",
		"system_fingerprint": "fp_b376dfbbd5",
	})
	return string(b)
}

// openAIError is OpenAI's error body.
func openAIError(message string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": "invalid_request_error", "param": "messages", "code": nil}})
	return string(b)
}

// ---- Anthropic Messages ----

// fakeAnthropic speaks Anthropic's Messages API (POST /v1/messages) and
// checks the conversation protocol on every request it receives.
type fakeAnthropic struct {
	fake
	// thinking adds a thinking block, with its signature, before the
	// answer's other blocks: it must come back verbatim.
	thinking bool
}

func newFakeAnthropic(t *testing.T, key string, specs []tools.Spec) *fakeAnthropic {
	f := &fakeAnthropic{fake: fake{t: t, key: key, specs: specs}}
	f.serve("/v1/messages", f.check, f.render, anthropicError)
	return f
}

func (f *fakeAnthropic) baseURL() string { return f.srv.URL }

type anthropicRequest struct {
	Model     string             `json:"model"`
	MaxTokens int                `json:"max_tokens"`
	System    json.RawMessage    `json:"system"`
	Messages  []anthropicMessage `json:"messages"`
	Tools     []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	Stream *bool `json:"stream"`
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content []anthropicBlock `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   *bool           `json:"is_error"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
}

func (f *fakeAnthropic) decode(i int) (anthropicRequest, []json.RawMessage) {
	f.t.Helper()
	body := f.request(i).body
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		f.t.Fatalf("request %d: %v", i+1, err)
	}
	var raw struct {
		Messages []json.RawMessage `json:"messages"`
	}
	json.Unmarshal(body, &raw)
	return req, raw.Messages
}

func (f *fakeAnthropic) check(h http.Header, body []byte) []string {
	broken := f.checkKey(h, true, true)
	if h.Get("Anthropic-Version") == "" {
		broken = append(broken, "no anthropic-version header")
	}
	var req anthropicRequest
	// Content may be a string in general; loopgate always sends blocks.
	if err := json.Unmarshal(body, &req); err != nil {
		return append(broken, "body: "+err.Error())
	}
	if req.Model == "" {
		broken = append(broken, "no model")
	}
	if req.MaxTokens <= 0 {
		broken = append(broken, "no max_tokens")
	}
	if req.Stream != nil && *req.Stream {
		broken = append(broken, "streaming asked for")
	}
	broken = append(broken, anthropicProtocol(req.Messages)...)
	if len(req.Tools) != len(f.specs) {
		broken = append(broken, fmt.Sprintf("%d tools sent, want %d", len(req.Tools), len(f.specs)))
	} else {
		for i, s := range f.specs {
			tool := req.Tools[i]
			if tool.Name != s.Name || tool.Description != s.Description {
				broken = append(broken, fmt.Sprintf("tools[%d] = %q %q, want %q", i, tool.Name, tool.Description, s.Name))
			}
			if want := withoutSchemaKeyword(s.Parameters); !sameJSON(tool.InputSchema, want) {
				broken = append(broken, fmt.Sprintf("tools[%d] input_schema = %s, want %s", i, tool.InputSchema, want))
			}
		}
	}
	return broken
}

// anthropicProtocol checks the conversation: it starts with the user and
// alternates; an assistant message with tool_use blocks is followed by ONE
// user message that opens with a tool_result block for each of them — the
// tool_use_id of each a tool_use id of that assistant message — and
// tool_result blocks appear nowhere else. Text blocks are never empty.
func anthropicProtocol(msgs []anthropicMessage) []string {
	var broken []string
	if len(msgs) == 0 || msgs[0].Role != "user" {
		return []string{"the conversation does not start with a user message"}
	}
	var pending map[string]bool // tool_use ids of the assistant message before
	for i, m := range msgs {
		if i > 0 && m.Role == msgs[i-1].Role {
			broken = append(broken, fmt.Sprintf("messages[%d]: two %s messages in a row", i, m.Role))
		}
		if len(m.Content) == 0 {
			broken = append(broken, fmt.Sprintf("messages[%d]: no content", i))
		}
		switch m.Role {
		case "assistant":
			pending = map[string]bool{}
			for _, b := range m.Content {
				switch b.Type {
				case "tool_use":
					if b.ID == "" || pending[b.ID] {
						broken = append(broken, fmt.Sprintf("messages[%d]: tool_use id %q missing or repeated", i, b.ID))
					}
					var input map[string]any
					if json.Unmarshal(b.Input, &input) != nil {
						broken = append(broken, fmt.Sprintf("messages[%d]: tool_use input %s is not an object", i, b.Input))
					}
					pending[b.ID] = true
				case "tool_result":
					broken = append(broken, fmt.Sprintf("messages[%d]: tool_result in an assistant message", i))
				case "text":
					if b.Text == "" {
						broken = append(broken, fmt.Sprintf("messages[%d]: empty text block", i))
					}
				}
			}
		case "user":
			results := true // tool_result blocks must come first
			for _, b := range m.Content {
				switch b.Type {
				case "tool_result":
					if !results {
						broken = append(broken, fmt.Sprintf("messages[%d]: tool_result %q after other content", i, b.ToolUseID))
					}
					if !pending[b.ToolUseID] {
						broken = append(broken, fmt.Sprintf("messages[%d]: tool_result %q answers no pending tool_use of the assistant message before", i, b.ToolUseID))
					}
					delete(pending, b.ToolUseID)
				case "text":
					results = false
					if b.Text == "" {
						broken = append(broken, fmt.Sprintf("messages[%d]: empty text block", i))
					}
				default:
					results = false
				}
			}
			if len(pending) > 0 {
				broken = append(broken, fmt.Sprintf("messages[%d]: tool_use %v not answered in this message", i, slices.Sorted(maps.Keys(pending))))
			}
			pending = nil
		default:
			broken = append(broken, fmt.Sprintf("messages[%d]: role %q", i, m.Role))
		}
	}
	if len(pending) > 0 {
		broken = append(broken, fmt.Sprintf("tool_use %v never answered", slices.Sorted(maps.Keys(pending))))
	}
	return broken
}

// render is a message as Anthropic documents it.
func (f *fakeAnthropic) render(a answer) string {
	var content []any
	if f.thinking {
		content = append(content, map[string]any{"type": "thinking", "thinking": "The user wants the oldest complaints.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"})
	}
	if a.text != "" {
		content = append(content, map[string]any{"type": "text", "text": a.text, "citations": nil})
	}
	for _, c := range a.calls {
		content = append(content, map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": json.RawMessage(c.args)})
	}
	if content == nil {
		content = []any{}
	}
	stop := "end_turn"
	if len(a.calls) > 0 {
		stop = "tool_use"
	}
	if a.stop != "" {
		stop = a.stop
	}
	b, _ := json.Marshal(map[string]any{
		"id":            "msg_01Aq9w938a90dw8q",
		"type":          "message",
		"role":          "assistant",
		"model":         "claude-sonnet-4-5-20250929",
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens": a.usage.InputTokens, "output_tokens": a.usage.OutputTokens,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "service_tier": "standard",
		},
	})
	return string(b)
}

// anthropicError is Anthropic's error body.
func anthropicError(message string) string {
	return anthropicErrorOf("invalid_request_error", message)
}

func anthropicErrorOf(typ, message string) string {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": message}})
	return string(b)
}
