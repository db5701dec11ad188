package providers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/providers"
	"github.com/loopgate/loopgate/tools"
)

const anthropicKey = "sk-ant-api03-SECRET0123456789abcdef"

type anthropicBundle struct {
	fake  *fakeAnthropic
	model *providers.Anthropic
	slept *[]time.Duration
	logs  *bytes.Buffer
}

func setupAnthropic(t *testing.T, key string, specs []tools.Spec, cfg func(*providers.AnthropicConfig)) anthropicBundle {
	t.Helper()
	f := newFakeAnthropic(t, key, specs)
	var slept []time.Duration
	logs := &bytes.Buffer{}
	c := &providers.AnthropicConfig{
		BaseURL: f.baseURL(), Model: "claude-sonnet-4-5", APIKey: key, Retry: fastRetry(&slept),
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}
	if cfg != nil {
		cfg(c)
	}
	m, err := providers.NewAnthropic(c)
	if err != nil {
		t.Fatal(err)
	}
	return anthropicBundle{fake: f, model: m, slept: &slept, logs: logs}
}

func TestAnthropicSendsSystemTaskToolsAndMaxTokens(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, anthropicKey, []tools.Spec{lookupSpec, statusSpec}, nil)
	b.fake.script(ok(answer{text: "done"}))
	if _, err := b.model.Propose(t.Context(), newTrail(t, "Escalate the oldest sanitation complaints.").request(1, lookupSpec, statusSpec)); err != nil {
		t.Fatal(err)
	}
	req, _ := b.fake.decode(0)
	if req.Model != "claude-sonnet-4-5" || req.MaxTokens != providers.DefaultAnthropicMaxTokens {
		t.Errorf("model %q, max_tokens %d", req.Model, req.MaxTokens)
	}
	var system []struct{ Type, Text string }
	if err := json.Unmarshal(req.System, &system); err != nil || len(system) != 1 || system[0].Text != "You are the CityOps assistant." {
		t.Errorf("system = %s, want the instructions", req.System)
	}
	if len(req.Messages) != 1 || req.Messages[0].Content[0].Text != "Escalate the oldest sanitation complaints." {
		t.Errorf("messages = %+v, want the task as the user's text", req.Messages)
	}
	// The fake checked each tool's input_schema against its spec.
}

func TestAnthropicMultiStepSendsAllResultsInOneUserMessage(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, anthropicKey, []tools.Spec{lookupSpec, statusSpec}, nil)
	b.fake.thinking = true
	calls := []answerCall{
		{id: "toolu_01A", name: "complaint_status", args: `{"request_id":"SR-10422"}`},
		{id: "toolu_01B", name: "complaint_status", args: `{"request_id":"SR-10488"}`},
	}
	b.fake.script(ok(answer{text: "I'll check both.", calls: calls}), ok(answer{text: "Both are open."}))
	tr := newTrail(t, "How are SR-10422 and SR-10488?")
	resp1, err := b.model.Propose(t.Context(), tr.request(1, lookupSpec, statusSpec))
	if err != nil {
		t.Fatal(err)
	}
	d := tr.proposed(1, resp1)
	if d == nil || len(d.ToolCalls) != 2 || d.ToolCalls[0].ProviderID != "toolu_01A" || d.ToolCalls[1].ProviderID != "toolu_01B" {
		t.Fatalf("step 1 = %s, want both tool_use blocks as calls", resp1.Output)
	}
	tr.observe(1, "s1c1", `{"status":"ok","data":{"status":"open"}}`)
	tr.observe(1, "s1c2", `{"status":"error","error":"timeout","message":"the operation may still be running"}`)
	resp2, err := b.model.Propose(t.Context(), tr.request(2, lookupSpec, statusSpec))
	if err != nil {
		t.Fatal(err)
	}
	if d := mustDecision(t, resp2.Output); d.Final == nil || d.Final.Summary != "Both are open." {
		t.Errorf("step 2 = %s", resp2.Output)
	}

	req, raw := b.fake.decode(1)
	if len(req.Messages) != 3 || req.Messages[1].Role != "assistant" || req.Messages[2].Role != "user" {
		t.Fatalf("step 2 messages = %+v, want user, assistant, user", req.Messages)
	}
	// The assistant message is the API's, thinking block and signature
	// included.
	var sent struct {
		Content json.RawMessage `json:"content"`
	}
	json.Unmarshal([]byte(b.fake.render(answer{text: "I'll check both.", calls: calls})), &sent)
	if want := `{"role":"assistant","content":` + string(sent.Content) + `}`; !sameJSON(raw[1], []byte(want)) {
		t.Errorf("replayed assistant message = %s, want %s", raw[1], want)
	}
	results := req.Messages[2].Content
	if len(results) != 2 {
		t.Fatalf("results message = %+v, want two tool_result blocks", results)
	}
	for i, want := range []struct {
		id      string
		isError bool
	}{{"toolu_01A", false}, {"toolu_01B", true}} {
		r := results[i]
		if r.Type != "tool_result" || r.ToolUseID != want.id || (r.IsError != nil && *r.IsError) != want.isError {
			t.Errorf("result %d = %s %s is_error %v, want %s is_error %v", i, r.Type, r.ToolUseID, r.IsError, want.id, want.isError)
		}
		if !strings.Contains(resultText(t, r.Content), `"status"`) {
			t.Errorf("result %d content = %s, want the observation", i, r.Content)
		}
	}
}

func TestAnthropicInputThatIsNoObjectBecomesAnInvalidDecision(t *testing.T) {
	t.Parallel()
	// The API always sends an object; a compatible server or a proxy may
	// send a string holding broken JSON. It is passed on, not repaired.
	b := setupAnthropic(t, "", []tools.Spec{statusSpec}, nil)
	const broken = `"{\"request_id\": \"SR-1"`
	b.fake.script(ok(answer{calls: []answerCall{{id: "toolu_bad", name: "complaint_status", args: broken}}}))
	resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1, statusSpec))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := parseDecision(t, resp.Output, 1); d != nil {
		t.Fatalf("input that is not an object passed validation: %s", resp.Output)
	}
	if !strings.Contains(string(resp.Output), `"args":`+broken) {
		t.Errorf("output = %s, want the input as sent", resp.Output)
	}
}

func TestAnthropicMaxTokensIsNoDecisionAndItsErrorGoesBack(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, "", nil, nil)
	b.fake.script(ok(answer{text: "The oldest complaint is SR-10", stop: "max_tokens"}), ok(answer{text: "SR-10422."}))
	tr := newTrail(t, "oldest?")
	resp, err := b.model.Propose(t.Context(), tr.request(1))
	if err != nil {
		t.Fatal(err)
	}
	if d := tr.proposed(1, resp); d != nil {
		t.Fatalf("a truncated answer (max_tokens) became decision %s", resp.Output)
	}
	if !strings.Contains(string(resp.Output), `"stop_reason":"max_tokens"`) {
		t.Errorf("output = %s, want it to say why it is no decision", resp.Output)
	}
	obs := tr.observeInvalid(1)
	if _, err := b.model.Propose(t.Context(), tr.request(2)); err != nil {
		t.Fatal(err)
	}
	req, _ := b.fake.decode(1)
	if len(req.Messages) != 3 || req.Messages[2].Role != "user" || req.Messages[2].Content[0].Text != obs {
		t.Errorf("step 2 messages = %+v, want the error as the user's text", req.Messages)
	}
}

func TestAnthropicToolUseOfAnInvalidDecisionIsAnsweredWithTheError(t *testing.T) {
	t.Parallel()
	// The provider's message had a tool_use: replayed, it must be answered
	// by a tool_result, even though loopgate found the decision invalid.
	b := setupAnthropic(t, "", []tools.Spec{statusSpec}, nil)
	b.fake.script(
		ok(answer{calls: []answerCall{{id: "toolu_1", name: "complaint_status", args: `{"request_id":"SR-1"}`}}, stop: "tool_use"}),
		ok(answer{text: "done"}),
	)
	tr := newTrail(t, "x")
	resp, err := b.model.Propose(t.Context(), tr.request(1, statusSpec))
	if err != nil {
		t.Fatal(err)
	}
	// Pretend loopgate refused the decision (as for a call over the
	// decision's limits): the provider message still has the tool_use.
	resp.Output = []byte(`{"tool_calls":[]}`)
	if d := tr.proposed(1, resp); d != nil {
		t.Fatal("want an invalid decision")
	}
	obs := tr.observeInvalid(1)
	if _, err := b.model.Propose(t.Context(), tr.request(2, statusSpec)); err != nil {
		t.Fatal(err)
	}
	req, _ := b.fake.decode(1)
	last := req.Messages[2].Content
	if len(last) != 1 || last[0].Type != "tool_result" || last[0].ToolUseID != "toolu_1" || last[0].IsError == nil || !*last[0].IsError {
		t.Fatalf("step 2 last message = %+v, want toolu_1's result marked is_error", last)
	}
	if content := resultText(t, last[0].Content); content != obs {
		t.Errorf("result content = %q, want the observation %q", content, obs)
	}
}

func TestAnthropicOverloadedAndRateLimitedAreRetried(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, anthropicKey, nil, nil)
	b.fake.script(
		reply{status: 529, header: map[string]string{"Request-Id": "req_011"}, body: anthropicErrorOf("overloaded_error", "Overloaded")},
		reply{status: 429, header: map[string]string{"Retry-After": "7"}, body: anthropicErrorOf("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")},
		ok(answer{text: "done"}),
	)
	resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	if err != nil {
		t.Fatal(err)
	}
	mustDecision(t, resp.Output)
	slept := *b.slept
	if len(slept) != 2 || slept[0] < 250*time.Millisecond || slept[0] > 500*time.Millisecond || slept[1] != 7*time.Second {
		t.Errorf("waits = %v, want a backoff after the 529 and Retry-After's 7s after the 429", slept)
	}
	if n := b.fake.count(); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

func TestAnthropicReturnsTheErrorBody(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, anthropicKey, nil, nil)
	b.fake.script(reply{status: 400, header: map[string]string{"Request-Id": "req_018EeWyXxfu5pfWkrYcMdjWG"},
		body: anthropicErrorOf("invalid_request_error", "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_X")})
	_, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	var pe *providers.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v, want a *providers.ProviderError", err)
	}
	if pe.StatusCode != 400 || pe.Type != "invalid_request_error" || !strings.Contains(pe.Message, "unexpected `tool_use_id`") || pe.RequestID != "req_018EeWyXxfu5pfWkrYcMdjWG" {
		t.Errorf("ProviderError = %+v", pe)
	}
	if n := b.fake.count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestAnthropicKeyIsSentButNeverInErrorsOrLogs(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, anthropicKey, nil, nil)
	b.fake.script(
		reply{status: 500, body: anthropicErrorOf("api_error", "Internal server error")},
		reply{status: 401, body: anthropicErrorOf("authentication_error", "invalid x-api-key "+anthropicKey)},
	)
	_, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error %q holds the key", err)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "retrying") || strings.Contains(logs, "SECRET") {
		t.Errorf("logs = %q, want the retry logged without the key", logs)
	}
}

func TestAnthropicWithoutAKeySendsNoCredentials(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, "", nil, nil)
	b.fake.script(ok(answer{text: "hi"}))
	if _, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1)); err != nil {
		t.Fatal(err)
	}
}

func TestAnthropicUsageCountsCachedInput(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, "", nil, nil)
	b.fake.script(reply{status: 200, body: `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi"}],` +
		`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":20,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":5}}`})
	resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	if err != nil {
		t.Fatal(err)
	}
	if want := (events.Usage{InputTokens: 1120, OutputTokens: 5}); resp.Usage != want {
		t.Errorf("Usage = %+v, want %+v", resp.Usage, want)
	}
}

func TestAnthropicEmptyFinalTextIsAnInvalidDecision(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, "", nil, nil)
	b.fake.script(ok(answer{}))
	resp, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := parseDecision(t, resp.Output, 1); d != nil {
		t.Errorf("an empty end_turn became decision %s", resp.Output)
	}
}

func TestAnthropicReturnsWhenCtxIsCancelledMidRequest(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, "", nil, nil)
	b.fake.script(reply{hang: true})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-b.fake.received
		cancel()
	}()
	if _, err := b.model.Propose(ctx, newTrail(t, "x").request(1)); !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
}

func TestAnthropicLargeMaxTokensNeedsNoStreaming(t *testing.T) {
	t.Parallel()
	// The SDK refuses a non-streaming request it expects to take over ten
	// minutes — unless a request timeout is set, which the provider does.
	b := setupAnthropic(t, "", nil, func(c *providers.AnthropicConfig) { c.MaxTokens = 64000 })
	b.fake.script(ok(answer{text: "hi"}))
	if _, err := b.model.Propose(t.Context(), newTrail(t, "x").request(1)); err != nil {
		t.Fatal(err)
	}
	if req, _ := b.fake.decode(0); req.MaxTokens != 64000 {
		t.Errorf("max_tokens = %d", req.MaxTokens)
	}
}

func TestAnthropicSendsSessionMemoryAndTaskAsOneUserTurn(t *testing.T) {
	t.Parallel()
	b := setupAnthropic(t, "", nil, nil)
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
	if len(got.Messages) != 1 || len(got.Messages[0].Content) != 2 ||
		!strings.Contains(got.Messages[0].Content[0].Text, "escalated SR-10422") || got.Messages[0].Content[1].Text != "and the next one?" {
		t.Errorf("messages = %+v, want one user message: the memory, then the task", got.Messages)
	}
}

// resultText is a tool_result's content: a string, or text blocks.
func resultText(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct{ Type, Text string }
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatalf("tool_result content %s: %v", raw, err)
	}
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type != "text" {
			t.Fatalf("tool_result content block of type %q", bl.Type)
		}
		b.WriteString(bl.Text)
	}
	return b.String()
}
