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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"

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
	case "openai", "anthropic":
		// The HTTP providers live in package providers, so that what runs
		// loops (and its tests) does not carry their SDKs.
		return nil, fmt.Errorf("model: provider %q is built by package providers (providers.Build)", m.Provider)
	default:
		return nil, fmt.Errorf("model: unknown provider %q", m.Provider)
	}
}
