package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/worker"
)

// childEnv, set to 1, makes the test binary run the command instead of
// the tests: the tools run in a process of their own, as in production,
// built with the same flags (-race) as the test.
const childEnv = "CITYOPS_TOOLS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// secret is the CityOps token the tool process holds; nothing loopgate
// records or receives may contain it.
const secret = "cityops-secret-7f3a9c"

// toolProcess is cityops-tools running as a child process.
type toolProcess struct {
	outbox string
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

// startTools starts cityops-tools against natsURL and waits until it says
// it is serving. It is interrupted, and must exit 0, when the test ends.
func startTools(t *testing.T, natsURL string, extra ...string) *toolProcess {
	t.Helper()
	p := &toolProcess{outbox: filepath.Join(t.TempDir(), "outbox"), stderr: &syncBuffer{}}
	args := append([]string{"--nats", natsURL, "--outbox", p.outbox, "--slow-delay", "20s"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1", tokenEnv+"="+secret)
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "cityops-tools serving") {
				ready <- sc.Text()
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("cityops-tools exited with %v\n%s", err, p.stderr)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("cityops-tools did not stop on SIGINT\n%s", p.stderr)
		}
	})
	select {
	case line := <-ready:
		t.Log(line)
	case err := <-exited:
		t.Fatalf("cityops-tools exited early: %v\n%s", err, p.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("cityops-tools did not start\n%s", p.stderr)
	}
	return p
}

// bundle is loopgate with the remote CityOps config and its tools in a
// child process.
type bundle struct {
	t     *testing.T
	env   *natstest.Env
	tools *toolProcess
	logs  *syncBuffer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	b := &bundle{t: t, env: env, logs: &syncBuffer{}}
	b.tools = startTools(t, env.Server.ClientURL())

	cfg, err := config.LoadFile(filepath.Join("..", "..", "examples", "cityops", "remote.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// No builtins at all: every tool, and the resolver, is remote.
	reg, err := tools.NewRegistry(cfg.Tools, tools.Builtins{}, tools.WithConn(env.Conn))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := worker.New(worker.Deps{JS: env.JS, Journal: env.Journal, App: cfg, Registry: reg},
		&worker.Config{Workers: 2, Logger: slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), TransientBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pool.Stop(ctx)
	})
	return b
}

// submit publishes a CityOps task and returns its run id.
func (b *bundle) submit(taskID, agent, input string, dryRun bool) string {
	b.t.Helper()
	task := events.Task{
		TaskID: taskID, Tenant: "cityops", Agent: agent, DryRun: dryRun,
		Principal: events.Principal{ID: "dev@cityops", Roles: []string{"operator"}},
		Input:     json.RawMessage(`"` + input + `"`),
	}
	payload, err := json.Marshal(task)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.env.JS.Publish(b.t.Context(), events.TaskSubject("cityops"), payload); err != nil {
		b.t.Fatal(err)
	}
	return events.RunID("cityops", taskID)
}

// approveAll answers every question of the run as supervisor@cityops,
// once the run has parked, on the approvals subject — what any approver's
// client does — signed with the example's key for them: remote.yaml
// requires signed approvals.
func (b *bundle) approveAll(ctx context.Context, runID string) {
	seed, err := cityops.ApproverSeed("supervisor@cityops")
	if err != nil {
		b.t.Error(err)
		return
	}
	key, err := approvals.ParseSeed(seed)
	if err != nil {
		b.t.Error(err)
		return
	}
	var q events.ApprovalRequestedData
	var callID string
	for e, err := range b.env.Journal.Watch(ctx, events.RunFilter("cityops", runID)) {
		if err != nil {
			return
		}
		switch e.Type {
		case events.TypeApprovalRequested:
			_ = e.Decode(&q)
			callID = e.CallID
		case events.TypeParked:
			m := approvals.Message{RunID: runID, CallID: callID, ArgsHash: q.ArgsHash, Decision: approvals.Approve,
				Approver: approvals.Approver{ID: "supervisor@cityops"}, Reason: "ok, escalate"}
			if err := approvals.Sign(&m, key, time.Now()); err != nil {
				b.t.Error(err)
				return
			}
			payload, _ := json.Marshal(m)
			_, _ = b.env.JS.Publish(ctx, events.ApprovalSubject("cityops", runID, callID), payload)
		case events.TypeFinished:
			return
		}
	}
}

// waitEnd returns the run's events once it has finished.
func (b *bundle) waitEnd(runID string) []events.Event {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.t.Context(), 60*time.Second)
	defer cancel()
	go b.approveAll(ctx, runID)
	for e, err := range b.env.Journal.Watch(ctx, events.RunFilter("cityops", runID)) {
		if err != nil {
			b.t.Fatalf("run %s did not finish: %v\nworker log:\n%s\ntool log:\n%s", runID, err, b.logs, b.tools.stderr)
		}
		if e.Type == events.TypeFinished || e.Type == events.TypeRejected {
			break
		}
	}
	evs, _, err := b.env.Journal.Load(b.t.Context(), "cityops", runID)
	if err != nil {
		b.t.Fatal(err)
	}
	return evs
}

// executed lists "tool:status" for each executed event.
func executed(t *testing.T, evs []events.Event) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		if e.Type != events.TypeExecuted {
			continue
		}
		var d events.ExecutedData
		if err := e.Decode(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Tool+":"+d.Status)
	}
	return out
}

func finished(t *testing.T, evs []events.Event) events.FinishedData {
	t.Helper()
	last := evs[len(evs)-1]
	var f events.FinishedData
	if last.Type != events.TypeFinished || last.Decode(&f) != nil {
		t.Fatalf("last event %s, want finished", last.Type)
	}
	return f
}

func noSecret(t *testing.T, evs []events.Event) {
	t.Helper()
	for _, e := range evs {
		if b, _ := json.Marshal(e); strings.Contains(string(b), secret) {
			t.Errorf("event %d (%s) carries the tool process's credentials", e.Seq, e.Type)
		}
	}
}

func TestTheHappyPathRunsWithItsToolsInAnotherProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runID := b.submit("remote-happy", "escalation-assistant", "escalate the oldest open sanitation complaints", false)
	evs := b.waitEnd(runID)

	if f := finished(t, evs); f.Reason != events.ReasonDone {
		t.Fatalf("finished %s (%s)\nworker log:\n%s\ntool log:\n%s", f.Reason, f.Detail, b.logs, b.tools.stderr)
	}
	want := []string{"get_procedure:ok", "lookup_complaints:ok", "draft_escalation:ok", "draft_escalation:ok", "draft_escalation:ok"}
	if got := executed(t, evs); !slices.Equal(got, want) {
		t.Errorf("executed %v, want %v", got, want)
	}
	// Each draft is in the tool process's outbox, named by the operation
	// id loopgate minted and sent in Loopgate-Operation-Id.
	var ops []string
	for _, e := range evs {
		if e.Type == events.TypeExecuted && e.Tool == "draft_escalation" {
			var d events.ExecutedData
			_ = e.Decode(&d)
			ops = append(ops, d.OperationID)
			var r struct {
				DraftPath string `json:"draft_path"`
				Status    string `json:"status"`
			}
			if err := json.Unmarshal(d.Result, &r); err != nil || r.DraftPath != "escalation-"+d.OperationID+".txt" || r.Status != "pending_approval" {
				t.Errorf("draft result %s", d.Result)
			}
		}
	}
	entries, err := os.ReadDir(b.tools.outbox)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("outbox holds %d files, want 3 drafts", len(entries))
	}
	for i, op := range ops {
		body, err := os.ReadFile(filepath.Join(b.tools.outbox, "escalation-"+op+".txt"))
		if err != nil {
			t.Fatalf("draft of operation %s: %v", op, err)
		}
		wantReq := []string{"SR-10421", "SR-10422", "SR-10423"}[i]
		if !strings.Contains(string(body), "Request:   "+wantReq) || !strings.Contains(string(body), "Operation: "+op) {
			t.Errorf("draft %s:\n%s", op, body)
		}
	}
	// The lookup went through the manifest's view: ids and ages only.
	for _, e := range evs {
		if e.Type == events.TypeObserved && e.Tool == "lookup_complaints" && strings.Contains(string(e.Data), "phone") {
			t.Errorf("the lookup observation shows contact details: %s", e.Data)
		}
	}
	noSecret(t, evs)
}

func TestASlowRemoteToolTimesOutAndTheRunRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runID := b.submit("remote-slow", "slow-lookup-assistant", "check the vendor copy", false)
	evs := b.waitEnd(runID)
	if f := finished(t, evs); f.Reason != events.ReasonDone {
		t.Fatalf("finished %s (%s)", f.Reason, f.Detail)
	}
	if got := executed(t, evs); len(got) < 2 || got[0] != "slow_lookup:timeout" || !slices.Contains(got, "lookup_complaints:ok") {
		t.Errorf("executed %v, want slow_lookup:timeout then lookup_complaints:ok", got)
	}
	noSecret(t, evs)
}

func TestADryRunReachesNoToolProcessOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runID := b.submit("remote-dry", "dry-run-assistant", "draft an escalation for SR-10421", true)
	evs := b.waitEnd(runID)
	if f := finished(t, evs); f.Reason != events.ReasonDone {
		t.Fatalf("finished %s (%s)", f.Reason, f.Detail)
	}
	if got := executed(t, evs); !slices.Contains(got, "draft_escalation:dry_run") {
		t.Errorf("executed %v, want a dry_run draft", got)
	}
	if entries, _ := os.ReadDir(b.tools.outbox); len(entries) != 0 {
		t.Errorf("outbox holds %d files after a dry run", len(entries))
	}
}

func TestTheToolProcessIsDiscoverableAndKeepsItsCredentials(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	startTools(t, env.Server.ClientURL(), "--tools", "get_procedure,complaint_owner")
	subj, _ := micro.ControlSubject(micro.InfoVerb, "cityops-tools", "")
	msg, err := env.Conn.Request(subj, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(msg.Data), secret) {
		t.Error("$SRV.INFO carries the credentials")
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
		if ep.Metadata["loopgate.args_schema"] == "" {
			t.Errorf("endpoint %s advertises no args schema", ep.Name)
		}
	}
	slices.Sort(subjects)
	if info.Version != version || !slices.Equal(subjects, []string{"cityops.tools.complaint_owner", "cityops.tools.get_procedure"}) {
		t.Errorf("info %s %v", info.Version, subjects)
	}
}

func TestRunRefusesToStartWithoutCredentials(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	code := run(t.Context(), []string{"--nats", "nats://127.0.0.1:1"}, func(string) string { return "" }, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), tokenEnv) {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	code = run(t.Context(), []string{"--tools", "email_resident"}, func(k string) string { return map[string]string{tokenEnv: "x"}[k] }, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "unknown tool") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
