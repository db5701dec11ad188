package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoSchema takes one optional string.
const echoSchema = `{"type":"object","properties":{"say":{"type":"string"}}}`

// natsConn starts an embedded server and returns an in-process connection;
// both end with the test.
func natsConn(t *testing.T) *nats.Conn {
	t.Helper()
	s, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// remote returns the Func of a one-tool registry whose executor is nats on
// subject.
func remote(t *testing.T, nc *nats.Conn, subject string, m tools.Manifest) tools.Func {
	t.Helper()
	m.Name = "echo"
	m.Description = "Echo."
	m.Permission = tools.Read
	m.ArgsSchema = json.RawMessage(echoSchema)
	m.Executor = tools.Executor{NATS: subject}
	reg, err := tools.NewRegistry([]tools.Manifest{m}, nil, tools.WithConn(nc))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Lookup("echo")
	return tool.Func()
}

// respond answers every request on subject with reply(msg) until the test
// ends; it returns the requests it saw.
func respond(t *testing.T, nc *nats.Conn, subject string, reply func(*nats.Msg) *nats.Msg) <-chan *nats.Msg {
	t.Helper()
	seen := make(chan *nats.Msg, 16)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		seen <- m
		if r := reply(m); r != nil {
			_ = m.RespondMsg(r)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return seen
}

func call() tools.Call {
	return tools.Call{Tool: "echo", OperationID: "op-1", RunID: "run-1", CallID: "s1c1", Tenant: "cityops", Principal: "dev@cityops", Args: json.RawMessage(`{"say":"hi"}`)}
}

func TestNATSExecutorSendsArgsAndCallIdentityAndReturnsTheResult(t *testing.T) {
	t.Parallel()
	nc := natsConn(t)
	seen := respond(t, nc, "test.echo", func(m *nats.Msg) *nats.Msg {
		return &nats.Msg{Data: []byte(`{"result": {"said": "hi", "n": 1}}`)}
	})
	fn := remote(t, nc, "test.echo", tools.Manifest{})

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	v, err := fn(ctx, call())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(v); string(got) != `{"said":"hi","n":1}` {
		t.Errorf("result %s", got)
	}
	m := <-seen
	if string(m.Data) != `{"say":"hi"}` {
		t.Errorf("body %s, want the arguments", m.Data)
	}
	want := map[string]string{
		tools.HeaderTool: "echo", tools.HeaderOperationID: "op-1", tools.HeaderRunID: "run-1",
		tools.HeaderCallID: "s1c1", tools.HeaderTenant: "cityops", tools.HeaderPrincipal: "dev@cityops",
		tools.HeaderDeadline: deadline.UTC().Format(tools.DeadlineFormat),
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	ms, err := strconv.Atoi(m.Header.Get(tools.HeaderTimeoutMS))
	if err != nil || ms <= 0 || ms > 3000 {
		t.Errorf("header %s = %q, want 1..3000", tools.HeaderTimeoutMS, m.Header.Get(tools.HeaderTimeoutMS))
	}
	if !strings.HasSuffix(m.Header.Get(tools.HeaderDeadline), "Z") || len(m.Header.Get(tools.HeaderDeadline)) != len("2006-01-02T15:04:05.000Z") {
		t.Errorf("deadline %q is not RFC 3339 UTC with milliseconds", m.Header.Get(tools.HeaderDeadline))
	}
}

func TestNATSExecutorDeadlineIsTheManifestTimeoutWhenSooner(t *testing.T) {
	t.Parallel()
	nc := natsConn(t)
	seen := respond(t, nc, "test.echo", func(*nats.Msg) *nats.Msg { return &nats.Msg{Data: []byte(`{"result":null}`)} })
	fn := remote(t, nc, "test.echo", tools.Manifest{Timeout: events.Duration(500 * time.Millisecond)})
	if _, err := fn(t.Context(), call()); err != nil {
		t.Fatal(err)
	}
	if ms, _ := strconv.Atoi((<-seen).Header.Get(tools.HeaderTimeoutMS)); ms <= 0 || ms > 500 {
		t.Errorf("timeout %d ms, want at most the manifest's 500", ms)
	}
}

func TestNATSExecutorWithNobodySubscribedIsTransient(t *testing.T) {
	t.Parallel()
	fn := remote(t, natsConn(t), "test.nobody", tools.Manifest{})
	_, err := fn(t.Context(), call())
	if !errors.Is(err, tools.ErrTransient) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("err %v, want ErrTransient wrapping nats.ErrNoResponders", err)
	}
}

func TestNATSExecutorStopsWaitingAtTheDeadline(t *testing.T) {
	t.Parallel()
	nc := natsConn(t)
	respond(t, nc, "test.silent", func(*nats.Msg) *nats.Msg { return nil })
	fn := remote(t, nc, "test.silent", tools.Manifest{})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := fn(ctx, call())
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, tools.ErrTransient) {
		t.Fatalf("err %v, want context.DeadlineExceeded (a timeout), not transient", err)
	}
	if ctx.Err() == nil {
		t.Fatal("returned before the deadline")
	}
}

func TestNATSExecutorClassifiesErrorReplies(t *testing.T) {
	t.Parallel()
	nc := natsConn(t)
	tests := []struct {
		code, desc    string
		wantCode      int
		wantTransient bool
		wantCategory  string
		wantDeadline  bool // the service's own deadline passed: the call may have taken effect
	}{
		{"503", "backend down", 503, true, "unavailable", false},
		{"429", "slow down", 429, true, "rate_limited", false},
		{"400", "bad request: topic", 400, false, "bad_request", false},
		{"500", "internal error", 500, false, "service_error", false},
		{"504", "upstream deadline exceeded", 504, false, "upstream_timeout", true},
		{"", "no code at all", 0, false, "service_error", false},
		{"teapot", "not a number", 0, false, "service_error", false},
	}
	for i, tt := range tests {
		subject := "test.err." + strconv.Itoa(i)
		respond(t, nc, subject, func(*nats.Msg) *nats.Msg {
			h := nats.Header{}
			h.Set(micro.ErrorHeader, tt.desc)
			if tt.code != "" {
				h.Set(micro.ErrorCodeHeader, tt.code)
			}
			return &nats.Msg{Header: h, Data: []byte(`{"result":"ignored"}`)}
		})
		fn := remote(t, nc, subject, tools.Manifest{})
		_, err := fn(t.Context(), call())
		var re *tools.RemoteError
		if !errors.As(err, &re) {
			t.Errorf("%s: err %v, want a *RemoteError", tt.code, err)
			continue
		}
		if re.Code != tt.wantCode || re.Description != tt.desc || re.Category() != tt.wantCategory || re.Subject != subject || re.Tool != "echo" {
			t.Errorf("%s: %+v (category %s)", tt.code, re, re.Category())
		}
		if errors.Is(err, tools.ErrTransient) != tt.wantTransient {
			t.Errorf("%s: transient %v, want %v", tt.code, !tt.wantTransient, tt.wantTransient)
		}
		if errors.Is(err, context.DeadlineExceeded) != tt.wantDeadline {
			t.Errorf("%s: deadline exceeded %v, want %v", tt.code, !tt.wantDeadline, tt.wantDeadline)
		}
	}
}

func TestNATSExecutorRefusesRepliesThatAreNotAResult(t *testing.T) {
	t.Parallel()
	nc := natsConn(t)
	for i, body := range []string{``, `not json`, `[1,2]`, `null`, `{"answer": 42}`, `"result"`} {
		subject := "test.bad." + strconv.Itoa(i)
		respond(t, nc, subject, func(*nats.Msg) *nats.Msg { return &nats.Msg{Data: []byte(body)} })
		_, err := remote(t, nc, subject, tools.Manifest{})(t.Context(), call())
		var re *tools.RemoteError
		if err == nil || errors.Is(err, tools.ErrTransient) || errors.As(err, &re) || !strings.Contains(err.Error(), "result member") {
			t.Errorf("reply %q: err %v, want an unexpected failure naming the missing result", body, err)
		}
	}
}

func TestNATSExecutorChecksTheResultSchema(t *testing.T) {
	t.Parallel()
	nc := natsConn(t)
	respond(t, nc, "test.result", func(m *nats.Msg) *nats.Msg {
		if strings.Contains(string(m.Data), "wrong") {
			return &nats.Msg{Data: []byte(`{"result": {"said": 7}}`)}
		}
		return &nats.Msg{Data: []byte(`{"result": {"said": "hi"}}`)}
	})
	fn := remote(t, nc, "test.result", tools.Manifest{ResultSchema: json.RawMessage(`{"type":"object","required":["said"],"properties":{"said":{"type":"string"}}}`)})
	if _, err := fn(t.Context(), call()); err != nil {
		t.Fatalf("a matching result: %v", err)
	}
	c := call()
	c.Args = json.RawMessage(`{"say":"wrong"}`)
	_, err := fn(t.Context(), c)
	var re *tools.ResultError
	if !errors.Is(err, tools.ErrInvalidResult) || !errors.As(err, &re) || len(re.Errors) == 0 || re.Errors[0].Field != "/said" {
		t.Fatalf("err %v, want a ResultError at /said", err)
	}
}

func TestBuiltinResultIsCheckedAgainstTheResultSchema(t *testing.T) {
	t.Parallel()
	b := tools.Builtins{}
	b.MustRegister("echo", func(_ context.Context, c tools.Call) (any, error) {
		return map[string]any{"said": string(c.Args)}, nil
	})
	reg, err := tools.NewRegistry([]tools.Manifest{{
		Name: "echo", Description: "Echo.", Permission: tools.Read, ArgsSchema: json.RawMessage(echoSchema),
		ResultSchema: json.RawMessage(`{"type":"object","properties":{"said":{"type":"string","maxLength":12}}}`),
	}}, b)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Lookup("echo")
	if v, err := tool.Func()(t.Context(), tools.Call{Args: json.RawMessage(`{}`)}); err != nil {
		t.Fatalf("short result: %v", err)
	} else if got, _ := json.Marshal(v); string(got) != `{"said":"{}"}` {
		t.Errorf("result %s", got)
	}
	if _, err := tool.Func()(t.Context(), tools.Call{Args: json.RawMessage(`{"say":"something long"}`)}); !errors.Is(err, tools.ErrInvalidResult) {
		t.Fatalf("long result: err %v, want ErrInvalidResult", err)
	}
}

func TestRegistryRefusesBadNATSExecutors(t *testing.T) {
	t.Parallel()
	nc := natsConn(t)
	base := tools.Manifest{Name: "echo", Description: "Echo.", Permission: tools.Read, ArgsSchema: json.RawMessage(echoSchema)}
	tests := []struct {
		name      string
		edit      func(*tools.Manifest)
		opts      []tools.Option
		wantField string
	}{
		{"no connection", func(m *tools.Manifest) { m.Executor.NATS = "a.b" }, nil, "executor"},
		{"wildcard", func(m *tools.Manifest) { m.Executor.NATS = "a.*" }, []tools.Option{tools.WithConn(nc)}, "executor"},
		{"empty token", func(m *tools.Manifest) { m.Executor.NATS = "a..b" }, []tools.Option{tools.WithConn(nc)}, "executor"},
		{"space", func(m *tools.Manifest) { m.Executor.NATS = "a b" }, []tools.Option{tools.WithConn(nc)}, "executor"},
		{"builtin too", func(m *tools.Manifest) { m.Executor.NATS = "a.b"; m.Builtin = "echo" }, []tools.Option{tools.WithConn(nc)}, "builtin"},
		{"bad result schema", func(m *tools.Manifest) { m.Executor.NATS = "a.b"; m.ResultSchema = json.RawMessage(`{"type": 12}`) }, []tools.Option{tools.WithConn(nc)}, "result_schema"},
	}
	for _, tt := range tests {
		m := base
		tt.edit(&m)
		_, err := tools.NewRegistry([]tools.Manifest{m}, nil, tt.opts...)
		var me *tools.ManifestError
		if !errors.Is(err, tools.ErrInvalidManifest) || !errors.As(err, &me) || me.Field != tt.wantField {
			t.Errorf("%s: err %v, want a ManifestError on %s", tt.name, err, tt.wantField)
		}
	}
}

func TestRemoteResolverIsATool(t *testing.T) {
	t.Parallel()
	nc := natsConn(t)
	seen := respond(t, nc, "test.owner", func(*nats.Msg) *nats.Msg {
		return &nats.Msg{Data: []byte(`{"result":{"found":true,"tenant":"cityops"}}`)}
	})
	b := tools.Builtins{}
	b.MustRegister("draft", func(context.Context, tools.Call) (any, error) { return "ok", nil })
	reg, err := tools.NewRegistry([]tools.Manifest{
		{Name: "draft", Description: "Draft.", Permission: tools.Write, ArgsSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`),
			Resources: []tools.ResourceArg{{Arg: "id", Resolver: "owner"}}},
		{Name: "owner", Description: "Not for the model.", Permission: tools.Read, ArgsSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`),
			Executor: tools.Executor{NATS: "test.owner"}},
	}, b, tools.WithConn(nc))
	if err != nil {
		t.Fatal(err)
	}
	fn, ok := reg.Resolver("owner")
	if !ok {
		t.Fatal("resolver owner not found")
	}
	v, err := fn(t.Context(), tools.Call{Tool: "owner", RunID: "run-1", Tenant: "cityops", Principal: "dev", Args: json.RawMessage(`{"id":"SR-1"}`)})
	if got, _ := json.Marshal(v); err != nil || string(got) != `{"found":true,"tenant":"cityops"}` {
		t.Fatalf("resolve: %s, %v", got, err)
	}
	m := <-seen
	if m.Header.Get(tools.HeaderOperationID) != "" || m.Header.Get(tools.HeaderCallID) != "" || m.Header.Get(tools.HeaderTool) != "owner" {
		t.Errorf("resolver headers %v: no operation or call id, tool owner", m.Header)
	}
}

func TestExecutorDecodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		given   string
		want    tools.Executor
		wantErr bool
	}{
		{`"builtin"`, tools.Executor{}, false},
		{`{"nats":"cityops.tools.lookup"}`, tools.Executor{NATS: "cityops.tools.lookup"}, false},
		{`{}`, tools.Executor{}, false},
		{`"nats"`, tools.Executor{}, true},
		{`{"nats":"a","http":"b"}`, tools.Executor{}, true},
		{`7`, tools.Executor{}, true},
	}
	for _, tt := range tests {
		var m tools.Manifest
		err := json.Unmarshal([]byte(`{"executor":`+tt.given+`}`), &m)
		if (err != nil) != tt.wantErr || (err == nil && m.Executor != tt.want) {
			t.Errorf("%s: %+v, %v", tt.given, m.Executor, err)
		}
	}
	b, _ := json.Marshal(tools.Manifest{Executor: tools.Executor{NATS: "x.y"}})
	if !strings.Contains(string(b), `"executor":{"nats":"x.y"}`) {
		t.Errorf("marshal: %s", b)
	}
	if b, _ := json.Marshal(tools.Manifest{}); strings.Contains(string(b), "executor") {
		t.Errorf("a builtin's executor is left out: %s", b)
	}
	if s := (tools.Executor{NATS: "x.y"}).String(); s != "nats:x.y" {
		t.Errorf("String %q", s)
	}
}

func TestEffectiveSchemaMakesEquivalentSchemasEqual(t *testing.T) {
	t.Parallel()
	a, err := tools.EffectiveSchema(json.RawMessage(`{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tools.EffectiveSchema(json.RawMessage("{\n \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"}},\n \"additionalProperties\": false, \"type\": \"object\"}"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("%s != %s", a, b)
	}
	if _, err := tools.EffectiveSchema(json.RawMessage(`{"type":"array"}`)); err == nil {
		t.Error("a non-object schema is refused")
	}
}
