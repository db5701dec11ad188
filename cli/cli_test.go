package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/events"
)

func TestDemoHappyPathApprovesThreeDraftsAndFinishesDone(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := Main(t.Context(), []string{"demo"}, strings.NewReader(""), &out, &errOut)
	if code != exitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	s := out.String()
	for _, want := range []string{"SR-10421", "SR-10422", "SR-10423", "finished: done", "3 drafts",
		"the demo supervisor supervisor@cityops approves each one through the approvals subject, signed with its example key"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	// Each draft is asked for, the run parks, the demo supervisor answers
	// through the approvals subject, and loopgate records the approval.
	for _, call := range []string{"s3c1", "s4c1", "s5c1"} {
		if !strings.Contains(s, "→ demo supervisor supervisor@cityops approves "+call+" (draft_escalation {") {
			t.Errorf("the demo supervisor did not approve %s:\n%s", call, s)
		}
	}
	for what, want := range map[string]int{"approval_requested": 3, "parked": 3, "APPROVED by supervisor@cityops": 3, "ESCALATION DRAFT": 3, "approval_rejected": 0} {
		if n := strings.Count(s, what); n != want {
			t.Errorf("demo output has %q %d times, want %d:\n%s", what, n, want, s)
		}
	}
}

func TestDemoInteractiveDenialReachesTheModelAndTheRunGoesOn(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	// "n" denies the first draft; the end of input denies the rest.
	code := Main(t.Context(), []string{"demo", "--interactive"}, strings.NewReader("n\n"), &out, &errOut)
	if code != exitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	s := out.String()
	// The approver saw the exact action before deciding.
	for _, want := range []string{
		`args       {"reason":"Open 9 days, past the 5-day sanitation escalation threshold.","request_id":"SR-10421"}`,
		"args_hash  sha256:", "why        draft_escalation is a write tool", "expires    in 1h0m0s", "approve? [y/N] n\n",
		"→ demo supervisor supervisor@cityops denies s3c1",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("interactive demo output lacks %q:\n%s", want, s)
		}
	}
	// The model is told, and the scripted model goes on with its next
	// decision: the next two drafts are asked for and denied in turn (no
	// more input), nothing is written, and the script's final answer
	// claims drafts the trail shows were denied: loopgate stops the run as
	// completion_unverified, naming the claim (the demo exits 0: that is
	// what a denial at the prompt should end in).
	if n := strings.Count(s, `"message":"DENIED by supervisor@cityops: denied at the demo prompt. Propose an alternative."`); n != 3 {
		t.Errorf("the model saw %d denials, want 3:\n%s", n, s)
	}
	for _, want := range []string{"step 4    proposed                  draft_escalation{\"request_id\":\"SR-10422\"",
		"step 5    proposed                  draft_escalation{\"request_id\":\"SR-10423\"",
		"finished: completion_unverified", `why: the final answer lists "SR-10421" under drafts_created, and no write of this run succeeded`, "outbox: empty"} {
		if !strings.Contains(s, want) {
			t.Errorf("interactive demo output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "executing          s3c1") {
		t.Errorf("a denied draft was executed:\n%s", s)
	}
}

func TestDemoWithAnApproverThePolicyRefusesStopsWithTheRejection(t *testing.T) {
	t.Parallel()
	// intern@cityops and dev@cityops sign with their example keys, so what
	// is refused is their role and their own run; the example has no key
	// for nobody@cityops, whose approvals go unsigned, and the example
	// policy requires signatures.
	for approver, class := range map[string]string{"intern@cityops": "not_authorized", "dev@cityops": "self_approval", "nobody@cityops": "unsigned"} {
		t.Run(approver, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := Main(t.Context(), []string{"demo", "--approver", approver}, strings.NewReader(""), &out, &errOut)
			if code != exitApprovalRejected {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, exitApprovalRejected, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), "approval_rejected  s3c1   REJECTED "+class) {
				t.Errorf("the rejection %s is not in the timeline:\n%s", class, out.String())
			}
			if !strings.Contains(errOut.String(), "Try --approver supervisor@cityops") || strings.Contains(out.String(), "ESCALATION DRAFT") {
				t.Errorf("stderr does not say what to do, or a draft was written:\n%s\n%s", out.String(), errOut.String())
			}
		})
	}
}

func TestDemoScenariosEndAsDesigned(t *testing.T) {
	t.Parallel()
	for name, reason := range expectedReason {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := Main(t.Context(), []string{"demo", "--scenario", name}, strings.NewReader(""), &out, &errOut)
			if code != exitOK {
				t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), "finished: "+string(reason)) {
				t.Errorf("scenario %s did not end %s:\n%s", name, reason, out.String())
			}
			if name == "dry-run" && !strings.Contains(out.String(), "outbox: empty") {
				t.Errorf("dry run wrote drafts:\n%s", out.String())
			}
		})
	}
}

func TestUnknownScenarioAndCommandAreErrors(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"demo", "--scenario", "nope"}, nil, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "unknown scenario") {
		t.Errorf("unknown scenario: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := Main(t.Context(), []string{"frobnicate"}, nil, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "unknown command") {
		t.Errorf("unknown command: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := Main(t.Context(), []string{"worker"}, nil, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "--nats") {
		t.Errorf("worker without --nats: exit %d, stderr %q", code, errOut.String())
	}
}

// server is a `loopgate serve` running in the test, as an operator runs it.
type server struct {
	url    string
	cancel context.CancelFunc
	done   chan int
	stderr *syncBuffer
}

func startServe(t *testing.T, dataDir string, flags ...string) *server {
	t.Helper()
	return launchServe(t, func(addr string) []string {
		return append([]string{"serve", "--config", "../examples/cityops/loopgate.yaml", "--listen", addr,
			"--data", dataDir, "--workers", "2", "--log-format", "json"}, flags...)
	})
}

// launchServe runs Main with the arguments args gives for a loopback
// address free a moment ago, and waits until it serves. The address is
// picked and closed before serve listens on it, so a server of a parallel
// test can take it first: then serve is started again on another.
func launchServe(t *testing.T, args func(addr string) []string) *server {
	t.Helper()
	return launchServeOn(t, func(int) string { return freeAddr(t) }, args)
}

// launchServeOn is launchServe with the address of each try picked by
// pick (tries count from 1).
func launchServeOn(t *testing.T, pick func(try int) string, args func(addr string) []string) *server {
	t.Helper()
	const tries = 3
	for try := 1; ; try++ {
		s, line, err := tryServe(pick(try), args)
		if err == nil {
			t.Cleanup(func() { s.stop(t) })
			return s
		}
		if try == tries || !strings.Contains(s.stderr.String(), "address already in use") {
			t.Fatalf("serve did not start: %q %v\n%s", line, err, s.stderr.String())
		}
		t.Logf("serve did not start, its address taken; again on another: %s", s.stderr.String())
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// tryServe starts serve on addr once; on an error it has exited.
func tryServe(addr string, args func(addr string) []string) (*server, string, error) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &server{url: "nats://" + addr, cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	go func() {
		s.done <- Main(ctx, args(addr), nil, pw, s.stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err == nil && !strings.Contains(line, "serving on") {
		err = errors.New("no serving line")
	}
	if err != nil {
		cancel()
		<-s.done
		return s, line, err
	}
	go io.Copy(io.Discard, pr)
	return s, line, nil
}

func (s *server) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case code := <-s.done:
		if code != exitOK {
			t.Errorf("serve exited %d on SIGTERM-like cancel\n%s", code, s.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Errorf("serve did not shut down")
	}
}

// plainTask is a task as an upstream system writes it, without loopgate's code.
func plainTask(id, agent string) []byte {
	return []byte(fmt.Sprintf(`{"task_id":%q,"tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":%q,"input":"escalate the oldest sanitation complaints"}`, id, agent))
}

// collect subscribes with a plain NATS client to a run's events and returns
// them, by subject, until the run ends. Like a plain approver, it approves
// each call the run parks on as supervisor@cityops, with a JSON message
// bound to the args hash of the call's approval_requested event, signed as
// the example policy requires: with the nkeys library alone, over the
// canonical JSON the wire contract names (approvals/signature.go).
func collect(t *testing.T, nc *nats.Conn, runID string, publish func()) []*nats.Msg {
	t.Helper()
	seed, err := os.ReadFile(exampleKeys + "supervisor@cityops.nk")
	if err != nil {
		t.Fatal(err)
	}
	key, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		t.Fatal(err)
	}
	// The events as the stream stores them: a core subscription on their
	// subjects also sees appends JetStream refused (a conditional append
	// that lost to another writer, an approval handler's, is published
	// all the same), and read so, a run's trail had event 31 twice.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(t.Context(), "LOOPGATE_EVENTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"loopgate.events.cityops." + runID + ".*"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *nats.Msg, 256)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ch <- &nats.Msg{Subject: m.Subject(), Data: m.Data()}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	publish()
	var msgs []*nats.Msg
	hashes := map[string]string{}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-ch:
			msgs = append(msgs, m)
			var ev struct {
				CallID string `json:"call_id"`
				Data   struct {
					ArgsHash string   `json:"args_hash"`
					Awaiting []string `json:"awaiting"`
				} `json:"data"`
			}
			_ = json.Unmarshal(m.Data, &ev)
			switch {
			case strings.HasSuffix(m.Subject, ".approval_requested"):
				hashes[ev.CallID] = ev.Data.ArgsHash
			case strings.HasSuffix(m.Subject, ".parked"):
				for _, call := range ev.Data.Awaiting {
					at := time.Now().UTC().Format(time.RFC3339Nano)
					signed := fmt.Sprintf(`{"approver":"supervisor@cityops","args_hash":%q,"call_id":%q,"decision":"approve","reason":"","run_id":%q,"time":%q}`,
						hashes[call], call, runID, at)
					sig, err := key.Sign([]byte(signed))
					if err != nil {
						t.Fatal(err)
					}
					approval := fmt.Sprintf(`{"run_id":%q,"call_id":%q,"args_hash":%q,"decision":"approve","approver":{"id":"supervisor@cityops"},"signed_at":%q,"signature":%q}`,
						runID, call, hashes[call], at, base64.RawURLEncoding.EncodeToString(sig))
					if err := nc.Publish("loopgate.approvals.cityops."+runID+"."+call, []byte(approval)); err != nil {
						t.Fatal(err)
					}
				}
			case strings.HasSuffix(m.Subject, ".finished") || strings.HasSuffix(m.Subject, ".rejected"):
				return msgs
			}
		case <-timeout:
			t.Fatalf("run %s did not end; got %d events", runID, len(msgs))
		}
	}
}

func publishTask(t *testing.T, nc *nats.Conn, payload []byte, msgID string) {
	t.Helper()
	m := nats.NewMsg("loopgate.tasks.cityops")
	m.Data = payload
	if msgID != "" {
		m.Header.Set("Nats-Msg-Id", msgID)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

func TestServeRunsTasksFromAPlainNATSClientAndKeepsEventsAcrossRestart(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startServe(t, data)
	// The embedded server fsyncs every write, so appends share batches.
	if logs := srv.stderr.String(); !strings.Contains(logs, `"group_commit":true`) {
		t.Errorf("serve on its embedded server (sync always) did not turn group commit on:\n%s", logs)
	}
	// And it runs with twice the default GOMAXPROCS, unless the
	// environment sets it.
	if os.Getenv("GOMAXPROCS") == "" {
		if procs, def := servingField(t, srv.stderr.String(), "gomaxprocs"), servingField(t, srv.stderr.String(), "gomaxprocs_default"); def < 1 || procs != 2*def {
			t.Errorf("serve on its embedded server (sync always) runs with GOMAXPROCS %v, default %v; want twice the default", procs, def)
		}
	}
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// A task published by a plain client runs; its events arrive on
	// loopgate.events.cityops.<run_id>.<type>, in loop order, seq gapless.
	runID := events.RunID("cityops", "plain-1")
	msgs := collect(t, nc, runID, func() { publishTask(t, nc, plainTask("plain-1", "escalation-assistant"), "plain-1") })
	var types []string
	for i, m := range msgs {
		var e events.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatalf("event %d is not an envelope: %v", i, err)
		}
		if e.Seq != uint64(i+1) || m.Subject != "loopgate.events.cityops."+runID+"."+string(e.Type) {
			t.Fatalf("event %d: seq %d on %s", i, e.Seq, m.Subject)
		}
		types = append(types, string(e.Type))
	}
	want := "started " + strings.Repeat("proposed validated executing executed observed ", 2) +
		strings.Repeat("proposed validated approval_requested parked approved executing executed observed ", 3) + "proposed finished"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("event types:\n got  %s\n want %s", got, want)
	}

	// The same task again yields no second run.
	publishTask(t, nc, plainTask("plain-1", "escalation-assistant"), "plain-1")
	publishTask(t, nc, plainTask("plain-1", "escalation-assistant"), "")

	// Garbage is rejected with an event, and the next good task still runs.
	garbage := collectAny(t, nc, func() { publishTask(t, nc, []byte("{{{ not a task"), "") }, ".rejected")
	if !strings.Contains(string(garbage.Data), "not valid JSON") {
		t.Errorf("rejection does not say why: %s", garbage.Data)
	}
	next := collect(t, nc, events.RunID("cityops", "plain-2"), func() { publishTask(t, nc, plainTask("plain-2", "escalation-assistant"), "plain-2") })
	if !strings.Contains(string(next[len(next)-1].Data), `"reason":"done"`) {
		t.Fatalf("good task after garbage did not finish done: %s", next[len(next)-1].Data)
	}

	// Audit replays the run; the duplicate publishes added nothing to it.
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"audit", runID, "--nats", srv.url, "--json"}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("audit exit %d: %s", code, errOut.String())
	}
	if n := strings.Count(out.String(), "\n"); n != len(msgs) {
		t.Fatalf("audit printed %d events, the run had %d (a duplicate task added some?)", n, len(msgs))
	}

	// Stop and start again on the same data: every event is still there.
	srv.stop(t)
	srv2 := startServe(t, data)
	out.Reset()
	if code := Main(t.Context(), []string{"audit", runID, "--nats", srv2.url}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("audit after restart exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "finished: done") || strings.Count(out.String(), "\n") < len(msgs) {
		t.Fatalf("after restart the run is incomplete:\n%s", out.String())
	}
}

// servingField is a number field of serve's "loopgate serving" log line
// (JSON logs), or -1 if the line lacks it.
func servingField(t *testing.T, logs, field string) float64 {
	t.Helper()
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "loopgate serving" {
			continue
		}
		if v, ok := rec[field].(float64); ok {
			return v
		}
		return -1
	}
	t.Fatalf("no loopgate serving line in:\n%s", logs)
	return -1
}

func collectAny(t *testing.T, nc *nats.Conn, publish func(), suffix string) *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("loopgate.events.cityops.*.*", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = nc.Flush()
	publish()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-ch:
			if strings.HasSuffix(m.Subject, suffix) {
				return m
			}
		case <-timeout:
			t.Fatalf("no %s event", suffix)
		}
	}
}

func TestSubmitFollowsTheRunAndExitsByItsEnd(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	// The happy path parks on each draft: a supervisor answers with
	// loopgate approve, as they would at their own terminal.
	stop := approveWhenParked(t, srv.url, events.RunID("cityops", "s-1"), "supervisor@cityops")
	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
	}{
		{"done", []string{"--task-id", "s-1"}, exitOK, []string{
			"answer: Three open sanitation complaints",
			"waiting for approval: loopgate approve " + events.RunID("cityops", "s-1") + " s3c1 --as <approver> --key FILE --nats " + srv.url + "   (--key FILE: required when the policy requires signatures; the CityOps example's keys are in examples/cityops/keys/)\n",
			"APPROVED by supervisor@cityops",
		}},
		{"stopped", []string{"--task-id", "s-2", "--agent", "runaway-assistant"}, exitStopped, []string{"finished: max_steps"}},
		{"rejected", []string{"--task-id", "s-3", "--agent", "no-such-agent"}, exitRejected, []string{"REJECTED /agent"}},
		{"dry run", []string{"--task-id", "s-4", "--agent", "dry-run-assistant", "--dry-run"}, exitOK, []string{"DRY_RUN"}},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := Main(t.Context(), append([]string{"submit", "--nats", srv.url}, c.args...), nil, &out, &errOut)
		if code != c.wantCode {
			t.Errorf("%s: exit %d (want %d):\n%s\n%s", c.name, code, c.wantCode, out.String(), errOut.String())
		}
		for _, want := range c.wantOut {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s\n%s", c.name, want, out.String(), errOut.String())
			}
		}
		if c.name == "done" {
			stop()
		}
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestSubmitWithASessionShowsTheEarlierRuns(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	for i, input := range []string{"first question", "second question", "third question"} {
		var out, errOut bytes.Buffer
		id := fmt.Sprintf("sess-%d", i)
		code := Main(t.Context(), []string{"submit", "--nats", srv.url, "--task-id", id, "--agent", "dry-run-assistant", "--dry-run", "--session", "desk-7", "--input", input}, nil, &out, &errOut)
		if code != exitOK {
			t.Fatalf("submit %d: exit %d\n%s\n%s", i, code, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"audit", events.RunID("cityops", "sess-2"), "--nats", srv.url, "--json"}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("audit: %d %s", code, errOut.String())
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	var e events.Event
	if err := json.Unmarshal([]byte(first), &e); err != nil {
		t.Fatal(err)
	}
	var st events.StartedData
	_ = e.Decode(&st)
	if st.Session == nil || st.Session.ID != "desk-7" {
		t.Fatalf("third run started without its session: %s", e.Data)
	}
	mem, _ := json.Marshal(st.Session)
	if !strings.Contains(string(mem), "first question") || !strings.Contains(string(mem), "second question") {
		t.Errorf("the third run does not see the earlier runs: %s", mem)
	}
}

// Go's flag parsing stops at the first word that is not a flag: a stray
// one would drop every flag after it (serve would serve the default data
// directory, submit send another task). Each command refuses it, naming
// it, before doing anything.
func TestAStrayArgumentIsAnErrorNotDroppedFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "extra", "--data", t.TempDir()},
		{"worker", "extra", "--nats", "nats://127.0.0.1:1"},
		{"submit", "--input", "draft", "escalations", "--task-id", "stray-1"},
		{"demo", "runaway"},
		{"bench", "extra", "--runs", "1"},
		{"tools", "extra"},
		{"audit", "run-1", "extra", "--nats", "nats://127.0.0.1:1"},
	} {
		code, _, stderr := run(t, "", args...)
		if code != exitError || !strings.Contains(stderr, "unexpected argument") {
			t.Errorf("loopgate %s: exit %d, stderr %q; want an error naming the stray argument", strings.Join(args, " "), code, stderr)
		}
	}
}

// A task id the task schema refuses is refused by submit itself, naming
// the flag, before anything is published: the workers would reject the
// task under a run id submit never follows, and it would wait for its
// whole --timeout.
func TestSubmitRefusesATaskIDTheSchemaRefuses(t *testing.T) {
	t.Parallel()
	code, _, stderr := run(t, "", "submit", "--nats", "nats://127.0.0.1:1", "--task-id", "ticket/42")
	if code != exitError || !strings.Contains(stderr, "--task-id") || !strings.Contains(stderr, "ticket/42") {
		t.Errorf("exit %d, stderr %q; want an error naming --task-id", code, stderr)
	}
}

// --file is the whole task: a task flag beside it would be dropped
// without a word, so it is refused, named, before anything is sent.
func TestSubmitRefusesTaskFlagsWithFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "task.json")
	if err := os.WriteFile(file, plainTask("file-1", "escalation-assistant"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "", "submit", "--nats", "nats://127.0.0.1:1", "--file", file,
		"--task-id", "other", "--agent", "dry-run-assistant", "--dry-run", "--input", "x")
	if code != exitError || !strings.Contains(stderr, "--file") ||
		!strings.Contains(stderr, "--agent, --dry-run, --input, --task-id cannot be used with it") {
		t.Errorf("submit --file with task flags: exit %d, stderr %q; want an error naming them", code, stderr)
	}
	// Flags that say how to send and follow, not what, still go with it.
	code, _, stderr = run(t, "", "submit", "--nats", "nats://127.0.0.1:1", "--file", file, "--timeout", "1s", "--json")
	if code != exitError || !strings.Contains(stderr, "connect to nats://127.0.0.1:1") {
		t.Errorf("submit --file --timeout --json: exit %d, stderr %q; want it to get as far as connecting", code, stderr)
	}
}

// An input's <, > and & are sent as they are, not as six-byte \u003c
// escapes: an input of 16,000 '<' fits the example's max_input_bytes
// (16384), and would be rejected at six times its size.
func TestSubmitSendsHTMLCharactersUnescaped(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	code, out, stderr := run(t, "", "submit", "--nats", srv.url, "--task-id", "html-1", "--agent", "dry-run-assistant", "--dry-run",
		"--input", strings.Repeat("<", 16000), "--timeout", "60s")
	if code != exitOK {
		t.Errorf("submit an input of 16000 '<': exit %d, want %d\n%s\n%s", code, exitOK, out, stderr)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	tf := registerTaskFlags(fs, "")
	if err := fs.Parse([]string{"--input", "a<b & c>d"}); err != nil {
		t.Fatal(err)
	}
	if in := string(tf.task().Input); in != `"a<b & c>d"` {
		t.Errorf("task input %s, want \"a<b & c>d\"", in)
	}
}

// A --timeout shorter than the publish is how long to follow the run, not
// the publish's deadline: the task is stored and the error names the
// follow, so the sender does not send it again as if it were lost.
func TestSubmitStoresTheTaskWhateverItsTimeout(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	code, out, stderr := run(t, "", "submit", "--nats", srv.url, "--task-id", "short-1", "--agent", "dry-run-assistant", "--dry-run", "--timeout", "1ns")
	if code != exitUnfinished || strings.Contains(stderr, "publish task") || !strings.Contains(stderr, "--timeout 1ns passed: stopped following run "+events.RunID("cityops", "short-1")) {
		t.Errorf("submit --timeout 1ns: exit %d, want %d with the follow named, not the publish\n%s\n%s", code, exitUnfinished, out, stderr)
	}
	code, out, stderr = run(t, "", "submit", "--nats", srv.url, "--task-id", "short-1", "--agent", "dry-run-assistant", "--dry-run", "--timeout", "60s")
	if code != exitOK || !strings.Contains(out, "duplicate task id: following the existing run") {
		t.Errorf("the same task again: exit %d, want %d following the run the first submit stored\n%s\n%s", code, exitOK, out, stderr)
	}
}

// The serve of a test whose picked address was taken before serve
// listened on it (by a server of a parallel test) is started again on
// another address, not failed.
func TestServeIsStartedAgainWhenItsAddressWasTaken(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var tried []string
	data := t.TempDir()
	s := launchServeOn(t, func(try int) string {
		addr := freeAddr(t)
		if try == 1 {
			addr = taken.Addr().String()
		}
		tried = append(tried, addr)
		return addr
	}, func(addr string) []string {
		return []string{"serve", "--config", "../examples/cityops/loopgate.yaml", "--listen", addr,
			"--data", data, "--workers", "1", "--log-format", "json", "--sync-interval", "2m"}
	})
	if len(tried) != 2 || s.url != "nats://"+tried[1] {
		t.Fatalf("tried %v, serving on %s: want a second address after the taken one", tried, s.url)
	}
	nc, err := nats.Connect(s.url)
	if err != nil {
		t.Fatalf("serve started again does not answer: %v", err)
	}
	nc.Close()
}
