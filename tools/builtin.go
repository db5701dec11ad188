package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Call is what an executor receives: validated, canonical arguments and the
// identity of the call. OperationID is minted by loopgate from the run and
// call; a tool that writes must use it as its idempotency key.
type Call struct {
	Tool        string
	OperationID string
	RunID       string
	CallID      string
	Tenant      string
	Principal   string
	Args        json.RawMessage
}

// Func runs one call. It must return when ctx is done (the worker stops
// waiting then, whatever the tool does). The result must marshal to JSON.
//
// Errors are classified by the worker: wrap ErrTransient for failures a
// retry may cure; ErrOutcomeUnknown, or context.DeadlineExceeded of a
// deadline of the tool's own (an upstream that did not answer in time;
// a tool service's 504 matches it too), for a call that may have taken
// effect: recorded as a timeout, a write is never re-run blindly; anything
// else is unexpected, quarantines the tool for the rest of the run and is
// never shown to the model.
type Func func(ctx context.Context, call Call) (any, error)

// ErrTransient marks a failure a bounded retry may cure (a 503, a dropped
// connection). Wrap it: fmt.Errorf("%w: upstream busy", tools.ErrTransient).
var ErrTransient = errors.New("transient tool failure")

// ErrOutcomeUnknown marks a call that may have reached the tool and whose
// end was never heard (the connection closed while it waited for the
// reply): it is recorded as a timeout is, an unknown outcome, never as a
// failure or a transient one a retry may simply run again.
var ErrOutcomeUnknown = errors.New("tool call outcome unknown")

// Builtins maps a built-in tool's name to its Go implementation. Manifests
// in the config refer to builtins by name.
type Builtins map[string]Func

// Register adds fn under name; it fails if the name is taken or empty.
func (b Builtins) Register(name string, fn Func) error {
	if name == "" || fn == nil {
		return fmt.Errorf("register builtin %q: name and func are required", name)
	}
	if _, ok := b[name]; ok {
		return fmt.Errorf("register builtin %q: already registered", name)
	}
	b[name] = fn
	return nil
}

// MustRegister is Register for startup code: it panics on error.
func (b Builtins) MustRegister(name string, fn Func) {
	if err := b.Register(name, fn); err != nil {
		panic(err)
	}
}
