package tools

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// The NATS executor's request headers (the wire contract is in the
// README). Header names are case-sensitive on NATS: send and read them
// exactly as written here.
const (
	// HeaderTool is the tool's name, as the manifest and the model call it.
	HeaderTool = "Loopgate-Tool"
	// HeaderOperationID is the operation id loopgate minted from the run
	// and call: the idempotency key of a write. Absent on resolver calls.
	HeaderOperationID = "Loopgate-Operation-Id"
	// HeaderRunID is the run's id.
	HeaderRunID = "Loopgate-Run-Id"
	// HeaderCallID is the call's id within the run ("s2c1"). Absent on
	// resolver calls.
	HeaderCallID = "Loopgate-Call-Id"
	// HeaderTenant is the task's tenant.
	HeaderTenant = "Loopgate-Tenant"
	// HeaderPrincipal is the id of the principal the task runs for.
	HeaderPrincipal = "Loopgate-Principal"
	// HeaderDeadline is the instant loopgate stops waiting, RFC 3339 in
	// UTC with milliseconds ("2026-11-30T10:00:02.123Z").
	HeaderDeadline = "Loopgate-Deadline"
	// HeaderTimeoutMS is the same deadline as whole milliseconds left when
	// the request was sent: what a service whose clock differs from
	// loopgate's should use.
	HeaderTimeoutMS = "Loopgate-Timeout-Ms"
)

// DeadlineFormat is HeaderDeadline's layout: RFC 3339 with milliseconds.
const DeadlineFormat = "2006-01-02T15:04:05.000Z07:00"

// Requester sends one request and waits for its one reply until ctx is
// done; it must return nats.ErrNoResponders when nobody is subscribed and
// ctx's error when ctx ends first. *nats.Conn implements it.
type Requester interface {
	RequestMsgWithContext(ctx context.Context, msg *nats.Msg) (*nats.Msg, error)
}

// connState is what a Requester may say of its connection (a *nats.Conn
// does): a request on one closed or draining is known not to be sent.
type connState interface {
	IsClosed() bool
	IsDraining() bool
}

// WithConn gives NewRegistry the connection that carries the calls of
// tools whose executor is nats. NewRegistry refuses such a manifest
// without one; builtins ignore it.
func WithConn(nc Requester) Option {
	return func(o *registryOptions) { o.conn = nc }
}

// RemoteError is a tool service's error reply: a reply carrying the micro
// error headers Nats-Service-Error (Description) and
// Nats-Service-Error-Code (Code). Codes 429 and 503 match ErrTransient: the
// service says the call had no effect and a retry may succeed. Code 504
// matches context.DeadlineExceeded, as a built-in tool's own deadline
// does: the service's deadline (an upstream's) passed while the call ran,
// so it may or may not have taken effect (toolsvc answers so). Anything
// else the
// worker treats as an unexpected failure (the tool is quarantined for the
// run); Category names it without the service's words.
type RemoteError struct {
	// Tool and Subject say which call failed.
	Tool, Subject string
	// Code is Nats-Service-Error-Code; 0 when it is missing or not a number.
	Code int
	// Description is Nats-Service-Error as sent, cut to 512 bytes. It goes
	// to the operator's log, never to the model.
	Description string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("tool %q (nats %s): service error %d %s: %s", e.Tool, e.Subject, e.Code, e.Category(), e.Description)
}

// Is makes a 429 or 503 match ErrTransient, and a 504 (the service's own
// deadline passed while the call ran) context.DeadlineExceeded. Taken for
// a failure, a 504 recorded a write that may have happened as one that
// did not, and told the model it failed.
func (e *RemoteError) Is(target error) bool {
	switch target {
	case ErrTransient:
		return e.Transient()
	case context.DeadlineExceeded:
		return e.Code == 504
	}
	return false
}

// Transient reports whether a retry may cure the failure: 429 or 503.
func (e *RemoteError) Transient() bool {
	return e.Code == 429 || e.Code == 503
}

// Category names the failure in words safe to show anyone: bad_request
// (400: the service refused arguments loopgate had validated, so the
// manifest and the service disagree), rate_limited (429), unavailable
// (503), upstream_timeout (504), service_error (anything else).
func (e *RemoteError) Category() string {
	switch e.Code {
	case 400:
		return "bad_request"
	case 429:
		return "rate_limited"
	case 503:
		return "unavailable"
	case 504:
		return "upstream_timeout"
	}
	return "service_error"
}

// maxDescription bounds an error reply's description as kept in errors.
const maxDescription = 512

// natsFunc is the executor of a tool served over NATS: one request/reply
// on the manifest's subject per call, under the call's deadline (and never
// longer than the manifest's timeout).
//
// It classifies how a call ended, for the worker: no responders, a
// connection that is closed before the request is sent and a request the
// client refuses to buffer while it reconnects wrap ErrTransient (nothing
// ran); a connection that closes while the request waits for its reply
// wraps ErrOutcomeUnknown; the end of ctx returns ctx's error (a
// timeout: for a write, the outcome is unknown); an error reply is a
// *RemoteError (a 504 matches context.DeadlineExceeded); a
// reply that is not {"result": …}, or whose result breaks result_schema,
// is an unexpected failure. The result is returned as json.RawMessage.
func natsFunc(conn Requester, m Manifest, rs *resultSchema) Func {
	tool, subject, timeout := m.Name, m.Executor.NATS, m.Timeout.D()
	return func(ctx context.Context, call Call) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		deadline, _ := ctx.Deadline()
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("tool %q (nats %s): %w", tool, subject, ctxError(ctx))
		}
		msg := nats.NewMsg(subject)
		msg.Data = call.Args
		if len(msg.Data) == 0 {
			msg.Data = []byte("{}")
		}
		for k, v := range map[string]string{
			HeaderTool:        cmp.Or(call.Tool, tool),
			HeaderOperationID: call.OperationID,
			HeaderRunID:       call.RunID,
			HeaderCallID:      call.CallID,
			HeaderTenant:      call.Tenant,
			HeaderPrincipal:   call.Principal,
			HeaderDeadline:    deadline.UTC().Format(DeadlineFormat),
			HeaderTimeoutMS:   strconv.FormatInt(max(left.Milliseconds(), 1), 10),
		} {
			if v != "" {
				msg.Header.Set(k, v)
			}
		}
		if c, ok := conn.(connState); ok && (c.IsClosed() || c.IsDraining()) {
			// Known not sent: a retry may go through another connection.
			return nil, fmt.Errorf("%w: tool %q (nats %s): request not sent: the connection is closed", ErrTransient, tool, subject)
		}
		reply, err := conn.RequestMsgWithContext(ctx, msg)
		if err != nil {
			return nil, requestError(ctx, tool, subject, err)
		}
		return decodeReply(tool, subject, reply, rs)
	}
}

// requestError classifies a request that got no reply.
func requestError(ctx context.Context, tool, subject string, err error) error {
	switch {
	case ctx.Err() != nil:
		// Whatever the client said, the deadline (or the worker stopping)
		// ended the wait; the worker tells the two apart by its context.
		return fmt.Errorf("tool %q (nats %s): %w (%w)", tool, subject, ctx.Err(), err)
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: tool %q: no tool service answers on %s: %w", ErrTransient, tool, subject, err)
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		// The client refused to buffer the request while it reconnects
		// (nats.go's publish checks this before queueing a byte): it was
		// never sent, and a retry once the connection is back may succeed.
		// nats.go's other refusals before sending (a bad subject, headers
		// or a payload the server does not take) would fail again.
		return fmt.Errorf("%w: tool %q (nats %s): request not sent: the connection is reconnecting and its buffer is full: %w", ErrTransient, tool, subject, err)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrDisconnected):
		// The connection was open when the request went: nats.go gives
		// the same error when it closes while the request waits for its
		// reply, by when the service may have run the call. Taken for
		// "not sent" (transient), a write that may have happened was
		// recorded as having had no effect, and run again.
		return fmt.Errorf("%w: tool %q (nats %s): the connection closed before the reply came; the request may have reached the service: %w", ErrOutcomeUnknown, tool, subject, err)
	}
	return fmt.Errorf("tool %q (nats %s): request: %w", tool, subject, err)
}

// decodeReply turns a reply into a result or an error.
func decodeReply(tool, subject string, reply *nats.Msg, rs *resultSchema) (any, error) {
	desc, code := reply.Header.Get(micro.ErrorHeader), reply.Header.Get(micro.ErrorCodeHeader)
	if desc != "" || code != "" {
		n, _ := strconv.Atoi(strings.TrimSpace(code))
		return nil, &RemoteError{Tool: tool, Subject: subject, Code: n, Description: bounded(desc, maxDescription)}
	}
	var body struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(reply.Data, &body); err != nil || body.Result == nil {
		return nil, fmt.Errorf("tool %q (nats %s): reply is not a JSON object with a result member: %q", tool, subject, bounded(string(reply.Data), 128))
	}
	if rs != nil {
		if err := rs.check(tool, body.Result); err != nil {
			return nil, err
		}
	}
	return body.Result, nil
}

// validSubject reports whether s is a subject one can publish on: tokens
// separated by dots, none empty, no whitespace, no wildcard characters
// (not even inside a token, where NATS would take them literally: the
// config schema refuses them too).
func validSubject(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || strings.ContainsAny(tok, "*>") || strings.ContainsFunc(tok, unicode.IsSpace) {
			return false
		}
	}
	return true
}

// ReservedSubject returns the namespace s falls in when it is one a tool
// service must not answer on: loopgate's own subjects (tasks, approvals,
// events, work), JetStream's API and its streams' ($JS., $KV., $O.),
// the service framework's discovery ($SRV.) and reply inboxes (_INBOX.).
// A call on such a subject would publish the model's arguments into the
// audit log or a bucket, or make a JetStream API request. Case matters to
// NATS, so the check does too.
func ReservedSubject(s string) (namespace string, reserved bool) {
	for _, ns := range []string{"loopgate.", "$JS.", "$KV.", "$O.", "$SRV.", "$SYS.", "_INBOX."} {
		if strings.HasPrefix(s, ns) || s+"." == ns {
			return ns + ">", true
		}
	}
	return "", false
}

// bounded cuts s to at most n bytes of valid UTF-8.
func bounded(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// ctxError is ctx's error, or DeadlineExceeded for a deadline that has
// passed while ctx has not noticed yet.
func ctxError(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}
