// Package model is the seam between loopgate and whatever proposes the next
// action: a Model turns a run's context (folded from its events) and the
// tools on offer into the model's raw output. The output is untrusted; the
// worker parses and validates it. Providers: the scripted model, which
// replays recorded decisions (tests, demos, replays).
package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
// the config's directory.
func Build(m config.Model, readFile func(string) ([]byte, error)) (Model, error) {
	switch m.Provider {
	case "scripted":
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
