package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/loopgate/loopgate/events"
)

// DefaultOpenAIBaseURL is OpenAI's own API.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// OpenAIConfig configures an OpenAI provider.
type OpenAIConfig struct {
	// BaseURL of a server speaking OpenAI's Chat Completions: OpenAI,
	// Ollama (http://localhost:11434/v1), vLLM, llama.cpp's server, LM
	// Studio. Defaults to DefaultOpenAIBaseURL.
	BaseURL string
	// Model is the model to ask, as the server names it. Required.
	Model string
	// APIKey is sent as a bearer token. Empty sends none (local servers);
	// the provider never reads the environment itself (Build does).
	APIKey string
	// Strict sends each tool whose schema strict mode can express with
	// "strict": true, so the server constrains the arguments to it; the
	// others are sent as they are, non-strict. Defaults to true for
	// api.openai.com and false for other servers, many of which reject or
	// ignore it.
	Strict *bool
	// MaxTokens bounds an answer (max_completion_tokens). Defaults to 0:
	// the server's own limit.
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

// OpenAI proposes decisions with a model behind OpenAI's Chat Completions
// API, using the official SDK. The run's tools are offered as function
// tools (parallel calls allowed); the model's tool calls become the
// decision's calls, each with the provider's id; a text answer becomes the
// final answer. The provider's assistant message is returned in
// Response.Message and replayed verbatim on the next steps, unless the API
// would refuse it back (tool calls without ids of their own, no content
// and no tool calls): then the turn is rebuilt from the decision or the
// output.
//
// It keeps no per-run state and is safe for concurrent use.
type OpenAI struct {
	svc       openai.ChatCompletionService
	model     string
	key       string
	strict    bool
	maxTokens int
	retry     Retry
	log       *slog.Logger
}

// NewOpenAI returns an OpenAI provider. It sends nothing until Propose.
func NewOpenAI(cfg *OpenAIConfig) (*OpenAI, error) {
	if cfg == nil || cfg.Model == "" {
		return nil, errors.New("openai: the model is required")
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai: base URL %q is not an absolute http(s) URL", base)
	}
	strict := u.Hostname() == "api.openai.com"
	if cfg.Strict != nil {
		strict = *cfg.Strict
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
		option.WithRequestTimeout(retry.RequestTimeout),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &OpenAI{
		// The service, not openai.NewClient: the client reads OPENAI_API_KEY,
		// OPENAI_BASE_URL and more from the environment, and would send an
		// OpenAI key to whatever server the config names.
		svc:       openai.NewChatCompletionService(opts...),
		model:     cfg.Model,
		key:       cfg.APIKey,
		strict:    strict,
		maxTokens: cfg.MaxTokens,
		retry:     retry,
		log:       cmpLogger(cfg.Logger),
	}, nil
}

// Propose sends the run's conversation and translates the answer. It
// returns an error, and no output, when the history breaks the protocol,
// the server refuses the request (after the retries the policy allows), or
// ctx is done (the error then wraps ctx's).
func (o *OpenAI) Propose(ctx context.Context, req Request) (Response, error) {
	params, err := o.params(req)
	if err != nil {
		return Response{}, fmt.Errorf("openai: step %d: %w", req.Step, err)
	}
	var completion *openai.ChatCompletion
	err = o.retry.do(ctx, o.log, "openai chat completion", func(ctx context.Context) error {
		c, err := o.svc.New(ctx, params)
		completion = c
		return err
	}, o.classify)
	if err != nil {
		return Response{}, maskErr(err, o.key)
	}
	return o.translate(ctx, completion)
}

// params builds the request: system message, the rebuilt conversation and
// the tools.
func (o *OpenAI) params(req Request) (openai.ChatCompletionNewParams, error) {
	conv, err := buildConversation(req.History, openAICallIDs)
	if err != nil {
		return openai.ChatCompletionNewParams{}, err
	}
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(o.model)}
	if req.Instructions != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.Instructions))
	}
	for _, m := range conv {
		switch m.kind {
		case userMessage:
			p.Messages = append(p.Messages, openai.UserMessage(m.text))
		case assistantMessage:
			var a openai.ChatCompletionAssistantMessageParam
			if m.verbatim != nil {
				a = param.Override[openai.ChatCompletionAssistantMessageParam](m.verbatim)
			} else {
				if m.text != "" || len(m.calls) == 0 {
					a.Content.OfString = openai.String(m.text)
				}
				for _, c := range m.calls {
					a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
						OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
							ID:       c.ID,
							Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: string(c.Args)},
						},
					})
				}
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case resultsMessage:
			// One tool message per call, right after the assistant message.
			for _, r := range m.results {
				p.Messages = append(p.Messages, openai.ToolMessage(r.Content, r.CallID))
			}
		}
	}
	for _, s := range req.Tools {
		schema, err := toolSchema(s)
		if err != nil {
			return openai.ChatCompletionNewParams{}, err
		}
		fn := shared.FunctionDefinitionParam{Name: s.Name, Description: openai.String(s.Description), Parameters: make(shared.FunctionParameters, len(schema))}
		for k, v := range schema {
			fn.Parameters[k] = v
		}
		if o.strict && fitsStrict(schema) {
			fn.Strict = openai.Bool(true)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	if len(p.Tools) > 0 {
		// OpenAI refuses parallel_tool_calls without tools.
		p.ParallelToolCalls = openai.Bool(true)
	}
	if o.maxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(int64(o.maxTokens))
	}
	return p, nil
}

// openAICallIDs returns the tool-call ids of an assistant message as an
// OpenAI server sent it.
func openAICallIDs(msg json.RawMessage) ([]string, error) {
	var m struct {
		ToolCalls []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(m.ToolCalls))
	for _, c := range m.ToolCalls {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// translate turns a completion into loopgate's decision. Tool calls become
// calls, with their arguments as sent (a string that is not JSON stays a
// string, and fails validation); a text answer is the final answer; a
// truncated or filtered answer (finish_reason length or content_filter)
// or a refusal becomes an object that is no decision and shows why, so the
// worker records an invalid decision. Usage the server leaves out, or
// reports negative, is logged.
func (o *OpenAI) translate(ctx context.Context, c *openai.ChatCompletion) (Response, error) {
	const what = "openai chat completion"
	if c == nil || len(c.Choices) == 0 {
		return Response{}, errors.New("openai chat completion: the response has no choices")
	}
	choice := c.Choices[0]
	msg := json.RawMessage(choice.Message.RawJSON())
	if !json.Valid(msg) {
		return Response{}, errors.New("openai chat completion: the response's message is not JSON")
	}
	if !c.JSON.Usage.Valid() {
		warnNoUsage(ctx, o.log, what)
	}
	resp := Response{
		Name: o.model,
		Usage: events.Usage{
			InputTokens:  tokens(ctx, o.log, what, "prompt_tokens", c.Usage.PromptTokens),
			OutputTokens: tokens(ctx, o.log, what, "completion_tokens", c.Usage.CompletionTokens),
		},
		Message: msg,
	}
	var calls []wireCall
	for _, tc := range choice.Message.ToolCalls {
		name, args := tc.Function.Name, tc.Function.Arguments
		if tc.Type == "custom" {
			name, args = tc.Custom.Name, tc.Custom.Input
		}
		calls = append(calls, wireCall{Tool: name, Args: argsOf(args), ProviderID: tc.ID})
	}
	// The message is replayed verbatim only if the API takes it back: its
	// tool calls each with an id of its own, for the results to answer
	// (local servers may send none), and without tool calls some content
	// (a refusal, or an answer a reasoning model spent thinking, has
	// content null, which Chat Completions refuses in an assistant message).
	// Otherwise the turn is rebuilt: from the decision under loopgate's call
	// ids, or from the output when it is no decision, whatever the finish
	// reason.
	replayable := distinctIDs(calls)
	if len(calls) == 0 {
		replayable = choice.Message.Content != ""
	}
	if !replayable {
		resp.Message = nil
	}
	switch {
	case choice.FinishReason == "length" || choice.FinishReason == "content_filter" || choice.Message.Refusal != "":
		resp.Output = marshalOutput(struct {
			FinishReason string          `json:"finish_reason"`
			Message      json.RawMessage `json:"message"`
		}{choice.FinishReason, msg})
	case len(calls) > 0:
		if !distinctIDs(calls) {
			for i := range calls {
				calls[i].ProviderID = ""
			}
		}
		resp.Output = marshalOutput(wireDecision{ToolCalls: calls})
	default:
		resp.Output = marshalOutput(wireDecision{Final: &events.FinalAnswer{Summary: choice.Message.Content}})
	}
	return resp, nil
}

// classify says whether an attempt's error is worth another.
func (o *OpenAI) classify(err error) failure {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		msg := apiErr.Message
		if msg == "" && !apiErr.JSON.Message.Valid() {
			msg = apiErr.RawJSON()
		}
		pe := &ProviderError{
			Provider:   "openai",
			StatusCode: apiErr.StatusCode,
			Type:       apiErr.Type,
			Code:       apiErr.Code,
			Message:    mask(bound(msg, maxErrorMessage), o.key),
			RequestID:  h.Get("X-Request-Id"),
		}
		return failure{err: pe, retryable: retryableStatus(apiErr.StatusCode, h), header: h}
	}
	return transportFailure(err)
}

// fitsStrict reports whether strict mode can take a tool's schema. Strict
// mode constrains decoding to a subset of JSON Schema in which every
// object lists all its properties as required and sets
// additionalProperties to false; a keyword outside the subset (minLength,
// pattern, default, oneOf… the subset differs by model) makes the server
// refuse the request. So only schemas built from the keywords below are
// sent strict; any other is sent non-strict — loopgate validates every
// call either way.
func fitsStrict(schema map[string]json.RawMessage) bool {
	b, err := json.Marshal(schema)
	if err != nil {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		return false
	}
	_, anyOf := root["anyOf"]
	return !anyOf && root["type"] == "object" && strictFits(root, 0)
}

// strictKeywords are the keywords every model with strict mode accepts.
var strictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true,
	"description": true, "title": true, "$ref": true, "$defs": true, "definitions": true,
}

// strictFits checks one subschema against strict mode's rules, to OpenAI's
// nesting limit.
func strictFits(s map[string]any, depth int) bool {
	if depth > 10 {
		return false
	}
	for k := range s {
		if !strictKeywords[k] {
			return false
		}
	}
	sub := func(v any) bool {
		m, ok := v.(map[string]any)
		return ok && strictFits(m, depth+1)
	}
	if props, ok := s["properties"]; ok || isType(s, "object") {
		pm, _ := props.(map[string]any)
		if props != nil && pm == nil {
			return false
		}
		if s["additionalProperties"] != false {
			return false
		}
		req, _ := s["required"].([]any)
		required := map[string]bool{}
		for _, r := range req {
			name, _ := r.(string)
			if _, ok := pm[name]; !ok || required[name] {
				return false
			}
			required[name] = true
		}
		if len(required) != len(pm) {
			return false
		}
		for _, p := range pm {
			if !sub(p) {
				return false
			}
		}
	} else if _, ok := s["additionalProperties"]; ok {
		return false
	}
	if items, ok := s["items"]; ok && !sub(items) {
		return false
	}
	if anyOf, ok := s["anyOf"]; ok {
		list, _ := anyOf.([]any)
		if len(list) == 0 {
			return false
		}
		for _, a := range list {
			if !sub(a) {
				return false
			}
		}
	}
	for _, k := range []string{"$defs", "definitions"} {
		if defs, ok := s[k]; ok {
			dm, _ := defs.(map[string]any)
			if dm == nil {
				return false
			}
			for _, d := range dm {
				if !sub(d) {
					return false
				}
			}
		}
	}
	return true
}

// isType reports whether a schema's type is, or includes, t.
func isType(s map[string]any, t string) bool {
	switch v := s["type"].(type) {
	case string:
		return v == t
	case []any:
		for _, x := range v {
			if x == t {
				return true
			}
		}
	}
	return false
}

func cmpLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
