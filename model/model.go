// Package model is the seam between loopgate and whatever proposes the next
// action: a Model turns a run's context (folded from its events) and the
// tools on offer into the model's raw output. The output is untrusted; the
// worker parses and validates it. Providers: the scripted model, which
// replays recorded decisions (tests, demos, replays); OpenAI, for any
// server speaking OpenAI's Chat Completions (OpenAI, Ollama, vLLM,
// llama.cpp, LM Studio); and Anthropic's Messages API. The HTTP providers
// only translate: the conversation rebuilt from the run's history goes out
// in the provider's wire format, the answer comes back as loopgate's
// decision JSON, and the worker validates it like any other.
package model

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// Request is everything a model may see when proposing step Step.
type Request struct {
	RunID        string
	Agent        string
	Instructions string
	Step         int
	History      []events.Turn
	Tools        []tools.Spec
}

// Response is the model's raw output and what it cost. Output is the
// decision as the model wrote it: JSON if the model behaved, anything if not.
type Response struct {
	Output []byte
	Usage  events.Usage
	// Name identifies the model that answered, for the audit trail.
	Name string
	// Message is the provider's own assistant message, recorded in the
	// proposed event and handed back in History (Turn.ProviderMessage) so
	// the conversation is replayed to the provider verbatim.
	Message json.RawMessage
}

// Model proposes the next decision of a run. Implementations must be safe
// for concurrent use by many runs, keep no per-run state (any worker may
// resume any run, so everything needed is in the Request), and return when
// ctx is done.
type Model interface {
	Propose(ctx context.Context, req Request) (Response, error)
}

// Func adapts a function to Model.
type Func func(ctx context.Context, req Request) (Response, error)

// Propose calls f.
func (f Func) Propose(ctx context.Context, req Request) (Response, error) { return f(ctx, req) }

// ErrScriptExhausted means a scripted model was asked for more decisions
// than its script holds.
var ErrScriptExhausted = errors.New("script exhausted")

// Build makes the model a profile asks for. readFile reads paths relative to
// the config's directory. API keys come from the process environment; see
// BuildWith.
func Build(m config.Model, readFile func(string) ([]byte, error)) (Model, error) {
	return BuildWith(m, Env{ReadFile: readFile})
}

// Env is what BuildWith reads besides the profile's settings.
type Env struct {
	// ReadFile reads paths relative to the config's directory (scripts).
	ReadFile func(string) ([]byte, error)
	// LookupEnv reads an environment variable (API keys). Defaults to
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Logger is handed to the HTTP providers. Defaults to slog.Default().
	Logger *slog.Logger
	// HTTPClient is handed to the HTTP providers (a proxy, custom TLS).
	// Defaults to a client of their own.
	HTTPClient *http.Client
}

// BuildWith makes the model a profile asks for: "scripted", "openai" or
// "anthropic". For the HTTP providers it applies the defaults of the
// settings the profile leaves out (see config.Model) and reads the API key
// now, from the variable the profile names in api_key_env or, for the
// provider's own API only, OPENAI_API_KEY / ANTHROPIC_API_KEY: a key is
// never sent to another server unless its variable is named. A named
// variable, or the default one of the provider's own API, that is unset or
// empty is an error naming it.
func BuildWith(m config.Model, env Env) (Model, error) {
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
	case "scripted":
		readFile := env.ReadFile
		if readFile == nil {
			return nil, errors.New("model: scripted: no ReadFile to read the script with")
		}
		b, err := readFile(m.Script)
		if err != nil {
			return nil, fmt.Errorf("model: read script %q: %w", m.Script, err)
		}
		s, err := NewScripted(b)
		if err != nil {
			return nil, fmt.Errorf("model: script %q: %w", m.Script, err)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("model: unknown provider %q", m.Provider)
	}
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
