package providers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/providers"
	"github.com/loopgate/loopgate/tools"
)

const openAIKey = "sk-test-0123456789SECRETabcdef"

type openAIBundle struct {
	fake  *fakeOpenAI
	model *providers.OpenAI
	slept *[]time.Duration
	logs  *bytes.Buffer
}

// setupOpenAI returns an OpenAI provider talking to a fake server that
// expects key and the given tools on every request. cfg may adjust the
// provider's config.
func setupOpenAI(t *testing.T, key string, specs []tools.Spec, cfg func(*providers.OpenAIConfig)) openAIBundle {
	t.Helper()
	f := newFakeOpenAI(t, key, specs)
	var slept []time.Duration
	logs := &bytes.Buffer{}
	c := &providers.OpenAIConfig{
		BaseURL: f.baseURL(), Model: "gpt-4.1", APIKey: key, Retry: fastRetry(&slept),
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}
	if cfg != nil {
		cfg(c)
	}
	if c.Strict != nil && *c.Strict {
		f.strict = true
	}
	m, err := providers.NewOpenAI(c)
	if err != nil {
		t.Fatal(err)
	}
	return openAIBundle{fake: f, model: m, slept: &slept, logs: logs}
}

func TestOpenAISendsSystemTaskAndToolsWithTheirSchemas(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, openAIKey, []tools.Spec{lookupSpec, statusSpec}, nil)
	b.fake.script(ok(answer{text: "done"}))
	tr := newTrail(t, "Escalate the oldest sanitation complaints.")
	if _, err := b.model.Propose(t.Context(), tr.request(1, lookupSpec, statusSpec)); err != nil {
		t.Fatal(err)
	}
	req, _ := b.fake.decode(0)
	if req.Model != "gpt-4.1" {
		t.Errorf("model = %q", req.Model)
	}
	if len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Role != "user" {
		t.Fatalf("messages = %+v, want system, user", req.Messages)
	}
	if string(req.Messages[0].Content) != `"You are the CityOps assistant."` {
		t.Errorf("system content = %s", req.Messages[0].Content)
	}
	if string(req.Messages[1].Content) != `"Escalate the oldest sanitation complaints."` {
		t.Errorf("user content = %s, want the task input's text", req.Messages[1].Content)
	}
	// The fake checked the tools against their specs; a local server gets
	// none strict by default.
	for _, tool := range req.Tools {
		if tool.Function.Strict != nil {
			t.Errorf("tool %s: strict = %v sent to a server that is not OpenAI's", tool.Function.Name, *tool.Function.Strict)
		}
	}
	if req.MaxCompletionTokens != nil {
		t.Errorf("max_completion_tokens = %d, want the server's own limit", *req.MaxCompletionTokens)
	}
}

func TestOpenAISendsAnObjectInputAsItsJSON(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, nil)
	b.fake.script(ok(answer{text: "done"}))
	in := json.RawMessage(`{"request":"escalate","category":"sanitation"}`)
	req := providers.Request{Step: 1, History: []events.Turn{{Role: events.RoleUser, Content: in}}}
	if _, err := b.model.Propose(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	got, _ := b.fake.decode(0)
	var text string
	if err := json.Unmarshal(got.Messages[0].Content, &text); err != nil || text != string(in) {
		t.Errorf("user content = %s, want the input's JSON as text", got.Messages[0].Content)
	}
}

func TestOpenAIWithoutToolsSendsNoToolFields(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, nil)
	b.fake.script(ok(answer{text: "done"}))
	if _, err := b.model.Propose(t.Context(), newTrail(t, "hi").request(1)); err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(b.fake.request(0).body, &raw)
	for _, k := range []string{"tools", "parallel_tool_calls", "tool_choice"} {
		if _, ok := raw[k]; ok {
			t.Errorf("%s sent without tools", k)
		}
	}
}

func TestOpenAIStrictMode(t *testing.T) {
	t.Parallel()
	schema := func(s string) tools.Spec {
		return tools.Spec{Name: "t", Description: "d", Parameters: json.RawMessage(s)}
	}
	tests := []struct {
		name       string
		strict     bool
		given      tools.Spec
		wantStrict bool
	}{
		{name: "a schema that fits is sent strict", strict: true, given: statusSpec, wantStrict: true},
		{name: "an optional property does not fit", strict: true, given: lookupSpec},
		{name: "minLength does not fit", strict: true, given: schema(`{"type":"object","properties":{"a":{"type":"string","minLength":1}},"required":["a"],"additionalProperties":false}`)},
		{name: "a default does not fit", strict: true, given: schema(`{"type":"object","properties":{"a":{"type":"string","default":"x"}},"required":["a"],"additionalProperties":false}`)},
		{name: "open additionalProperties does not fit", strict: true, given: schema(`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`)},
		{name: "a nested object must fit too", strict: true, given: schema(`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"string"}}}},"required":["a"],"additionalProperties":false}`)},
		{name: "a nested object that fits", strict: true, wantStrict: true, given: schema(`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":["string","null"]}},"required":["b"],"additionalProperties":false},"e":{"enum":["x","y"]}},"required":["a","e"],"additionalProperties":false}`)},
		{name: "array items must fit", strict: true, given: schema(`{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","pattern":"^x"}}},"required":["a"],"additionalProperties":false}`)},
		{name: "a repeated required name does not count twice", strict: true, given: schema(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a","a"],"additionalProperties":false}`)},
		{name: "oneOf does not fit", strict: true, given: schema(`{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"integer"}]}},"required":["a"],"additionalProperties":false}`)},
		{name: "no properties at all fits", strict: true, wantStrict: true, given: schema(`{"type":"object","properties":{},"additionalProperties":false}`)},
		{name: "strict off sends even a fitting schema non-strict", strict: false, given: statusSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			strict := tt.strict
			b := setupOpenAI(t, "", []tools.Spec{tt.given}, func(c *providers.OpenAIConfig) { c.Strict = &strict })
			b.fake.script(ok(answer{text: "done"}))
			if _, err := b.model.Propose(t.Context(), newTrail(t, "hi").request(1, tt.given)); err != nil {
				t.Fatal(err)
			}
			req, _ := b.fake.decode(0)
			got := req.Tools[0].Function.Strict != nil && *req.Tools[0].Function.Strict
			if got != tt.wantStrict {
				t.Errorf("strict = %v, want %v", got, tt.wantStrict)
			}
			// Strict or not, the schema is the one calls are validated
			// against (less the root $schema): nothing is rewritten to fit.
			if want := withoutSchemaKeyword(tt.given.Parameters); !bytes.Equal(compactJSON(req.Tools[0].Function.Parameters), compactJSON(want)) {
				t.Errorf("parameters = %s, want %s", req.Tools[0].Function.Parameters, want)
			}
		})
	}
}

func TestOpenAIStrictTrueReachesAnyServer(t *testing.T) {
	t.Parallel()
	// A local server gets no strict flag by default (see
	// TestOpenAISendsSystemTaskAndToolsWithTheirSchemas); configured, it
	// does.
	on := true
	b := setupOpenAI(t, "", []tools.Spec{statusSpec}, func(c *providers.OpenAIConfig) { c.Strict = &on })
	b.fake.script(ok(answer{text: "done"}))
	if _, err := b.model.Propose(t.Context(), newTrail(t, "hi").request(1, statusSpec)); err != nil {
		t.Fatal(err)
	}
	if req, _ := b.fake.decode(0); req.Tools[0].Function.Strict == nil || !*req.Tools[0].Function.Strict {
		t.Error("strict: true configured, not sent")
	}
}

func TestOpenAIMultiStepReplaysTheAssistantMessageVerbatim(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, openAIKey, []tools.Spec{lookupSpec, statusSpec}, nil)
	b.fake.script(
		ok(answer{text: "Checking both.", calls: []answerCall{
			{id: "call_Q1", name: "complaint_status", args: `{"request_id":"SR-10422"}`},
			{id: "call_Q2", name: "complaint_status", args: `{"request_id":"SR-10488"}`},
		}}),
		ok(answer{text: "Both are open."}),
	)
	tr := newTrail(t, "How are SR-10422 and SR-10488?")
	resp1, err := b.model.Propose(t.Context(), tr.request(1, lookupSpec, statusSpec))
	if err != nil {
		t.Fatal(err)
	}
	d := tr.proposed(1, resp1)
	if d == nil || len(d.ToolCalls) != 2 {
		t.Fatalf("step 1 = %s, want two calls", resp1.Output)
	}
	tr.observe(1, "s1c1", `{"status":"ok","tool":"complaint_status","data":{"request_id":"SR-10422","status":"open"}}`)
	tr.observe(1, "s1c2", `{"status":"ok","tool":"complaint_status","data":{"request_id":"SR-10488","status":"open"}}`)

	resp2, err := b.model.Propose(t.Context(), tr.request(2, lookupSpec, statusSpec))
	if err != nil {
		t.Fatal(err)
	}
	if d := mustDecision(t, resp2.Output); d.Final == nil || d.Final.Summary != "Both are open." {
		t.Errorf("step 2 = %s", resp2.Output)
	}

	req, raw := b.fake.decode(1)
	roles := []string{}
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,tool" {
		t.Fatalf("step 2 roles = %v, want system,user,assistant,tool,tool", roles)
	}
	// The assistant message is the one the server sent, field for field.
	var step1 struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	json.Unmarshal([]byte(renderOpenAI(answer{text: "Checking both.", calls: []answerCall{
		{id: "call_Q1", name: "complaint_status", args: `{"request_id":"SR-10422"}`},
		{id: "call_Q2", name: "complaint_status", args: `{"request_id":"SR-10488"}`},
	}})), &step1)
	if !sameJSON(raw[2], step1.Choices[0].Message) {
		t.Errorf("replayed assistant message = %s, want the server's %s", raw[2], step1.Choices[0].Message)
	}
	for i, want := range []string{"call_Q1", "call_Q2"} {
		m := req.Messages[3+i]
		if m.ToolCallID != want {
			t.Errorf("tool message %d answers %q, want %q", i, m.ToolCallID, want)
		}
		var content string
		json.Unmarshal(m.Content, &content)
		if !strings.Contains(content, "SR-104") || !json.Valid([]byte(content)) {
			t.Errorf("tool message %d content = %q, want the observation's JSON", i, content)
		}
	}
}

func TestOpenAIRebuildsTheAssistantMessageWhenThereIsNoProviderMessage(t *testing.T) {
	t.Parallel()
	// A history recorded by another model (the scripted one, or a provider
	// message lost): calls go out under their provider ids, or loopgate's.
	b := setupOpenAI(t, "", []tools.Spec{statusSpec}, nil)
	b.fake.script(ok(answer{text: "done"}))
	in, _ := json.Marshal("task")
	req := providers.Request{Step: 2, Tools: []tools.Spec{statusSpec}, History: []events.Turn{
		{Role: events.RoleUser, Content: in},
		{Role: events.RoleAssistant, Step: 1, Decision: &events.Decision{ToolCalls: []events.ToolCall{
			{ID: "s1c1", ProviderID: "call_A", Tool: "complaint_status", Args: json.RawMessage(`{"request_id":"SR-1"}`)},
			{ID: "s1c2", Tool: "complaint_status", Args: json.RawMessage(`{"request_id":"SR-2"}`)},
		}}},
		{Role: events.RoleObservation, Step: 1, CallID: "s1c1", ProviderCallID: "call_A", Content: json.RawMessage(`{"status":"ok"}`)},
		{Role: events.RoleObservation, Step: 1, CallID: "s1c2", Content: json.RawMessage(`{"status":"ok"}`)},
	}}
	if _, err := b.model.Propose(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	got, _ := b.fake.decode(0)
	a := got.Messages[1]
	if len(a.ToolCalls) != 2 || a.ToolCalls[0].ID != "call_A" || a.ToolCalls[1].ID != "s1c2" ||
		a.ToolCalls[1].Function.Name != "complaint_status" || a.ToolCalls[1].Function.Arguments != `{"request_id":"SR-2"}` {
		t.Errorf("rebuilt assistant message = %+v", a)
	}
	if got.Messages[2].ToolCallID != "call_A" || got.Messages[3].ToolCallID != "s1c2" {
		t.Errorf("tool messages answer %q, %q", got.Messages[2].ToolCallID, got.Messages[3].ToolCallID)
	}
}

func TestOpenAIMalformedArgumentsBecomeAnInvalidDecision(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, openAIKey, []tools.Spec{statusSpec}, nil)
	const malformed = `{"request_id": "SR-10422"`
	b.fake.script(
		ok(answer{calls: []answerCall{{id: "call_bad", name: "complaint_status", args: malformed}}}),
		ok(answer{calls: []answerCall{{id: "call_good", name: "complaint_status", args: `{"request_id":"SR-10422"}`}}}),
	)
	tr := newTrail(t, "status of SR-10422")
	resp, err := b.model.Propose(t.Context(), tr.request(1, statusSpec))
	if err != nil {
		t.Fatalf("Propose: %v (a malformed arguments string is the model's error, not the provider's)", err)
	}
	if d := tr.proposed(1, resp); d != nil {
		t.Fatalf("output %s passed validation; the arguments were not JSON", resp.Output)
	}
	// What the model wrote is kept, unrepaired.
	var out struct {
		ToolCalls []struct {
			Args       string `json:"args"`
			ProviderID string `json:"provider_id"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(resp.Output, &out); err != nil || len(out.ToolCalls) != 1 || out.ToolCalls[0].Args != malformed {
		t.Errorf("output = %s, want the raw arguments string as args", resp.Output)
	}
	obs := tr.observeInvalid(1)

	// The error goes back as the result of the call the replayed message
	// made: a tool_calls message must be answered call by call.
	resp2, err := b.model.Propose(t.Context(), tr.request(2, statusSpec))
	if err != nil {
		t.Fatal(err)
	}
	mustDecision(t, resp2.Output)
	req, _ := b.fake.decode(1)
	if n := len(req.Messages); n != 4 || req.Messages[2].Role != "assistant" || req.Messages[3].Role != "tool" || req.Messages[3].ToolCallID != "call_bad" {
		t.Fatalf("step 2 messages = %+v, want system, user, the assistant's bad call, its tool message", req.Messages)
	}
	if req.Messages[2].ToolCalls[0].Function.Arguments != malformed {
		t.Errorf("replayed arguments = %q, want the model's own %q", req.Messages[2].ToolCalls[0].Function.Arguments, malformed)
	}
	var content string
	json.Unmarshal(req.Messages[3].Content, &content)
	if content != obs {
		t.Errorf("tool message = %q, want the invalid_decision observation %q", content, obs)
	}
}

func TestOpenAIErrorAboutAnInvalidTextAnswerIsAUserMessage(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, nil)
	b.fake.script(
		ok(answer{text: "The oldest complaint is SR-10", stop: "length"}),
		ok(answer{text: "SR-10422 is the oldest."}),
	)
	tr := newTrail(t, "oldest?")
	resp, err := b.model.Propose(t.Context(), tr.request(1))
	if err != nil {
		t.Fatal(err)
	}
	if d := tr.proposed(1, resp); d != nil {
		t.Fatalf("a truncated answer (finish_reason length) became decision %s", resp.Output)
	}
	if !strings.Contains(string(resp.Output), `"finish_reason":"length"`) {
		t.Errorf("output = %s, want it to say why it is no decision", resp.Output)
	}
	obs := tr.observeInvalid(1)
	if _, err := b.model.Propose(t.Context(), tr.request(2)); err != nil {
		t.Fatal(err)
	}
	req, _ := b.fake.decode(1)
	last := req.Messages[len(req.Messages)-1]
	var content string
	json.Unmarshal(last.Content, &content)
	if len(req.Messages) != 4 || req.Messages[2].Role != "assistant" || last.Role != "user" || content != obs {
		t.Errorf("step 2 messages = %+v, want system, user, assistant, and the error as a user message", req.Messages)
	}
}

func TestOpenAIRefusalIsNoDecision(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, nil)
	b.fake.script(reply{status: 200, body: `{"id":"x","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"finish_reason":"stop",` +
		`"message":{"role":"assistant","content":null,"refusal":"I can't help with that."}}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`})
	resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := parseDecision(t, resp.Output, 1); d != nil {
		t.Errorf("a refusal became decision %s", resp.Output)
	}
	if !strings.Contains(string(resp.Output), "I can't help with that.") {
		t.Errorf("output %s does not show the refusal", resp.Output)
	}
}

func TestOpenAIToolCallsWithoutIDsAreReplayedUnderLoopgatesIDs(t *testing.T) {
	t.Parallel()
	// Some local servers send tool calls with no id: the provider
	// message cannot be answered call by call, so it is not kept.
	b := setupOpenAI(t, "", []tools.Spec{statusSpec}, nil)
	b.fake.script(
		ok(answer{calls: []answerCall{{id: "", name: "complaint_status", args: `{"request_id":"SR-1"}`}}}),
		ok(answer{text: "done"}),
	)
	tr := newTrail(t, "x")
	resp, err := b.model.Propose(t.Context(), tr.request(1, statusSpec))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message != nil {
		t.Errorf("Message = %s, want none for calls without ids", resp.Message)
	}
	if d := tr.proposed(1, resp); d == nil || d.ToolCalls[0].ProviderID != "" {
		t.Fatalf("decision = %s", resp.Output)
	}
	tr.observe(1, "s1c1", `{"status":"ok"}`)
	if _, err := b.model.Propose(t.Context(), tr.request(2, statusSpec)); err != nil {
		t.Fatal(err)
	}
	req, _ := b.fake.decode(1)
	if req.Messages[2].ToolCalls[0].ID != "s1c1" || req.Messages[3].ToolCallID != "s1c1" {
		t.Errorf("step 2 = %+v, want the call and its result under s1c1", req.Messages)
	}
}

func TestOpenAIReturnsTheErrorBodyAndDoesNotRetryA400(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, openAIKey, nil, nil)
	b.fake.script(reply{status: 400, header: map[string]string{"X-Request-Id": "req_123"},
		body: `{"error":{"message":"The model 'gpt-9' does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`})
	_, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	var pe *providers.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v, want a *providers.ProviderError", err)
	}
	if pe.StatusCode != 400 || pe.Type != "invalid_request_error" || pe.Code != "model_not_found" || !strings.Contains(pe.Message, "does not exist") || pe.RequestID != "req_123" {
		t.Errorf("ProviderError = %+v", pe)
	}
	if want := "HTTP 400 Bad Request: invalid_request_error: model_not_found: The model 'gpt-9' does not exist"; !strings.Contains(err.Error(), want) {
		t.Errorf("error = %q, want it to contain %q", err, want)
	}
	if n := b.fake.count(); n != 1 {
		t.Errorf("%d requests, want 1: a 400 is not retried", n)
	}
}

func TestOpenAIKeyIsSentButNeverInErrorsOrLogs(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, openAIKey, nil, nil)
	b.fake.script(
		reply{status: 500, body: `{"error":{"message":"The server had an error processing your request.","type":"server_error","param":null,"code":null}}`},
		reply{status: 401, body: `{"error":{"message":"Incorrect API key provided: ` + openAIKey + `. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
	)
	_, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	if err == nil {
		t.Fatal("want an error")
	}
	// The fake checked the Authorization header on both requests.
	if strings.Contains(err.Error(), openAIKey) || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error %q holds the key", err)
	}
	var pe *providers.ProviderError
	if !errors.As(err, &pe) || strings.Contains(pe.Message, "SECRET") || pe.StatusCode != 401 {
		t.Errorf("ProviderError = %+v, want a 401 without the key", pe)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "retrying") || strings.Contains(logs, "SECRET") {
		t.Errorf("logs = %q, want the retry logged without the key", logs)
	}
}

func TestOpenAIWithoutAKeySendsNoCredentials(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, nil) // the fake refuses any Authorization header
	b.fake.script(ok(answer{text: "hi"}))
	if _, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenAIRetries(t *testing.T) {
	t.Parallel()
	rateLimited := `{"error":{"message":"Rate limit reached for gpt-4.1 on tokens per min (TPM): Limit 30000, Used 30000, Requested 500.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	serverError := `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	done := ok(answer{text: "done"})
	tests := []struct {
		name       string
		replies    []reply
		maxRetries int
		wantSlept  [][2]time.Duration // each wait's range
		wantErr    string
	}{
		{
			name:      "429 with Retry-After seconds, then success",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After": "2"}, body: rateLimited}, done},
			wantSlept: [][2]time.Duration{{2 * time.Second, 2 * time.Second}},
		},
		{
			name:      "429 with retry-after-ms, then success",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After-Ms": "150", "Retry-After": "1"}, body: rateLimited}, done},
			wantSlept: [][2]time.Duration{{150 * time.Millisecond, 150 * time.Millisecond}},
		},
		{
			name:      "429 with Retry-After as an HTTP date, then success",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After": now.Add(3 * time.Second).Format(http.TimeFormat)}, body: rateLimited}, done},
			wantSlept: [][2]time.Duration{{3 * time.Second, 3 * time.Second}},
		},
		{
			name:      "429 with a Retry-After date in the past retries at once",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, body: rateLimited}, done},
			wantSlept: [][2]time.Duration{{0, 0}},
		},
		{
			name:      "429 with an unreadable Retry-After backs off",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After": "soon"}, body: rateLimited}, done},
			wantSlept: [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}},
		},
		{
			name:    "429 asking for more than the cap gives up at once",
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "120"}, body: rateLimited}, done},
			wantErr: "attempt 1 of 3: HTTP 429 Too Many Requests: tokens: rate_limit_exceeded: Rate limit reached for gpt-4.1 on tokens per min (TPM): Limit 30000, Used 30000, Requested 500. (the server asks to retry after 2m0s, more than the 30s loopgate waits)",
		},
		{
			name:      "500 then success backs off",
			replies:   []reply{{status: 500, body: serverError}, done},
			wantSlept: [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}},
		},
		{
			name:      "503, 502 then success backs off exponentially",
			replies:   []reply{{status: 503, body: serverError}, {status: 502, body: serverError}, done},
			wantSlept: [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}, {500 * time.Millisecond, time.Second}},
		},
		{
			name:      "408 is retried",
			replies:   []reply{{status: 408, body: serverError}, done},
			wantSlept: [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}},
		},
		{
			name:      "500 until the retries run out",
			replies:   []reply{{status: 500, body: serverError}},
			wantSlept: [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}, {500 * time.Millisecond, time.Second}},
			wantErr:   "openai chat completion: attempt 3 of 3: HTTP 500 Internal Server Error: server_error: The server had an error while processing your request.",
		},
		{
			name:       "no retries configured",
			replies:    []reply{{status: 500, body: serverError}, done},
			maxRetries: providers.NoRetries,
			wantErr:    "attempt 1 of 1: HTTP 500",
		},
		{
			name:    "x-should-retry: false is honoured",
			replies: []reply{{status: 500, header: map[string]string{"X-Should-Retry": "false"}, body: serverError}, done},
			wantErr: "openai chat completion: HTTP 500",
		},
		{
			name:    "a 404 is not retried",
			replies: []reply{{status: 404, body: `{"error":{"message":"Unknown endpoint","type":"invalid_request_error","param":null,"code":null}}`}, done},
			wantErr: "openai chat completion: HTTP 404 Not Found: invalid_request_error: Unknown endpoint",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupOpenAI(t, openAIKey, nil, func(c *providers.OpenAIConfig) {
				c.Retry.Now = func() time.Time { return now }
				c.Retry.MaxRetries = tt.maxRetries
			})
			b.fake.script(tt.replies...)
			resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
					t.Errorf("error %v claims the run's ctx ended", err)
				}
			} else {
				if err != nil {
					t.Fatalf("Propose: %v", err)
				}
				mustDecision(t, resp.Output)
			}
			if want := len(tt.wantSlept) + 1; b.fake.count() != want {
				t.Errorf("%d requests, want %d", b.fake.count(), want)
			}
			slept := *b.slept
			if len(slept) != len(tt.wantSlept) {
				t.Fatalf("waits = %v, want %d of them", slept, len(tt.wantSlept))
			}
			for i, r := range tt.wantSlept {
				if slept[i] < r[0] || slept[i] > r[1] {
					t.Errorf("wait %d = %v, want within [%v, %v]", i, slept[i], r[0], r[1])
				}
			}
		})
	}
}

func TestOpenAIGivesUpWhenTheWaitWouldPassTheDeadline(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, nil)
	b.fake.script(reply{status: 429, header: map[string]string{"Retry-After": "20"}, body: `{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`}, ok(answer{text: "done"}))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := b.model.Propose(ctx, newTrail(t, "x").request(1))
	if err == nil || !strings.Contains(err.Error(), "would pass the run's deadline") {
		t.Fatalf("error = %v, want it to say the wait would pass the deadline", err)
	}
	if len(*b.slept) != 0 || b.fake.count() != 1 {
		t.Errorf("waited %v over %d requests, want no wait and 1 request", *b.slept, b.fake.count())
	}
}

func TestOpenAIRequestTimeoutIsRetriedAndIsNotTheRunsDeadline(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, func(c *providers.OpenAIConfig) {
		c.Retry.RequestTimeout = 50 * time.Millisecond
		c.Retry.MaxRetries = 1
	})
	b.fake.script(reply{hang: true})
	_, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	if err == nil || !strings.Contains(err.Error(), "attempt 2 of 2: no answer within the request timeout of 50ms") {
		t.Fatalf("error = %v, want the attempts timed out", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v wraps context.DeadlineExceeded: the worker would take it for the run's deadline", err)
	}
	// The error counts the attempts; the server may not have seen the
	// second one before it timed out.
	if n := b.fake.count(); n < 1 || n > 2 {
		t.Errorf("%d requests, want 1 or 2", n)
	}
}

func TestOpenAIReturnsWhenCtxIsCancelledMidRequest(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, nil)
	b.fake.script(reply{hang: true})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-b.fake.received
		cancel()
	}()
	_, err := b.model.Propose(ctx, newTrail(t, "x").request(1))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
	if n := b.fake.count(); n != 1 {
		t.Errorf("%d requests, want 1: a cancelled run is not retried", n)
	}
}

func TestOpenAISendsMaxTokensWhenSet(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, func(c *providers.OpenAIConfig) { c.MaxTokens = 512 })
	b.fake.script(ok(answer{text: "done"}))
	if _, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1)); err != nil {
		t.Fatal(err)
	}
	if req, _ := b.fake.decode(0); req.MaxCompletionTokens == nil || *req.MaxCompletionTokens != 512 {
		t.Errorf("max_completion_tokens = %v, want 512", req.MaxCompletionTokens)
	}
}

func TestOpenAIRefusesABrokenHistoryWithoutSendingIt(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", []tools.Spec{statusSpec}, nil)
	in, _ := json.Marshal("x")
	req := providers.Request{Step: 2, Tools: []tools.Spec{statusSpec}, History: []events.Turn{
		{Role: events.RoleUser, Content: in},
		{Role: events.RoleAssistant, Step: 1, Decision: &events.Decision{ToolCalls: []events.ToolCall{
			{ID: "s1c1", ProviderID: "call_1", Tool: "complaint_status", Args: json.RawMessage(`{}`)},
			{ID: "s1c2", ProviderID: "call_2", Tool: "complaint_status", Args: json.RawMessage(`{}`)},
		}}},
		{Role: events.RoleObservation, Step: 1, CallID: "s1c1", ProviderCallID: "call_1", Content: json.RawMessage(`{"status":"ok"}`)},
	}}
	_, err := b.model.Propose(t.Context(), req)
	if err == nil || !strings.Contains(err.Error(), `calls with no result: ["call_2"]`) {
		t.Errorf("error = %v, want the unanswered call named", err)
	}
	if n := b.fake.count(); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func compactJSON(b []byte) []byte {
	var v any
	json.Unmarshal(b, &v)
	out, _ := json.Marshal(v)
	return out
}

func TestOpenAISendsSessionMemoryBeforeTheTask(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, "", nil, nil)
	b.fake.script(ok(answer{text: "done"}))
	in, _ := json.Marshal("and the next one?")
	req := providers.Request{Step: 1, History: []events.Turn{
		{Role: events.RoleSession, Content: json.RawMessage(`{"id":"s-1","summary":"escalated SR-10422"}`)},
		{Role: events.RoleUser, Content: in},
	}}
	if _, err := b.model.Propose(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	got, _ := b.fake.decode(0)
	var first, second string
	if len(got.Messages) == 2 {
		json.Unmarshal(got.Messages[0].Content, &first)
		json.Unmarshal(got.Messages[1].Content, &second)
	}
	if !strings.Contains(first, "escalated SR-10422") || second != "and the next one?" {
		t.Errorf("messages = %+v, want the memory, then the task", got.Messages)
	}
}
