package nodetool

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// node is the running Node.js service and the loopgate side's connection.
type node struct {
	nc     *nats.Conn
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startNode starts an embedded server and `node tool.js` against it, and
// waits for the service's ready line. It skips the test when node or the
// npm dependencies are missing.
func startNode(t *testing.T) *node {
	t.Helper()
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: the Node.js tool service test needs Node.js 18+ (CI has it)")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "nats", "package.json")); err != nil {
		t.Skip("examples/node-tool/node_modules is missing: run `npm ci` in examples/node-tool (.ci/run does)")
	}
	srv, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect(nats.Name("loopgate"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	n := &node{nc: nc, stderr: &syncBuffer{}}
	cmd := exec.Command(nodeBin, "tool.js")
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL(), "SUBJECT_PREFIX=test.tools")
	cmd.Stderr = n.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready, exited := make(chan string, 1), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "node tool service ready") {
				ready <- sc.Text()
			}
		}
		exited <- cmd.Wait()
	}()
	// Registered after srv.Shutdown's cleanup, so it runs first: the
	// service stops while its server is still up.
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("node exited with %v\n%s", err, n.stderr)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("node did not stop on SIGINT\n%s", n.stderr)
		}
	})
	select {
	case line := <-ready:
		t.Log(line)
	case err := <-exited:
		t.Fatalf("node exited before it was ready: %v\n%s", err, n.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("node was not ready after 30s\n%s", n.stderr)
	}
	return n
}

// tool returns the loopgate side of a tool served by the Node service: a
// registry entry with executor nats, as a config would declare it.
func (n *node) tool(t *testing.T, name string, args json.RawMessage, resultSchema string) tools.Func {
	t.Helper()
	m := tools.Manifest{Name: name, Description: "A tool in Node.js.", Permission: tools.Read, ArgsSchema: args,
		Executor: tools.Executor{NATS: "test.tools." + name}}
	if resultSchema != "" {
		m.ResultSchema = json.RawMessage(resultSchema)
	}
	reg, err := tools.NewRegistry([]tools.Manifest{m}, nil, tools.WithConn(n.nc))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Lookup(name)
	return tool.Func()
}

const echoArgs = `{"type":"object","properties":{"say":{"type":"string"},"fail":{"enum":["transient","bad_request","internal"]},"sleep_ms":{"type":"integer","minimum":0}}}`

func call(args string) tools.Call {
	return tools.Call{Tool: "wire_echo", OperationID: "0196f3c2-op-from-loopgate", RunID: "run-42", CallID: "s3c2",
		Tenant: "cityops", Principal: "dev@cityops", Args: json.RawMessage(args)}
}

func TestTheNodeToolSeesTheCallAndAnswersAResult(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	echo := n.tool(t, "wire_echo", json.RawMessage(echoArgs), `{"type":"object","required":["said","seen"]}`)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	v, err := echo(ctx, call(`{"say":"hello from loopgate"}`))
	if err != nil {
		t.Fatalf("%v\n%s", err, n.stderr)
	}
	var got struct {
		Said     string            `json:"said"`
		ServedBy string            `json:"served_by"`
		Seen     map[string]string `json:"seen"`
	}
	if err := json.Unmarshal(v.(json.RawMessage), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"tool": "wire_echo", "operation_id": "0196f3c2-op-from-loopgate", "run_id": "run-42", "call_id": "s3c2",
		"tenant": "cityops", "principal": "dev@cityops",
	}
	// The tool keeps the earlier of the deadline header and its receipt
	// time plus the timeout header (whole milliseconds, rounded down), so
	// the deadline it saw may be a few milliseconds before loopgate's.
	seenDeadline, err := time.Parse(tools.DeadlineFormat, got.Seen["deadline"])
	if err != nil {
		t.Errorf("deadline seen %q: %v", got.Seen["deadline"], err)
	}
	if sent := deadline.Truncate(time.Millisecond); seenDeadline.After(sent) || seenDeadline.Before(sent.Add(-time.Second)) {
		t.Errorf("the tool saw deadline %s, loopgate sent %s", seenDeadline, sent)
	}
	delete(got.Seen, "deadline")
	if got.Said != "hello from loopgate" || got.ServedBy != "node" || !reflect.DeepEqual(got.Seen, want) {
		t.Errorf("answer %+v\nwant seen %v", got, want)
	}
}

func TestAnErrorReplyFromNodeIsClassified(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	echo := n.tool(t, "wire_echo", json.RawMessage(echoArgs), "")
	tests := []struct {
		fail          string
		wantCode      int
		wantTransient bool
	}{
		{"transient", 503, true},
		{"bad_request", 400, false},
		{"internal", 500, false},
	}
	for _, tt := range tests {
		_, err := echo(t.Context(), call(`{"fail":"`+tt.fail+`"}`))
		var re *tools.RemoteError
		if !errors.As(err, &re) || re.Code != tt.wantCode || errors.Is(err, tools.ErrTransient) != tt.wantTransient {
			t.Errorf("%s: err %v, want a %d reply (transient %v)", tt.fail, err, tt.wantCode, tt.wantTransient)
		}
		if re != nil && strings.Contains(re.Description, "stays in the service log") {
			t.Errorf("%s: the service's internal error text was sent: %q", tt.fail, re.Description)
		}
	}
}

func TestANodeToolThatOutlivesItsDeadlineIsATimeout(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	echo := n.tool(t, "wire_echo", json.RawMessage(echoArgs), "")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := echo(ctx, call(`{"sleep_ms":5000}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want a timeout (the Node service sends nothing after the deadline)", err)
	}
}

func TestNodeAndGoAnswerGetProcedureAlike(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	schema, err := cityops.Files.ReadFile("schemas/get_procedure.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	remote := n.tool(t, "get_procedure", schema, `{"type":"object","required":["topic"]}`)
	builtins := tools.Builtins{}
	if err := cityops.Register(builtins, cityops.Options{Outbox: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`{"topic":"sanitation"}`, `{"topic":"  Noise "}`, `{"topic":"zoning"}`} {
		c := tools.Call{Tool: "get_procedure", RunID: "run-1", CallID: "s1c1", OperationID: "op", Tenant: "cityops", Principal: "dev", Args: json.RawMessage(args)}
		fromNode, err := remote(t.Context(), c)
		if err != nil {
			t.Fatalf("%s: node: %v\n%s", args, err, n.stderr)
		}
		fromGo, err := builtins[cityops.ToolGetProcedure](t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := canonical(t, fromNode), canonical(t, fromGo); a != b {
			t.Errorf("%s:\nnode %s\ngo   %s", args, a, b)
		}
	}
	// Arguments off the contract, sent straight to the subject.
	msg, err := n.nc.Request("test.tools.get_procedure", []byte(`{"topic":"noise","extra":1}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(micro.ErrorCodeHeader) != "400" {
		t.Errorf("extra argument: code %q, want 400", msg.Header.Get(micro.ErrorCodeHeader))
	}
}

func TestTheNodeServiceIsDiscoverable(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	subj, _ := micro.ControlSubject(micro.InfoVerb, "cityops-node-tools", "")
	msg, err := n.nc.Request(subj, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Metadata["loopgate.contract"] != "1" || len(info.Endpoints) != 2 {
		t.Fatalf("info %+v", info)
	}
	schema, _ := cityops.Files.ReadFile("schemas/get_procedure.schema.json")
	want, _ := tools.EffectiveSchema(schema)
	for _, ep := range info.Endpoints {
		if ep.QueueGroup != "q" {
			t.Errorf("endpoint %s queue %q, want q (shared with Go services)", ep.Name, ep.QueueGroup)
		}
		if ep.Name == "get_procedure" {
			got, err := tools.EffectiveSchema(json.RawMessage(ep.Metadata["loopgate.args_schema"]))
			if err != nil || string(got) != string(want) {
				t.Errorf("advertised schema %s, want the manifest's %s (%v)", got, want, err)
			}
		}
	}
}

func canonical(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tools.Canonical(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(c)
}
