// Package providers holds loopgate's model providers over HTTP: an
// OpenAI-compatible Chat Completions client (OpenAI, Ollama, vLLM,
// llama.cpp's server, LM Studio) and Anthropic Messages, on the official
// SDKs. They translate a run's folded history into each provider's
// conversation, honouring its protocol (the assistant turn verbatim before
// the tool results, every result carrying its call's id, all results of a
// turn in one round), and the provider's answer back into loopgate's
// decision JSON, which the worker then validates like any model output.
//
// They live apart from package model so that the worker, which only needs
// the Model interface, does not link the SDKs.
package providers

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/model"
)

// Aliases of the seam's types, so the providers read as they are: models.
type (
	// Request is model.Request.
	Request = model.Request
	// Response is model.Response.
	Response = model.Response
	// Model is model.Model.
	Model = model.Model
	// Env is model.Env.
	Env = model.Env
)

// Build makes the model a profile asks for, every provider included:
// "openai" and "anthropic" here, "scripted" by model.BuildWith. For the
// HTTP providers it applies the defaults of the settings the profile
// leaves out (see config.Model) and reads the API key now, from the
// variable the profile names in api_key_env or, for the provider's own API
// only, OPENAI_API_KEY / ANTHROPIC_API_KEY: a key is never sent to another
// server unless its variable is named. A named variable, or the default one
// of the provider's own API, that is unset or empty is an error naming it.
func Build(m config.Model, env Env) (Model, error) {
	if env.LookupEnv == nil {
		env.LookupEnv = os.LookupEnv
	}
	switch m.Provider {
	case "openai":
		base := cmp.Or(m.BaseURL, DefaultOpenAIBaseURL)
		key, err := apiKey(m, env, base, "OPENAI_API_KEY", DefaultOpenAIBaseURL)
		if err != nil {
			return nil, err
		}
		o, err := NewOpenAI(&OpenAIConfig{BaseURL: base, Model: m.Name, APIKey: key, Strict: m.Strict, MaxTokens: m.MaxTokens, Retry: retryOf(m), Logger: env.Logger, HTTPClient: env.HTTPClient})
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		return o, nil
	case "anthropic":
		base := cmp.Or(m.BaseURL, DefaultAnthropicBaseURL)
		key, err := apiKey(m, env, base, "ANTHROPIC_API_KEY", DefaultAnthropicBaseURL)
		if err != nil {
			return nil, err
		}
		a, err := NewAnthropic(&AnthropicConfig{BaseURL: base, Model: m.Name, APIKey: key, MaxTokens: m.MaxTokens, Retry: retryOf(m), Logger: env.Logger, HTTPClient: env.HTTPClient})
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		return a, nil
	}
	return model.BuildWith(m, env)
}

// apiKey reads the key of an HTTP provider at base. official is the
// provider's own API, whose key variable defaults to defaultVar.
func apiKey(m config.Model, env Env, base, defaultVar, official string) (string, error) {
	name := m.APIKeyEnv
	if name == "" {
		if !sameHost(base, official) {
			return "", nil // a local server: no key unless one is named
		}
		name = defaultVar
	}
	if v, ok := env.LookupEnv(name); ok && v != "" {
		return v, nil
	}
	return "", fmt.Errorf("model: %s: environment variable %s is not set: it holds the API key for %s (name another with api_key_env)", m.Provider, name, base)
}

func sameHost(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && strings.EqualFold(ua.Hostname(), ub.Hostname())
}

// retryOf is the retry policy a profile's settings ask for.
func retryOf(m config.Model) Retry {
	r := Retry{RequestTimeout: m.RequestTimeout.D()}
	if m.MaxRetries != nil {
		r.MaxRetries = *m.MaxRetries
		if r.MaxRetries == 0 {
			r.MaxRetries = NoRetries
		}
	}
	return r
}
