package providers_test

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/loopgate/loopgate/config"
)

// providerConfig is a config whose one agent's model is modelYAML.
func providerConfig(modelYAML string) fstest.MapFS {
	return fstest.MapFS{
		"loopgate.yaml": {Data: []byte(`version: 1
tools:
  - name: lookup
    description: Looks complaints up.
    permission: read
    args_schema: {type: object, additionalProperties: false, properties: {category: {type: string}}}
agents:
  helper:
    instructions: Help.
    model: ` + modelYAML + `
    tools: [lookup]
    roles: [operator]
policy:
  roles:
    operator: {call: [lookup]}
`)},
		"scripts/happy.json": {Data: []byte(`{"decisions": [{"final_answer":{"summary":"ok"}}]}`)},
	}
}

func TestConfigLoadsProviderSettings(t *testing.T) {
	t.Parallel()
	c, err := config.Load(providerConfig(`{provider: openai, base_url: "http://localhost:11434/v1", model: "qwen3:8b", api_key_env: OLLAMA_KEY,
      request_timeout: 90s, max_retries: 0, max_tokens: 1024, strict: false}`), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := c.Agents["helper"].Model
	if m.Provider != "openai" || m.BaseURL != "http://localhost:11434/v1" || m.Name != "qwen3:8b" || m.APIKeyEnv != "OLLAMA_KEY" ||
		m.RequestTimeout.D() != 90*time.Second || m.MaxRetries == nil || *m.MaxRetries != 0 || m.MaxTokens != 1024 || m.Strict == nil || *m.Strict {
		t.Errorf("model = %+v", m)
	}
	c, err = config.Load(providerConfig(`{provider: anthropic, model: claude-sonnet-4-5}`), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Agents["helper"].Model; m.MaxRetries != nil || m.Strict != nil || m.BaseURL != "" {
		t.Errorf("unset settings = %+v, want them unset (Build applies the defaults)", m)
	}
}

func TestConfigRejectsBadProviderSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		model     string
		wantField string
		wantMsg   string
	}{
		{name: "an unknown provider", model: `{provider: gemini, model: x}`, wantField: "/agents/helper/model/provider"},
		{name: "openai without a model", model: `{provider: openai}`, wantField: "/agents/helper/model", wantMsg: "model"},
		{name: "anthropic with an empty model", model: `{provider: anthropic, model: ""}`, wantField: "/agents/helper/model/model"},
		{name: "a script on openai", model: `{provider: openai, model: m, script: scripts/happy.json}`, wantField: "/agents/helper/model/script", wantMsg: "scripted provider, not of openai"},
		{name: "a base URL on scripted", model: `{provider: scripted, script: scripts/happy.json, base_url: "http://x"}`, wantField: "/agents/helper/model/base_url", wantMsg: "not of scripted"},
		{name: "a base URL that is not http", model: `{provider: openai, model: m, base_url: "localhost:11434"}`, wantField: "/agents/helper/model/base_url"},
		{name: "a base URL without a host", model: `{provider: openai, model: m, base_url: "http://"}`, wantField: "/agents/helper/model/base_url", wantMsg: "absolute"},
		{name: "a base URL with credentials", model: `{provider: openai, model: m, base_url: "https://user:pw@example.com/v1"}`, wantField: "/agents/helper/model/base_url", wantMsg: "credentials"},
		{name: "a key variable that is no name", model: `{provider: openai, model: m, api_key_env: "sk-123"}`, wantField: "/agents/helper/model/api_key_env"},
		{name: "a key instead of its variable", model: `{provider: openai, model: m, api_key: "sk-123"}`, wantField: "/agents/helper/model"},
		{name: "too many retries", model: `{provider: openai, model: m, max_retries: 11}`, wantField: "/agents/helper/model/max_retries"},
		{name: "negative retries", model: `{provider: openai, model: m, max_retries: -1}`, wantField: "/agents/helper/model/max_retries"},
		{name: "a timeout that is no duration", model: `{provider: anthropic, model: m, request_timeout: 30}`, wantField: "/agents/helper/model/request_timeout"},
		{name: "zero max tokens", model: `{provider: anthropic, model: m, max_tokens: 0}`, wantField: "/agents/helper/model/max_tokens"},
		{name: "strict on anthropic", model: `{provider: anthropic, model: m, strict: true}`, wantField: "/agents/helper/model/strict", wantMsg: "openai provider"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(providerConfig(tt.model), "loopgate.yaml")
			if err == nil {
				t.Fatalf("Load accepted model %s", tt.model)
			}
			if !strings.Contains(err.Error(), tt.wantField) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error = %v, want it at %s saying %q", err, tt.wantField, tt.wantMsg)
			}
		})
	}
}
