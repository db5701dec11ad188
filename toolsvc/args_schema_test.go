package toolsvc_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/toolsvc"
)

const dateSchema = `{"type":"object","properties":{"since":{"type":"string","format":"date"}},"required":["since"]}`

// loopgate asserts formats on tool arguments (tools.CompileArgsSchema).
// ArgsSchema used to compile with schemas.CompileBytes, which does not,
// so a direct caller's {"since":"not-a-date"}, refused by loopgate with a
// field error, reached the handler although the service "checks every
// request against it, answering 400". Now both refuse it, and both take a
// date.
func TestArgsSchemaChecksFormatsAsLoopgateDoes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg, err := tools.NewRegistry([]tools.Manifest{{
		Name: "since", Description: "d", Permission: tools.Read, ArgsSchema: json.RawMessage(dateSchema),
		Executor: tools.Executor{NATS: "test.since"},
	}}, nil, tools.WithConn(b.lgConn))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Lookup("since")

	svc, err := toolsvc.New(b.svcConn, &toolsvc.Config{Name: "dates", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	if err := svc.Add("since", "test.since", func(context.Context, toolsvc.Request) (any, error) {
		ran <- struct{}{}
		return "ran", nil
	}, toolsvc.ArgsSchema(json.RawMessage(dateSchema))); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })

	for _, tt := range []struct {
		args    string
		wantRun bool
	}{
		{`{"since":"not-a-date"}`, false},
		{`{"since":"2026-11-30"}`, true},
	} {
		_, _, errs := tool.Validate(json.RawMessage(tt.args))
		if loopgateRuns := len(errs) == 0; loopgateRuns != tt.wantRun {
			t.Fatalf("precondition: loopgate's check of %s: %v", tt.args, errs)
		}
		msg, err := b.lgConn.Request("test.since", []byte(tt.args), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		code := msg.Header.Get(micro.ErrorCodeHeader)
		select {
		case <-ran:
			if !tt.wantRun {
				t.Errorf("the handler ran on %s, which loopgate's schema check refuses", tt.args)
			}
		default:
			if tt.wantRun {
				t.Errorf("the handler did not run on %s (code %q body %s), which loopgate accepts", tt.args, code, msg.Data)
			}
		}
		if !tt.wantRun && code != "400" {
			t.Errorf("service answered code %q body %s to %s, want 400 as loopgate refuses it", code, msg.Data, tt.args)
		}
	}
}

// The registry refuses an args_schema whose $ref does not resolve.
// ArgsSchema used to accept it, and the property behind the dangling $ref
// was then not checked at all: {"a":1} and {"a":"x"} both reached the
// handler. Now Add refuses it, as loopgate does, rather than advertise
// and "check" a schema that checks nothing there.
func TestArgsSchemaRefusesAnUnresolvedRefAsLoopgateDoes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const schema = `{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`
	if _, err := tools.NewRegistry([]tools.Manifest{{
		Name: "r", Description: "d", Permission: tools.Read, ArgsSchema: json.RawMessage(schema),
		Executor: tools.Executor{NATS: "test.r"},
	}}, nil, tools.WithConn(b.lgConn)); err == nil {
		t.Fatal("precondition: the registry accepts an unresolved $ref")
	}
	svc, err := toolsvc.New(b.svcConn, &toolsvc.Config{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, toolsvc.Request) (any, error) { return "ran", nil }
	err = svc.Add("r", "test.r", h, toolsvc.ArgsSchema(json.RawMessage(schema)))
	if err == nil || !strings.Contains(err.Error(), "args_schema") {
		t.Errorf("Add with an args_schema whose $ref does not resolve: %v, want an args_schema error", err)
	}
	const resolved = `{"type":"object","properties":{"a":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`
	if err := svc.Add("r", "test.r", h, toolsvc.ArgsSchema(json.RawMessage(resolved))); err != nil {
		t.Errorf("Add with an args_schema whose $ref resolves: %v", err)
	}
}
