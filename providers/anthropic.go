package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/loopgate/loopgate/events"
)

// Anthropic defaults.
const (
	DefaultAnthropicBaseURL   = "https://api.anthropic.com"
	DefaultAnthropicMaxTokens = 4096
)

// AnthropicConfig configures an Anthropic provider.
type AnthropicConfig struct {
	// BaseURL of the Messages API. Defaults to DefaultAnthropicBaseURL.
	BaseURL string
	// Model is the model to ask (claude-sonnet-4-5…). Required.
	Model string
	// APIKey authenticates the requests, as the SDK sends it. Empty sends
	// none; the provider never reads the environment itself (Build does).
	APIKey string
	// MaxTokens bounds an answer; the API requires it. Defaults to
	// DefaultAnthropicMaxTokens (4096).
	MaxTokens int
	// Retry is the retry and timeout policy. Its zero value is the
	// default policy.
	Retry Retry
	// HTTPClient sends the requests. Defaults to a client of its own with
	// no overall timeout: Retry.RequestTimeout and ctx bound each call.
	HTTPClient *http.Client
	// Logger receives retries, and warnings about answers that report no
	// or negative token usage. Defaults to slog.Default().
	Logger *slog.Logger
}

// Anthropic proposes decisions with a Claude model through the Messages
// API, using the official SDK. The run's tools are offered as client
// tools; tool_use blocks become the decision's calls, each with its block
// id; a text answer that ends the turn (stop_reason end_turn) is the final
// answer. The assistant message is returned in Response.Message and
// replayed verbatim on the next steps, thinking blocks and all, unless the
// API would refuse it back (tool_use blocks without ids of their own, no
// content, an empty text block): then the turn is rebuilt from the
// decision or the output. The results of a turn's calls go back in one
// user message of tool_result blocks.
//
// It keeps no per-run state and is safe for concurrent use.
type Anthropic struct {
	svc       anthropic.MessageService
	model     string
	key       string
	maxTokens int
	retry     Retry
	log       *slog.Logger
}

// NewAnthropic returns an Anthropic provider. It sends nothing until
// Propose.
func NewAnthropic(cfg *AnthropicConfig) (*Anthropic, error) {
	if cfg == nil || cfg.Model == "" {
		return nil, errors.New("anthropic: the model is required")
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultAnthropicBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("anthropic: base URL %q is not an absolute http(s) URL", base)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	retry := cfg.Retry.withDefaults()
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		// Retries are loopgate's (Retry), the same for every provider.
		option.WithMaxRetries(0),
		// So that a connection lost mid-body is retried as lost (transportFailure).
		option.WithMiddleware(markBodyErrors),
		// Also keeps the SDK from refusing a large max_tokens without
		// streaming: it only checks when no timeout is set.
		option.WithRequestTimeout(retry.RequestTimeout),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	maxTokens := cfg.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultAnthropicMaxTokens
	}
	return &Anthropic{
		// The service, not anthropic.NewClient: the client loads
		// credentials from ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, profiles
		// and federation files, and its base URL from ANTHROPIC_BASE_URL.
		svc:       anthropic.NewMessageService(opts...),
		model:     cfg.Model,
		key:       cfg.APIKey,
		maxTokens: maxTokens,
		retry:     retry,
		log:       cmpLogger(cfg.Logger),
	}, nil
}

// Propose sends the run's conversation and translates the answer. It
// returns an error, and no output, when the history breaks the protocol,
// the API refuses the request (after the retries the policy allows), or
// ctx is done (the error then wraps ctx's).
func (a *Anthropic) Propose(ctx context.Context, req Request) (Response, error) {
	params, err := a.params(req)
	if err != nil {
		return Response{}, fmt.Errorf("anthropic: step %d: %w", req.Step, err)
	}
	var msg *anthropic.Message
	err = a.retry.do(ctx, a.log, "anthropic messages", func(ctx context.Context) error {
		m, err := a.svc.New(ctx, params)
		msg = m
		return err
	}, a.classify)
	if err != nil {
		return Response{}, maskErr(err, a.key)
	}
	return a.translate(ctx, msg)
}

// emptyText stands in for an empty assistant text, which the API refuses.
const emptyText = "(no output)"

func (a *Anthropic) params(req Request) (anthropic.MessageNewParams, error) {
	conv, err := buildConversation(req.History, anthropicCallIDs)
	if err != nil {
		return anthropic.MessageNewParams{}, err
	}
	p := anthropic.MessageNewParams{Model: anthropic.Model(a.model), MaxTokens: int64(a.maxTokens)}
	if req.Instructions != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.Instructions}}
	}
	for _, m := range conv {
		switch m.kind {
		case userMessage:
			block := anthropic.NewTextBlock(nonEmpty(m.text))
			// Session memory and the task are one user turn: the API
			// alternates roles.
			if n := len(p.Messages); n > 0 && p.Messages[n-1].OfUser != nil {
				p.Messages[n-1].OfUser.Content = append(p.Messages[n-1].OfUser.Content, block)
				continue
			}
			p.Messages = append(p.Messages, anthropic.NewUserMessage(block))
		case assistantMessage:
			if m.verbatim != nil {
				am := param.Override[anthropic.AssistantMessageParam](m.verbatim)
				p.Messages = append(p.Messages, anthropic.MessageParam{OfAssistant: &am})
				continue
			}
			var blocks []anthropic.ContentBlockParamUnion
			if m.text != "" || len(m.calls) == 0 {
				blocks = append(blocks, anthropic.NewTextBlock(nonEmpty(m.text)))
			}
			for _, c := range m.calls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, c.Args, c.Name))
			}
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		case resultsMessage:
			// All results of a turn in one user message.
			blocks := make([]anthropic.ContentBlockParamUnion, 0, len(m.results))
			for _, r := range m.results {
				blocks = append(blocks, anthropic.NewToolResultBlock(r.CallID, nonEmpty(r.Content), r.IsError))
			}
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		}
	}
	for _, s := range req.Tools {
		schema, err := toolSchema(s)
		if err != nil {
			return anthropic.MessageNewParams{}, err
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
			Name:        s.Name,
			Description: anthropic.String(s.Description),
			InputSchema: param.Override[anthropic.ToolInputSchemaParam](schema),
		}})
	}
	return p, nil
}

func nonEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return emptyText
	}
	return s
}

// anthropicCallIDs returns the tool_use ids of an assistant message as the
// Messages API sent it.
func anthropicCallIDs(msg json.RawMessage) ([]string, error) {
	var m struct {
		Content []struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		} `json:"content"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, err
	}
	var ids []string
	for _, b := range m.Content {
		if b.Type == "tool_use" {
			ids = append(ids, b.ID)
		}
	}
	return ids, nil
}

// translate turns a message into loopgate's decision. tool_use blocks
// become calls, their input as sent (input that is not a JSON object fails
// validation); the text of a turn that ended (end_turn, stop_sequence) is
// the final answer; a turn cut short or refused (max_tokens, refusal,
// pause_turn, model_context_window_exceeded) becomes an object that is no
// decision and shows why, so the worker records an invalid decision. Usage
// the server leaves out, or reports negative, is logged.
func (a *Anthropic) translate(ctx context.Context, m *anthropic.Message) (Response, error) {
	const what = "anthropic messages"
	if m == nil {
		return Response{}, errors.New("anthropic messages: empty response")
	}
	var raw struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal([]byte(m.RawJSON()), &raw); err != nil || len(raw.Content) == 0 {
		return Response{}, errors.New("anthropic messages: the response has no content")
	}
	if !m.JSON.Usage.Valid() {
		warnNoUsage(ctx, a.log, what)
	}
	u := m.Usage
	resp := Response{
		Name: a.model,
		Usage: events.Usage{
			// Cached input is input: a token budget counts it.
			InputTokens: tokens(ctx, a.log, what, "input_tokens", u.InputTokens) +
				tokens(ctx, a.log, what, "cache_creation_input_tokens", u.CacheCreationInputTokens) +
				tokens(ctx, a.log, what, "cache_read_input_tokens", u.CacheReadInputTokens),
			OutputTokens: tokens(ctx, a.log, what, "output_tokens", u.OutputTokens),
		},
		Message: marshalOutput(struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}{"assistant", raw.Content}),
	}
	var (
		calls []wireCall
		text  strings.Builder
		blank bool // a text block that is empty or only white space
	)
	for _, b := range m.Content {
		switch b.Type {
		case "tool_use":
			calls = append(calls, wireCall{Tool: b.Name, Args: argsOf(string(b.Input)), ProviderID: b.ID})
		case "text":
			text.WriteString(b.Text)
			blank = blank || strings.TrimSpace(b.Text) == ""
		}
	}
	// The message is replayed verbatim only if the API takes it back: its
	// tool_use blocks each with an id of its own, for the results to
	// answer, and some content, none of it an empty text block (an end_turn
	// or refusal with "content": [] or a lone "" text, which the API
	// refuses in an assistant message). Otherwise the turn is rebuilt: from
	// the decision under loopgate's call ids, or from the output when it is
	// no decision, whatever the stop reason.
	replayable := distinctIDs(calls) && len(m.Content) > 0 && !blank
	if !replayable {
		resp.Message = nil
	}
	switch {
	case m.StopReason == anthropic.StopReasonMaxTokens || m.StopReason == anthropic.StopReasonRefusal ||
		m.StopReason == anthropic.StopReasonPauseTurn || m.StopReason == anthropic.StopReasonModelContextWindowExceeded:
		resp.Output = marshalOutput(struct {
			StopReason string          `json:"stop_reason"`
			Content    json.RawMessage `json:"content"`
		}{string(m.StopReason), raw.Content})
	case len(calls) > 0:
		if !distinctIDs(calls) {
			for i := range calls {
				calls[i].ProviderID = ""
			}
		}
		resp.Output = marshalOutput(wireDecision{ToolCalls: calls})
	default:
		resp.Output = marshalOutput(wireDecision{Final: &events.FinalAnswer{Summary: text.String()}})
	}
	return resp, nil
}

// classify says whether an attempt's error is worth another.
func (a *Anthropic) classify(err error) failure {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		msg := apiErr.Message
		if msg == "" {
			msg = apiErr.RawJSON()
		}
		pe := &ProviderError{
			Provider:   "anthropic",
			StatusCode: apiErr.StatusCode,
			Type:       string(apiErr.Type()),
			Code:       apiErr.Details.ErrorCode,
			Message:    mask(bound(msg, maxErrorMessage), a.key),
			RequestID:  apiErr.RequestID,
		}
		// 529 overloaded is a 5xx: retried like the rest.
		return failure{err: pe, retryable: retryableStatus(apiErr.StatusCode, h), header: h}
	}
	return transportFailure(err)
}
