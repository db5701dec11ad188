package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/idempotency"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/toolsvc"
)

// Remote tools: the NATS executor (tools/nats.go), toolsvc and the
// worker's use of them, as a review found them (session 30). Every test
// here runs on a real embedded nats-server with real subscribers or micro
// services.

const remoteArgsSchema = `{"type":"object","properties":{"name":{"type":"string"}}}`

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// remoteConns starts a server and returns two connections to it: one for
// a tool service, one for loopgate.
func remoteConns(t *testing.T) (svcConn, lgConn *nats.Conn) {
	t.Helper()
	env := natstest.Start(t)
	var err error
	if svcConn, err = env.Server.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svcConn.Close)
	if lgConn, err = env.Server.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lgConn.Close)
	return svcConn, lgConn
}

// A write whose request reached the tool service, and whose connection
// then closed before the reply came back, has an unknown outcome: the
// service may have done it. nats.go returns the same
// nats.ErrConnectionClosed when the connection closes while the request
// waits for its reply (Conn.close closes every pending request's channel)
// as when it was closed before, and the executor used to take both for
// transient, "request not sent": the worker treated the write as having
// had no effect (executed transient, record Retryable) and ran it again.
// Now it is ErrOutcomeUnknown (recorded as a timeout), and only a request
// on a connection already closed is transient.
func TestAConnectionClosedAfterTheServiceGotTheRequestIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	svcConn, lgConn := remoteConns(t)
	received := make(chan struct{}, 1)
	sub, err := svcConn.Subscribe("test.review.write", func(m *nats.Msg) {
		// The service got the call and does the write; loopgate's
		// connection closes before the reply reaches it.
		received <- struct{}{}
		lgConn.Close()
		time.Sleep(50 * time.Millisecond)
		_ = m.Respond([]byte(`{"result":{"done":true}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := svcConn.Flush(); err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry([]tools.Manifest{{
		Name: "write_it", Description: "A write.", Permission: tools.Write,
		ArgsSchema: json.RawMessage(remoteArgsSchema), Executor: tools.Executor{NATS: "test.review.write"},
	}}, nil, tools.WithConn(lgConn))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Lookup("write_it")
	_, err = tool.Func()(t.Context(), tools.Call{Tool: "write_it", OperationID: "op-1", RunID: "run-1", CallID: "s1c1", Tenant: "cityops", Principal: "dev", Args: json.RawMessage(`{"name":"x"}`)})
	select {
	case <-received:
	default:
		t.Fatalf("the service never got the request (err %v)", err)
	}
	t.Logf("executor error: %v", err)
	if err == nil {
		t.Fatal("no error")
	}
	if errors.Is(err, tools.ErrTransient) || !errors.Is(err, tools.ErrOutcomeUnknown) {
		t.Errorf("the request reached the service, which may have done the write, yet the executor does not say its outcome is unknown: %v", err)
	}
	// Sent on the closed connection: known not sent, transient.
	_, err = tool.Func()(t.Context(), tools.Call{Tool: "write_it", OperationID: "op-2", RunID: "run-1", CallID: "s2c1", Tenant: "cityops", Principal: "dev", Args: json.RawMessage(`{"name":"x"}`)})
	if !errors.Is(err, tools.ErrTransient) || errors.Is(err, tools.ErrOutcomeUnknown) {
		t.Errorf("a request on a closed connection: %v; want transient (not sent)", err)
	}
}

// startGreeter serves one endpoint, greet on test.review.greet, with h.
func startGreeter(t *testing.T, nc *nats.Conn, h toolsvc.Handler) {
	t.Helper()
	startService(t, nc, "greet", "test.review.greet", h)
}

// startService serves one endpoint, tool on subject, with h, through a
// toolsvc service on nc, stopped when the test ends.
func startService(t *testing.T, nc *nats.Conn, tool, subject string, h toolsvc.Handler) {
	t.Helper()
	svc, err := toolsvc.New(nc, &toolsvc.Config{Name: "remote", Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Add(tool, subject, h); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
}

// rawGreet sends one greet request with headers h on nc, with a reply
// subject of its own, and returns what arrives on it.
func rawGreet(t *testing.T, nc *nats.Conn, h nats.Header) <-chan *nats.Msg {
	t.Helper()
	inbox := nc.NewRespInbox()
	replies := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	h.Set(tools.HeaderTool, "greet")
	h.Set(tools.HeaderOperationID, "op-late")
	h.Set(tools.HeaderRunID, "run-late")
	h.Set(tools.HeaderCallID, "s1c1")
	if err := nc.PublishMsg(&nats.Msg{Subject: "test.review.greet", Reply: inbox, Header: h, Data: []byte(`{"name":"Ada"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return replies
}

// toolsvc says "a call whose deadline has passed gets no reply", and the
// README's contract says a service must "send nothing after it (a reply
// racing the deadline would claim an outcome loopgate has already recorded
// as unknown)". Service.serve used to hold to that only on its error
// path: a handler that returned a result after its context ended had the
// result published all the same.
func TestNoSuccessReplyIsSentAfterTheCallsDeadline(t *testing.T) {
	t.Parallel()
	svcConn, lgConn := remoteConns(t)
	returned := make(chan struct{}, 1)
	startGreeter(t, svcConn, func(ctx context.Context, req toolsvc.Request) (any, error) {
		time.Sleep(time.Until(req.Deadline) + 200*time.Millisecond) // works past its deadline
		if ctx.Err() == nil {
			t.Error("ctx not done past the deadline")
		}
		returned <- struct{}{}
		return map[string]string{"greeting": "hello"}, nil
	})
	h := nats.Header{}
	h.Set(tools.HeaderTimeoutMS, strconv.Itoa(100))
	h.Set(tools.HeaderDeadline, time.Now().Add(100*time.Millisecond).UTC().Format(tools.DeadlineFormat))
	replies := rawGreet(t, lgConn, h)
	<-returned
	select {
	case m := <-replies:
		t.Errorf("a reply was sent after the call's deadline: headers %v body %s", m.Header, m.Data)
	case <-time.After(time.Second):
	}
}

// A call that arrives with its deadline already passed (nats.go buffers
// requests published while it reconnects and sends them once back; a slow
// link; a service clock ahead of loopgate's) is one loopgate has already
// recorded as a timeout: for a write, an unknown outcome it may already
// have reconciled as "not applied" and run again. The worker never starts
// a tool late (pastDeadline: "the tool is not started late"); toolsvc
// used to: it ran the handler with a context already done, so a handler
// that writes without first checking ctx (toolsvc.Builtin of a quick
// builtin) did a write nobody waited for.
func TestACallReceivedPastItsDeadlineIsNotRun(t *testing.T) {
	t.Parallel()
	svcConn, lgConn := remoteConns(t)
	var ran atomic.Int32
	startGreeter(t, svcConn, func(ctx context.Context, _ toolsvc.Request) (any, error) {
		ran.Add(1)
		return map[string]string{"greeting": "hello"}, nil
	})
	h := nats.Header{}
	h.Set(tools.HeaderDeadline, time.Now().Add(-2*time.Second).UTC().Format(tools.DeadlineFormat))
	h.Set(tools.HeaderTimeoutMS, "1")
	replies := rawGreet(t, lgConn, h)
	select {
	case m := <-replies:
		t.Logf("reply: headers %v body %s", m.Header, m.Data)
	case <-time.After(500 * time.Millisecond):
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the handler ran %d time(s) for a call whose deadline had passed before it arrived", n)
	}
}

// A remote resolver's error reply carries the service's description
// (Nats-Service-Error), which the contract sends to "loopgate's operator
// log, never the model", and which loopgate redacts everywhere else it
// logs a tool's error (invoke: "full error (redacted) in the operator's
// log only"; reconcile likewise; resolve itself redacts a malformed
// answer's excerpt). resolve used to wrap the resolver's error
// unredacted, and the pool logged it as is ("run interrupted; it will be
// continued from its events"): an e-mail address in the service's words
// reached the log.
func TestARemoteResolversErrorIsRedactedInTheLog(t *testing.T) {
	t.Parallel()
	const secret = "jane.doe@example.org"
	var owner atomic.Pointer[tools.Func]
	look := fakeTool("look", tools.Read, false)
	look.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)
	look.Resources = []tools.ResourceArg{{Arg: "id", Resolver: "owner"}}
	b := setup(t, options{
		tools: []tools.Manifest{look},
		builtins: tools.Builtins{
			"look": func(context.Context, tools.Call) (any, error) { return map[string]int{"ok": 1}, nil },
			// The registry of the harness has no connection: the resolver
			// is the nats executor of a registry of its own, on the
			// harness's server, calling a real tool service.
			"owner": func(ctx context.Context, c tools.Call) (any, error) { return (*owner.Load())(ctx, c) },
		},
		roles:   operatorMay("look"),
		agents:  map[string]config.Profile{"remote-res": profile("look")},
		scripts: map[string]model.Model{"remote-res": scripted(t, `{"tool_calls":[{"tool":"look","args":{"id":"SR-1"}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{MaxDeliver: 2},
		retry:   20 * time.Millisecond,
	})
	fn := remoteFunc(t, b, tools.Manifest{
		Name: "owner", Description: "Who owns a complaint.", Permission: tools.Read,
		ArgsSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`),
		Executor:   tools.Executor{NATS: "test.review.owner"}, Timeout: events.Duration(2 * time.Second),
	}, func(context.Context, toolsvc.Request) (any, error) {
		return nil, toolsvc.Transient(errors.New("CRM record of " + secret + " is locked"))
	})
	owner.Store(&fn)

	evs := b.waitEnd(b.submit(task("remote-res-redact", "remote-res")))
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	t.Logf("finished %s: %s", fin.Reason, fin.Detail)
	for _, e := range evs {
		if strings.Contains(string(e.Data), secret) {
			t.Errorf("event %s holds the service's e-mail address: %s", e.Type, e.Data)
		}
	}
	logs := b.logs.String()
	if strings.Contains(logs, secret) {
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("operator log line holds the service's e-mail address unredacted: %s", line)
				break
			}
		}
	}
}

// remoteFunc serves m's tool with h through a real toolsvc service on
// b's server, on m.Executor.NATS, and returns the NATS executor that calls
// it. The harness's registry has no connection: a builtin that calls the
// returned Func stands for the remote tool.
func remoteFunc(t *testing.T, b *bundle, m tools.Manifest, h toolsvc.Handler) tools.Func {
	t.Helper()
	startService(t, b.env.Conn, m.Name, m.Executor.NATS, h)
	reg, err := tools.NewRegistry([]tools.Manifest{m}, nil, tools.WithConn(b.env.Conn))
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := reg.Lookup(m.Name)
	return rt.Func()
}

// A tool whose own deadline passed while it ran (an upstream it called did
// not answer in time) may have done the write. A tool service says so with
// a 504 (toolsvc answers it when its handler returns
// context.DeadlineExceeded); a builtin returns context.DeadlineExceeded
// before loopgate's deadline. Both used to be recorded as tool_failed (the
// operation record failed, the model told the tool failed, the tool
// quarantined). They are an unknown outcome, as loopgate's own deadline
// is: executed timeout, class upstream_timeout, the record unknown, and
// never run again blindly (no reconcile tool, not idempotent: a human
// decides).
func TestAWriteWhoseToolTimedOutOnItsOwnIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	// The ticket system takes the write and does not answer in time.
	upstreamTimeout := fmt.Errorf("ticket system: %w", context.DeadlineExceeded)
	for _, served := range []string{"builtin", "tool service"} {
		t.Run(served, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			createTicket := func() (any, error) {
				if runs.Add(1) == 1 {
					return nil, upstreamTimeout
				}
				return map[string]string{"ticket": "T-1"}, nil
			}
			fn := func(context.Context, tools.Call) (any, error) { return createTicket() }
			var remote atomic.Pointer[tools.Func]
			if served == "tool service" {
				// The harness's registry has no connection: the builtin
				// is the nats executor of a registry of its own, on the
				// harness's server, calling a real tool service.
				fn = func(ctx context.Context, c tools.Call) (any, error) { return (*remote.Load())(ctx, c) }
			}
			m := fakeTool("create_ticket", tools.Write, false)
			m.Approval = tools.ApprovalNone
			b := setup(t, options{
				tools: []tools.Manifest{m}, builtins: tools.Builtins{"create_ticket": fn},
				roles:   writerRoles("create_ticket"),
				agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
				scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
			})
			if served == "tool service" {
				rm := m
				rm.Executor = tools.Executor{NATS: "test.review.tickets"}
				rfn := remoteFunc(t, b, rm, func(context.Context, toolsvc.Request) (any, error) { return createTicket() })
				remote.Store(&rfn)
			}

			runID := b.submit(task("upstream-timeout-1", "ticketer"))
			b.waitType(runID, events.TypeParked, 1)
			q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
			if q.Kind != "needs_human" || runs.Load() != 1 {
				t.Fatalf("after the tool's own timeout: question %q, %d runs; want needs_human after one run", q.Kind, runs.Load())
			}
			evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
			if err != nil {
				t.Fatal(err)
			}
			x := last[events.ExecutedData](t, evs, events.TypeExecuted)
			if x.Status != events.ExecTimeout || x.ErrorClass != events.UpstreamTimeout {
				t.Errorf("executed %s/%s, want %s/%s", x.Status, x.ErrorClass, events.ExecTimeout, events.UpstreamTimeout)
			}
			if rec := idemRecord(t, b, x.OperationID); rec.State != idempotency.Unknown {
				t.Errorf("operation record %s: state %q, want %q", x.OperationID, rec.State, idempotency.Unknown)
			}
			b.publishApproval(runID, "s1c1", q.ArgsHash, "retry", "supervisor@cityops", "checked: no ticket exists")
			assertTrail(t, b.waitEnd(runID), timedOutThenRetriedByAHuman("create_ticket"))
			if runs.Load() != 2 {
				t.Errorf("the write ran %d times, want 2 (once, then once more on a human's retry)", runs.Load())
			}
		})
	}
}
