package toolsvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/toolsvc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const greetSchema = `{"type":"object","properties":{"name":{"type":"string","minLength":1},"mode":{"type":"string"}},"required":["name"]}`

// bundle is a server, a connection for the service and one for loopgate.
type bundle struct {
	t       *testing.T
	srv     *natsd.Server
	svcConn *nats.Conn
	lgConn  *nats.Conn
	logs    *strings.Builder
	logMu   *sync.Mutex
}

func setup(t *testing.T) *bundle {
	t.Helper()
	s, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	b := &bundle{t: t, srv: s, logs: &strings.Builder{}, logMu: &sync.Mutex{}}
	b.svcConn, b.lgConn = b.connect(), b.connect()
	return b
}

func (b *bundle) connect() *nats.Conn {
	nc, err := b.srv.Connect()
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(nc.Close)
	return nc
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (b *bundle) log() string {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	return b.logs.String()
}

// start runs a service with one endpoint, greet on test.greet, until the
// test ends.
func (b *bundle) start(nc *nats.Conn, cfg toolsvc.Config, h toolsvc.Handler) *toolsvc.Service {
	b.t.Helper()
	cfg.Name = "greeter"
	cfg.Version = "1.2.3"
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{b.logMu, b.logs}, nil))
	svc, err := toolsvc.New(nc, &cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := svc.Add("greet", "test.greet", h, toolsvc.ArgsSchema(json.RawMessage(greetSchema)),
		toolsvc.ResultSchema(json.RawMessage(`{"type":"object"}`))); err != nil {
		b.t.Fatal(err)
	}
	if err := svc.Start(b.t.Context()); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	return svc
}

// greet is the loopgate side: the greet tool's Func, executor nats.
func (b *bundle) greet(timeout time.Duration) tools.Func {
	b.t.Helper()
	reg, err := tools.NewRegistry([]tools.Manifest{{
		Name: "greet", Description: "Greet someone.", Permission: tools.Write, ArgsSchema: json.RawMessage(greetSchema),
		Executor: tools.Executor{NATS: "test.greet"},
	}}, nil, tools.WithConn(b.lgConn))
	if err != nil {
		b.t.Fatal(err)
	}
	tool, _ := reg.Lookup("greet")
	fn := tool.Func()
	return func(ctx context.Context, c tools.Call) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return fn(ctx, c)
	}
}

func greetCall(args string) tools.Call {
	return tools.Call{Tool: "greet", OperationID: "op-7", RunID: "run-7", CallID: "s2c1", Tenant: "cityops", Principal: "dev@cityops", Args: json.RawMessage(args)}
}

func TestAHandlerGetsTheCallAndItsResultReachesLoopgate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seen := make(chan toolsvc.Request, 1)
	var handlerDeadline time.Time
	b.start(b.svcConn, toolsvc.Config{}, func(ctx context.Context, req toolsvc.Request) (any, error) {
		handlerDeadline, _ = ctx.Deadline()
		seen <- req
		return map[string]string{"greeting": "hello " + req.Principal, "op": req.OperationID}, nil
	})
	before := time.Now()
	v, err := b.greet(2*time.Second)(t.Context(), greetCall(`{"name":"Ada"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(v); string(got) != `{"greeting":"hello dev@cityops","op":"op-7"}` {
		t.Errorf("result %s", got)
	}
	req := <-seen
	if req.Tool != "greet" || req.OperationID != "op-7" || req.RunID != "run-7" || req.CallID != "s2c1" || req.Tenant != "cityops" || req.Principal != "dev@cityops" || string(req.Args) != `{"name":"Ada"}` || req.Subject != "test.greet" {
		t.Errorf("request %+v", req)
	}
	if d := req.Deadline.Sub(before); d <= 0 || d > 2*time.Second+50*time.Millisecond {
		t.Errorf("deadline %s after the call, want about 2s", d)
	}
	if !handlerDeadline.Equal(req.Deadline) {
		t.Errorf("handler ctx deadline %v, request deadline %v", handlerDeadline, req.Deadline)
	}
}

func TestTheServiceIsDiscoverableWithItsSchemas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(b.svcConn, toolsvc.Config{Description: "greets", Metadata: map[string]string{"team": "a"}}, func(context.Context, toolsvc.Request) (any, error) { return nil, nil })
	subj, _ := micro.ControlSubject(micro.InfoVerb, "greeter", "")
	msg, err := b.lgConn.Request(subj, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	want, _ := tools.EffectiveSchema(json.RawMessage(greetSchema))
	if info.Name != "greeter" || info.Version != "1.2.3" || info.Description != "greets" || info.Metadata[toolsvc.MetadataContract] != "1" || info.Metadata["team"] != "a" || len(info.Endpoints) != 1 {
		t.Fatalf("info %+v", info)
	}
	ep := info.Endpoints[0]
	if ep.Name != "greet" || ep.Subject != "test.greet" || ep.QueueGroup != "q" || ep.Metadata[toolsvc.MetadataArgsSchema] != string(want) || ep.Metadata[toolsvc.MetadataResultSchema] != `{"type":"object"}` {
		t.Errorf("endpoint %+v", ep)
	}
}

func TestErrorsBecomeClassifiedErrorReplies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(b.svcConn, toolsvc.Config{}, func(_ context.Context, req toolsvc.Request) (any, error) {
		var a struct{ Mode string }
		_ = json.Unmarshal(req.Args, &a)
		switch a.Mode {
		case "transient":
			return nil, toolsvc.Transient(errors.New("backend restarting"))
		case "wrapped":
			return nil, errors.Join(errors.New("busy"), tools.ErrTransient)
		case "bad":
			return nil, toolsvc.BadRequest(errors.New("no such person"))
		case "teapot":
			return nil, &toolsvc.Error{Code: 418, Description: "short and\r\nstout"}
		case "panic":
			panic("boom")
		case "unmarshalable":
			return func() {}, nil
		}
		return nil, errors.New("password=hunter2 rejected by upstream")
	})
	greet := b.greet(2 * time.Second)
	tests := []struct {
		mode          string
		wantCode      int
		wantTransient bool
		wantDesc      string
	}{
		{"transient", 503, true, "unavailable: backend restarting"},
		{"wrapped", 503, true, "unavailable: busy"},
		{"bad", 400, false, "bad request: no such person"},
		{"teapot", 418, false, "short and stout"},
		{"panic", 500, false, "internal error"},
		{"unmarshalable", 500, false, "internal error"},
		{"other", 500, false, "internal error"},
	}
	for _, tt := range tests {
		_, err := greet(t.Context(), greetCall(`{"name":"Ada","mode":"`+tt.mode+`"}`))
		var re *tools.RemoteError
		if !errors.As(err, &re) {
			t.Errorf("%s: err %v, want a RemoteError", tt.mode, err)
			continue
		}
		if re.Code != tt.wantCode || errors.Is(err, tools.ErrTransient) != tt.wantTransient || !strings.HasPrefix(re.Description, tt.wantDesc) {
			t.Errorf("%s: code %d transient %v description %q", tt.mode, re.Code, errors.Is(err, tools.ErrTransient), re.Description)
		}
		if strings.Contains(re.Description, "hunter2") {
			t.Errorf("%s: an unclassified error's text left the service: %q", tt.mode, re.Description)
		}
	}
	if !strings.Contains(b.log(), "hunter2") || !strings.Contains(b.log(), "boom") {
		t.Errorf("the service's own log keeps the full errors:\n%s", b.log())
	}
}

func TestArgumentsOffSchemaAreRefusedBeforeTheHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(b.svcConn, toolsvc.Config{}, func(context.Context, toolsvc.Request) (any, error) {
		t.Error("handler ran")
		return nil, nil
	})
	// Straight to the subject, as any NATS client could: loopgate would
	// have refused these arguments itself.
	for _, args := range []string{`{}`, `{"name":""}`, `{"name":"Ada","admin":true}`, `not json`} {
		msg, err := b.lgConn.Request("test.greet", []byte(args), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" {
			t.Errorf("%s: code %q, want 400 (%s)", args, code, msg.Header.Get(micro.ErrorHeader))
		}
	}
}

func TestTheHandlerStopsAtTheCallsDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ended := make(chan error, 1)
	b.start(b.svcConn, toolsvc.Config{}, func(ctx context.Context, _ toolsvc.Request) (any, error) {
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	_, err := b.greet(150*time.Millisecond)(t.Context(), greetCall(`{"name":"Ada"}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("loopgate side: %v, want a timeout", err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("handler ctx ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end at the call's deadline")
	}
}

func TestAFullServiceAnswersBusyWhichIsTransient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	b.start(b.svcConn, toolsvc.Config{MaxConcurrent: 1}, func(ctx context.Context, _ toolsvc.Request) (any, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "done", nil
	})
	greet := b.greet(5 * time.Second)
	first := make(chan error, 1)
	go func() {
		_, err := greet(t.Context(), greetCall(`{"name":"Ada"}`))
		first <- err
	}()
	<-entered
	_, err := greet(t.Context(), greetCall(`{"name":"Bob"}`))
	close(release)
	if !errors.Is(err, tools.ErrTransient) {
		t.Errorf("second call: %v, want transient (busy)", err)
	}
	if err := <-first; err != nil {
		t.Errorf("first call: %v", err)
	}
}

func TestInstancesInOneQueueGroupShareTheCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	served := map[string]int{}
	for _, who := range []string{"a", "b"} {
		b.start(b.connect(), toolsvc.Config{}, func(context.Context, toolsvc.Request) (any, error) {
			mu.Lock()
			served[who]++
			mu.Unlock()
			return who, nil
		})
	}
	greet := b.greet(2 * time.Second)
	for range 40 {
		if _, err := greet(t.Context(), greetCall(`{"name":"Ada"}`)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if served["a"]+served["b"] != 40 || served["a"] == 0 || served["b"] == 0 {
		t.Errorf("served %v: want 40 calls, each run once, spread over both instances", served)
	}
}

func TestAfterStopNobodyAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc := b.start(b.svcConn, toolsvc.Config{}, func(context.Context, toolsvc.Request) (any, error) { return "hi", nil })
	greet := b.greet(2 * time.Second)
	if _, err := greet(t.Context(), greetCall(`{"name":"Ada"}`)); err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(t.Context()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := b.svcConn.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := greet(t.Context(), greetCall(`{"name":"Ada"}`)); !errors.Is(err, tools.ErrTransient) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("after Stop: %v, want no responders (transient)", err)
	}
}

func TestStopCancelsCallsThatOutliveIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entered, ended := make(chan struct{}), make(chan error, 1)
	svc := b.start(b.svcConn, toolsvc.Config{}, func(ctx context.Context, _ toolsvc.Request) (any, error) {
		close(entered)
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	greet := b.greet(10 * time.Second)
	go func() { _, _ = greet(t.Context(), greetCall(`{"name":"Ada"}`)) }()
	<-entered
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := svc.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop: %v, want the grace period's end", err)
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("handler ctx: %v, want cancelled", err)
	}
}

func TestConfigAndEndpointsAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := toolsvc.New(b.svcConn, &toolsvc.Config{Name: "has space"}); err == nil || !strings.Contains(err.Error(), "Config.Name") {
		t.Errorf("bad name: %v", err)
	}
	if _, err := toolsvc.New(b.svcConn, &toolsvc.Config{Name: "ok", MaxConcurrent: -1}); err == nil || !strings.Contains(err.Error(), "MaxConcurrent") {
		t.Errorf("negative MaxConcurrent: %v", err)
	}
	svc, err := toolsvc.New(b.svcConn, &toolsvc.Config{Name: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, toolsvc.Request) (any, error) { return nil, nil }
	for _, tt := range []struct {
		name, subject string
		opts          []toolsvc.EndpointOption
	}{
		{"bad name!", "a.b", nil},
		{"ok", "a b", nil},
		{"ok", "a.b", []toolsvc.EndpointOption{toolsvc.ArgsSchema(json.RawMessage(`{"type":"object","additionalProperties":true}`))}},
		{"ok", "a.b", []toolsvc.EndpointOption{toolsvc.ArgsSchema(json.RawMessage(`[]`))}},
	} {
		if err := svc.Add(tt.name, tt.subject, h, tt.opts...); err == nil {
			t.Errorf("Add(%q, %q) accepted", tt.name, tt.subject)
		}
	}
	if err := svc.Add("ok", "a.b", h); err != nil {
		t.Fatal(err)
	}
	if err := svc.Add("ok", "a.c", h); err == nil {
		t.Error("a second endpoint of one name was accepted")
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(t.Context())
	if err := svc.Add("late", "a.d", h); err == nil {
		t.Error("Add after Start was accepted")
	}
}
