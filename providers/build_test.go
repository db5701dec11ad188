package providers_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/tools"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/providers"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func intp(i int) *int { return &i }

func TestBuildHTTPProviders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		given   config.Model
		env     map[string]string
		wantErr string
	}{
		{
			name:  "openai reads OPENAI_API_KEY for OpenAI's API",
			given: config.Model{Provider: "openai", Name: "gpt-4.1"},
			env:   map[string]string{"OPENAI_API_KEY": "sk-x"},
		},
		{
			name:    "openai without OPENAI_API_KEY for OpenAI's API",
			given:   config.Model{Provider: "openai", Name: "gpt-4.1"},
			wantErr: "model: openai: environment variable OPENAI_API_KEY is not set: it holds the API key for https://api.openai.com/v1",
		},
		{
			name:    "an empty key is no key",
			given:   config.Model{Provider: "openai", Name: "gpt-4.1"},
			env:     map[string]string{"OPENAI_API_KEY": ""},
			wantErr: "OPENAI_API_KEY is not set",
		},
		{
			name:  "openai at a local server needs no key",
			given: config.Model{Provider: "openai", Name: "qwen3:8b", BaseURL: "http://localhost:11434/v1"},
		},
		{
			name:    "a named key variable must be set",
			given:   config.Model{Provider: "openai", Name: "qwen3", BaseURL: "http://vllm:8000/v1", APIKeyEnv: "VLLM_API_KEY"},
			wantErr: "environment variable VLLM_API_KEY is not set: it holds the API key for http://vllm:8000/v1",
		},
		{
			name:  "a named key variable that is set",
			given: config.Model{Provider: "openai", Name: "qwen3", BaseURL: "http://vllm:8000/v1", APIKeyEnv: "VLLM_API_KEY"},
			env:   map[string]string{"VLLM_API_KEY": "token"},
		},
		{
			name:    "anthropic without ANTHROPIC_API_KEY for Anthropic's API",
			given:   config.Model{Provider: "anthropic", Name: "claude-sonnet-4-5"},
			env:     map[string]string{"OPENAI_API_KEY": "sk-x"},
			wantErr: "model: anthropic: environment variable ANTHROPIC_API_KEY is not set",
		},
		{
			name:  "anthropic with ANTHROPIC_API_KEY",
			given: config.Model{Provider: "anthropic", Name: "claude-sonnet-4-5"},
			env:   map[string]string{"ANTHROPIC_API_KEY": "sk-ant-x"},
		},
		{
			name:    "anthropic with a key variable of its own",
			given:   config.Model{Provider: "anthropic", Name: "claude-sonnet-4-5", APIKeyEnv: "CLAUDE_KEY"},
			env:     map[string]string{"ANTHROPIC_API_KEY": "sk-ant-x"},
			wantErr: "CLAUDE_KEY is not set",
		},
		{
			name:    "no model name",
			given:   config.Model{Provider: "openai", BaseURL: "http://localhost:1234/v1"},
			wantErr: "openai: the model is required",
		},
		{
			name:    "a base URL that is not http",
			given:   config.Model{Provider: "anthropic", Name: "c", BaseURL: "ftp://example.com", APIKeyEnv: "K"},
			env:     map[string]string{"K": "k"},
			wantErr: "is not an absolute http(s) URL",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := providers.Build(tt.given, providers.Env{LookupEnv: env(tt.env)})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("BuildWith error = %v, want it to contain %q", err, tt.wantErr)
				}
				if m != nil {
					t.Errorf("a model came with the error")
				}
				return
			}
			if err != nil {
				t.Fatalf("BuildWith: %v", err)
			}
			if m == nil {
				t.Fatal("no model")
			}
		})
	}
}

func TestBuildNeverSendsTheDefaultKeyToAnotherServer(t *testing.T) {
	t.Parallel()
	// OPENAI_API_KEY is set, but the server is not OpenAI's: the fake
	// refuses any credentials.
	f := newFakeOpenAI(t, "", nil)
	f.script(ok(answer{text: "hi"}))
	m, err := providers.Build(config.Model{Provider: "openai", Name: "llama3", BaseURL: f.baseURL()}, providers.Env{LookupEnv: env(map[string]string{"OPENAI_API_KEY": "sk-real-openai-key"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Propose(t.Context(), newTrail(t, "x").request(1)); err != nil {
		t.Fatal(err)
	}
}

func TestBuildSendsANamedKeyAndHonoursTheSettings(t *testing.T) {
	t.Parallel()
	f := newFakeOpenAI(t, "vllm-token", nil)
	f.script(reply{status: 503, body: `{"error":{"message":"busy","type":"server_error","param":null,"code":null}}`}, ok(answer{text: "hi"}))
	m, err := providers.Build(config.Model{Provider: "openai", Name: "qwen3", BaseURL: f.baseURL(), APIKeyEnv: "VLLM_API_KEY", MaxRetries: intp(0), MaxTokens: 256},
		providers.Env{LookupEnv: env(map[string]string{"VLLM_API_KEY": "vllm-token"})})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := m.Propose(t.Context(), newTrail(t, "x").request(1))
	if err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("Propose = %s, %v; want the 503, max_retries: 0 retrying nothing", resp.Output, err)
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if req, _ := f.decode(0); req.Model != "qwen3" || req.MaxCompletionTokens == nil || *req.MaxCompletionTokens != 256 {
		t.Errorf("request model %q, max_completion_tokens %v", req.Model, req.MaxCompletionTokens)
	}
}

func TestBuildAnthropicAgainstAnotherServer(t *testing.T) {
	t.Parallel()
	f := newFakeAnthropic(t, "proxy-key", nil)
	f.script(ok(answer{text: "hi"}))
	m, err := providers.Build(config.Model{Provider: "anthropic", Name: "claude-haiku-4-5", BaseURL: f.baseURL(), APIKeyEnv: "PROXY_KEY"},
		providers.Env{LookupEnv: env(map[string]string{"PROXY_KEY": "proxy-key", "ANTHROPIC_API_KEY": "sk-ant-other"})})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := m.Propose(t.Context(), newTrail(t, "x").request(1))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Name != "claude-haiku-4-5" {
		t.Errorf("Name = %q, want the configured model (the pricing table's key)", resp.Name)
	}
}

// redirect sends every request to the fake server instead, as if the fake
// were the host the request names.
type redirect struct{ to *url.URL }

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = r.to.Scheme, r.to.Host
	return http.DefaultTransport.RoundTrip(req)
}

func TestBuildDefaultsForOpenAIsOwnAPI(t *testing.T) {
	t.Parallel()
	// api.openai.com, reached through a transport that lands on the fake:
	// the default key variable is read and sent, and strict mode is on.
	f := newFakeOpenAI(t, "sk-from-the-env", []tools.Spec{statusSpec, lookupSpec})
	f.strict = true
	f.script(ok(answer{text: "hi"}))
	to, _ := url.Parse(f.srv.URL)
	m, err := providers.Build(config.Model{Provider: "openai", Name: "gpt-4.1-mini"}, providers.Env{
		LookupEnv:  env(map[string]string{"OPENAI_API_KEY": "sk-from-the-env"}),
		HTTPClient: &http.Client{Transport: redirect{to}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Propose(t.Context(), newTrail(t, "x").request(1, statusSpec, lookupSpec)); err != nil {
		t.Fatal(err)
	}
	req, _ := f.decode(0)
	if s := req.Tools[0].Function.Strict; s == nil || !*s {
		t.Errorf("%s: strict = %v, want true by default for api.openai.com", req.Tools[0].Function.Name, s)
	}
	if s := req.Tools[1].Function.Strict; s != nil {
		t.Errorf("%s: strict = %v, want it left out: its schema does not fit strict mode", req.Tools[1].Function.Name, *s)
	}
}
