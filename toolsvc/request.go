package toolsvc

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/tools"
)

// Request is one call as a tool service receives it: the arguments and
// the identity loopgate sent in the request headers.
type Request struct {
	// Tool is the tool's name (Loopgate-Tool).
	Tool string
	// OperationID is loopgate's operation id (Loopgate-Operation-Id): the
	// idempotency key of a write. Empty on resolver calls.
	OperationID string
	// RunID, CallID, Tenant and Principal identify the run, the call
	// within it, the tenant and the principal the run acts for. CallID is
	// empty on resolver calls.
	RunID, CallID, Tenant, Principal string
	// Deadline is when loopgate stops waiting: the earlier of
	// Loopgate-Deadline and receipt + Loopgate-Timeout-Ms, else receipt +
	// Config.DefaultTimeout. The handler's context ends then.
	Deadline time.Time
	// Args are the arguments, the request body as received: for a call
	// from loopgate, canonical JSON that passed the tool's schema.
	Args json.RawMessage
	// Subject the request arrived on.
	Subject string
	// Header is every header of the request. Do not modify it.
	Header nats.Header
}

// Call returns r as a tools.Call, for a handler that runs a loopgate
// builtin (see Builtin).
func (r Request) Call() tools.Call {
	return tools.Call{
		Tool:        r.Tool,
		OperationID: r.OperationID,
		RunID:       r.RunID,
		CallID:      r.CallID,
		Tenant:      r.Tenant,
		Principal:   r.Principal,
		Args:        r.Args,
	}
}

// Handler answers one call. It must return when ctx is done: loopgate has
// stopped waiting then, and for a write the outcome is unknown to it until
// it reconciles. It may run concurrently with other calls.
//
// The result must marshal to JSON. Errors: Transient(err) when the call had
// no effect and a retry may succeed; BadRequest(err) for arguments the
// tool refuses; an *Error for another code; anything else is answered 500
// and logged here in full.
type Handler func(ctx context.Context, req Request) (any, error)

// Builtin adapts a loopgate builtin (a tools.Func) into a Handler, so the
// same Go tool runs in a worker or behind NATS. Its errors that wrap
// tools.ErrTransient are answered 503.
func Builtin(fn tools.Func) Handler {
	return func(ctx context.Context, req Request) (any, error) {
		return fn(ctx, req.Call())
	}
}

// newRequest reads a NATS message received at now. defaultTimeout applies
// when the message carries no deadline.
func newRequest(msg *nats.Msg, now time.Time, defaultTimeout time.Duration) Request {
	h := msg.Header
	r := Request{
		Tool:        h.Get(tools.HeaderTool),
		OperationID: h.Get(tools.HeaderOperationID),
		RunID:       h.Get(tools.HeaderRunID),
		CallID:      h.Get(tools.HeaderCallID),
		Tenant:      h.Get(tools.HeaderTenant),
		Principal:   h.Get(tools.HeaderPrincipal),
		Args:        msg.Data,
		Subject:     msg.Subject,
		Header:      h,
	}
	if ms, err := strconv.ParseInt(strings.TrimSpace(h.Get(tools.HeaderTimeoutMS)), 10, 64); err == nil && ms > 0 {
		r.Deadline = now.Add(time.Duration(ms) * time.Millisecond)
	}
	if d, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(h.Get(tools.HeaderDeadline))); err == nil {
		if r.Deadline.IsZero() || d.Before(r.Deadline) {
			r.Deadline = d
		}
	}
	if r.Deadline.IsZero() {
		r.Deadline = now.Add(defaultTimeout)
	}
	return r
}
