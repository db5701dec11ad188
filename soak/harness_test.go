//go:build soak

package soak

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/follow"
	"github.com/loopgate/loopgate/trail"
)

// tenant and agent of every task the soak submits: the CityOps happy path.
const (
	tenant = "cityops"
	agent  = "escalation-assistant"
	// drafter is the write tool of the happy path; its reconcile tool is
	// draft_status.
	drafter = "draft_escalation"
	// supervisor may approve drafts (policy in examples/cityops/loopgate.yaml).
	supervisor = "supervisor@cityops"
	// happyEvents is the length of an undisturbed happy-path trail:
	// started, two reads (5 events each), three approved drafts (8 each),
	// proposed final and finished.
	happyEvents = 1 + 2*5 + 3*8 + 2
	// ackWait is the worker consumer's AckWait the soak runs with: a dead
	// worker's message comes back after it.
	ackWait = "2s"
)

// binDir holds the binaries built once for the whole package; logRoot
// keeps every process's log after the test (SOAK_LOG_DIR, or a new
// directory under the system's temp dir).
var binDir, logRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loopgate-soak-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	logRoot = os.Getenv("SOAK_LOG_DIR")
	if logRoot == "" {
		logRoot, err = os.MkdirTemp("", "loopgate-soak-logs-")
	} else {
		err = os.MkdirAll(logRoot, 0o750)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	fmt.Printf("soak: process logs are in %s\n", logRoot)
	os.Exit(code)
}

// logDir is the directory of a test's process logs, kept after the test.
func logDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(logRoot, strings.ReplaceAll(t.Name(), "/", "_"))
	mustMkdir(t, dir)
	return dir
}

// repoRoot is the module root: the soak package sits one level below it.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	return root
}

var builds sync.Map // target -> *buildOnce

type buildOnce struct {
	once sync.Once
	path string
	err  error
}

// build builds a main package of the module (or of a module it requires)
// into binDir once, and returns the binary's path.
func build(t testing.TB, name, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(name, &buildOnce{})
	b := v.(*buildOnce)
	b.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		b.path = filepath.Join(binDir, name)
		began := time.Now()
		cmd := exec.Command(goBin, "build", "-o", b.path, pkg)
		cmd.Dir = repoRoot(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			return
		}
		t.Logf("built %s (%s) in %s", name, pkg, time.Since(began).Round(time.Millisecond))
		if name == "loopgate" {
			// Other work may edit the example while the soak runs: the
			// workers read a copy taken with the build.
			b.err = os.CopyFS(filepath.Join(binDir, "cityops"), os.DirFS(filepath.Join(repoRoot(t), "examples", "cityops")))
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func loopgateBinary(t testing.TB) string { return build(t, "loopgate", "./cmd/loopgate") }

func natsServerBinary(t testing.TB) string {
	return build(t, "nats-server", "github.com/nats-io/nats-server/v2")
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a child process of the test: a loopgate worker or a nats-server.
// Its stdout and stderr go to a log file; ready is closed when a line
// containing the readiness marker appears.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	ready   chan struct{}
	done    chan struct{}
	began   time.Time

	mu       sync.Mutex
	exitCode int // valid once done is closed; -1 when killed by a signal
	exitSig  syscall.Signal
	exitedAt time.Time
	lastLine string
}

// startProc starts bin with args and env (added to the test's own
// environment, minus LOOPGATE_CRASH_AT), logging to logDir/name.log.
func startProc(t testing.TB, name, logDir, marker, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, logPath: filepath.Join(logDir, name+".log"), ready: make(chan struct{}), done: make(chan struct{})}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOOPGATE_CRASH_AT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p.cmd, p.began = cmd, time.Now()
	fmt.Fprintf(logFile, "### %s started at %s: %s %s (env %v)\n", name, p.began.Format(time.RFC3339Nano), bin, strings.Join(args, " "), env)
	copied := make(chan struct{}) // every line of the process is in its log
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		readyOnce := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			p.mu.Lock()
			p.lastLine = line
			p.mu.Unlock()
			if strings.Contains(line, marker) {
				readyOnce.Do(func() { close(p.ready) })
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		// The lines still in the pipe go to the log before the exit is
		// marked and done says the log is whole.
		<-copied
		p.mu.Lock()
		p.exitedAt = time.Now()
		p.exitCode = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.exitSig = ws.Signal()
		}
		p.mu.Unlock()
		fmt.Fprintf(logFile, "### %s exited at %s: %v\n", name, time.Now().Format(time.RFC3339Nano), err)
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// waitReady waits until the process logged its readiness marker.
func (p *proc) waitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("%s exited (code %d) before it was ready; log %s:\n%s", p.name, p.code(), p.logPath, tail(p.logPath, 30))
	case <-time.After(timeout):
		t.Fatalf("%s not ready after %s; log %s:\n%s", p.name, timeout, p.logPath, tail(p.logPath, 30))
	}
}

func (p *proc) code() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitCode
}

func (p *proc) exitTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitedAt
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (if still running) and waits for the exit.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to timeout for a clean exit, then kills.
// It returns the exit code (-1 when it had to be killed).
func (p *proc) stop(timeout time.Duration) int {
	if p.exited() {
		return p.code()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.code()
	case <-time.After(timeout):
		p.kill()
		return -1
	}
}

// tail returns the last n lines of a file, for failure messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// grepLog returns the lines of a log that contain s.
func grepLog(path, s string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// soakRNG is the random source of a test's schedule of kills: seeded by
// SOAK_SEED when set (to replay a schedule), else by the clock; the seed
// is logged.
func soakRNG(t *testing.T) (*rand.Rand, uint64) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (SOAK_SEED=%d replays the kill schedule)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0)), seed
}

// submitAtPace publishes n happy-path tasks, pace a second, in the
// background, with task ids prefix-<i>-<began>. The run ids are in the
// slice once the channel has said nil.
func submitAtPace(ctx context.Context, js jetstream.JetStream, n, pace int, prefix string, began time.Time) ([]string, <-chan error) {
	runIDs := make([]string, n)
	submitted := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second / time.Duration(pace))
		defer tick.Stop()
		for i := range n {
			<-tick.C
			id, err := submit(ctx, js, fmt.Sprintf("%s-%03d-%d", prefix, i, began.UnixNano()))
			if err != nil {
				submitted <- err
				return
			}
			runIDs[i] = id
		}
		submitted <- nil
	}()
	return runIDs, submitted
}

// awaitFinished waits until the approver saw every run of runIDs finish.
func awaitFinished(ctx context.Context, t *testing.T, js jetstream.JetStream, ap *approver, runIDs []string) {
	t.Helper()
	for i, id := range runIDs {
		select {
		case <-ap.finished(id):
		case <-ap.troubled:
			t.Fatalf("approver: %v", ap.trouble())
		case <-ctx.Done():
			t.Fatalf("run %d (%s) did not finish: %d of %d finished\n%s", i, id, ap.finishedCount(), len(runIDs), diagnose(context.Background(), js, id))
		}
	}
}

// workerOptions say how to start one `loopgate worker` process.
type workerOptions struct {
	name     string
	natsURLs []string
	data     string // shared by every worker of a test: one outbox
	logDir   string
	workers  int
	replicas int
	crashAt  string // LOOPGATE_CRASH_AT; empty: no fault injection
	// groupCommit is --group-commit. Empty is auto, which for a worker
	// (an external server) is off; the tests on one server turn it on, as
	// `loopgate serve` has it on its embedded server.
	groupCommit string
}

// startWorker starts a worker process and waits until its pool consumes.
func startWorker(t testing.TB, o workerOptions) *proc {
	t.Helper()
	var env []string
	if o.crashAt != "" {
		env = append(env, "LOOPGATE_CRASH_AT="+o.crashAt)
	}
	bin := loopgateBinary(t)
	p := startProc(t, o.name, o.logDir, `"msg":"workers started"`, bin, env,
		"worker",
		"--nats", strings.Join(o.natsURLs, ","),
		"--config", filepath.Join(binDir, "cityops", "loopgate.yaml"),
		"--data", o.data,
		"--workers", fmt.Sprint(o.workers),
		"--ack-wait", ackWait,
		"--replicas", fmt.Sprint(o.replicas),
		"--group-commit", cmp.Or(o.groupCommit, "auto"),
		"--log-format", "json",
	)
	p.waitReady(t, 60*time.Second)
	return p
}

// connect opens a plain client connection, as any upstream system or
// approver would, reconnecting forever across server failures.
func connect(t testing.TB, urls []string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name("soak-"+t.Name()), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect %v: %v", urls, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// taskJSON is a happy-path task as an upstream system writes it.
func taskJSON(taskID string) []byte {
	return fmt.Appendf(nil, `{"task_id":%q,"tenant":%q,"principal":{"id":"dev@cityops","roles":["operator"]},"agent":%q,"input":"escalate the oldest open sanitation complaints"}`,
		taskID, tenant, agent)
}

// submit publishes a task with its task_id as Nats-Msg-Id, retrying while
// the cluster fails over, and returns the run id.
func submit(ctx context.Context, js jetstream.JetStream, taskID string) (string, error) {
	err := retryPublish(ctx, js, "loopgate.tasks."+tenant, taskJSON(taskID), taskID)
	return events.RunID(tenant, taskID), err
}

// retryPublish publishes with a message id until JetStream acknowledges
// it or ctx ends. The message id makes a retry of a stored publish a no-op.
func retryPublish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string) error {
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.Publish(pctx, subject, data, jetstream.WithMsgID(msgID))
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w (last error: %v)", subject, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// approval is the approval message as schemas/approval.schema.json has it.
type approval struct {
	RunID     string            `json:"run_id"`
	CallID    string            `json:"call_id"`
	ArgsHash  string            `json:"args_hash"`
	Decision  string            `json:"decision"`
	Approver  map[string]string `json:"approver"`
	Reason    string            `json:"reason,omitempty"`
	SignedAt  string            `json:"signed_at,omitempty"`
	Signature string            `json:"signature,omitempty"`
}

// signer signs approvals as the example's supervisor, with the committed
// example seed (examples/cityops/keys), following the wire contract in
// approvals/signature.go: an ed25519 nkey signature, unpadded base64url,
// over the RFC 8785 canonical JSON of approver, args_hash, call_id,
// decision, reason, run_id and time (= signed_at). The example config
// requires signed approvals: an unsigned one would be rejected (unsigned).
type signer struct{ kp nkeys.KeyPair }

// loadSigner returns the supervisor's signer, from the example's copy in
// binDir. A missing key fails the test: the example requires signatures.
func loadSigner(t testing.TB) *signer {
	t.Helper()
	seed, err := os.ReadFile(filepath.Join(binDir, "cityops", "keys", supervisor+".nk"))
	if err != nil {
		t.Fatalf("the supervisor's example key (the example requires signed approvals): %v", err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		t.Fatalf("supervisor seed: %v", err)
	}
	return &signer{kp: kp}
}

func (s *signer) sign(a *approval) error {
	if s == nil {
		return nil
	}
	a.SignedAt = time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00")
	// encoding/json sorts map keys; without HTML escaping, and for the
	// ASCII values here, its output is the RFC 8785 canonical form.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]string{
		"approver": a.Approver["id"], "args_hash": a.ArgsHash, "call_id": a.CallID, "decision": a.Decision,
		"reason": a.Reason, "run_id": a.RunID, "time": a.SignedAt,
	}); err != nil {
		return err
	}
	sig, err := s.kp.Sign(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	if err != nil {
		return err
	}
	a.Signature = base64.RawURLEncoding.EncodeToString(sig)
	return nil
}

// ending is how a run ended, as the approver saw its finished event.
type ending struct {
	Reason events.Reason
	Detail string
	At     time.Time
}

// approver plays supervisor@cityops for every run of a test: it follows
// LOOPGATE_EVENTS through an ordered consumer (which survives server
// failures, unlike a core subscription), and when a run parks on an
// approval question it approves the exact arguments (the args_hash of the
// approval_requested event) on the call's approvals subject. It also
// records how each run finished.
type approver struct {
	t      testing.TB
	js     jetstream.JetStream
	ctx    context.Context
	cancel context.CancelFunc
	// stopFollowing stops following the events stream.
	stopFollowing func()
	pubs          sync.WaitGroup
	signer        *signer
	// troubled is closed at the first problem, so waits can fail fast.
	troubled     chan struct{}
	troubledOnce sync.Once

	mu         sync.Mutex
	questions  map[string]events.ApprovalRequestedData // run/call
	sent       map[string]bool                         // run/call/round
	ended      map[string]ending
	waiters    map[string]chan struct{}
	needsHuman []string
	problems   []string
	// Runs whose approvals are held back, the approvals held, and who
	// waits for such a run to park.
	held          map[string]bool
	heldApprovals map[string][]func()
	heldParked    map[string]chan struct{}
	approvals     int
	finishes      []time.Time
	// parkLag: from a parked event's storing (the server's timestamp of
	// the message; the event's own time is taken when its worker stages
	// it, before the writes it may wait on through an election) to the
	// approver seeing it: the follower's own lag;
	// pubTime: how long publishing each approval took (with retries).
	parkLag []time.Duration
	pubTime []time.Duration
	// eager picks the runs whose questions are answered from
	// loopgate_approvals as soon as their entry appears (answerEntries);
	// eagerSent counts those answers.
	eager     func(runID string) bool
	eagerSent int
}

// startApprover starts following the events stream (the workers must have
// created it).
func startApprover(t testing.TB, js jetstream.JetStream) *approver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &approver{
		t: t, js: js, ctx: ctx, cancel: cancel, signer: loadSigner(t), troubled: make(chan struct{}),
		questions: map[string]events.ApprovalRequestedData{}, sent: map[string]bool{},
		ended: map[string]ending{}, waiters: map[string]chan struct{}{},
		held: map[string]bool{}, heldApprovals: map[string][]func(){}, heldParked: map[string]chan struct{}{},
	}
	// Through internal/follow, as loopgate's own followers: after a node
	// kill nats.go's ordered consumer came back seconds after the
	// cluster's election was over, every run waited on the approver, and
	// its lag showed in the cluster test's throughput dip as loopgate's.
	prefix := "loopgate.events." + tenant + ".*."
	stop, err := follow.Stream(ctx, js, "LOOPGATE_EVENTS",
		[]string{prefix + "approval_requested", prefix + "parked", prefix + "approval_rejected", prefix + "finished"}, 1, a.handle)
	if err != nil {
		cancel()
		t.Fatalf("approver: follow the events: %v", err)
	}
	a.stopFollowing = stop
	t.Cleanup(a.stop)
	return a
}

func (a *approver) stop() {
	a.cancel()
	a.stopFollowing()
	a.pubs.Wait()
}

// handle acts on one event; follow.Stream hands each on once, in order.
func (a *approver) handle(msg jetstream.Msg, _ uint64) {
	var e events.Event
	if err := json.Unmarshal(msg.Data(), &e); err != nil {
		a.problem("undecodable event on %s: %v", msg.Subject(), err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	defer func() {
		if len(a.problems) > 0 || len(a.needsHuman) > 0 {
			a.troubledOnce.Do(func() { close(a.troubled) })
		}
	}()
	switch e.Type {
	case events.TypeApprovalRejected:
		// The soak's approvals are all valid: loopgate refusing one is a
		// failure (the run would wait for its question to expire).
		a.problems = append(a.problems, fmt.Sprintf("run %s call %s: approval rejected: %s", e.RunID, e.CallID, clip(string(e.Data), 300)))
	case events.TypeApprovalRequested:
		var q events.ApprovalRequestedData
		if err := e.Decode(&q); err != nil {
			a.problems = append(a.problems, err.Error())
			return
		}
		a.questions[e.RunID+"/"+e.CallID] = q
	case events.TypeParked:
		if md, err := msg.Metadata(); err == nil {
			a.parkLag = append(a.parkLag, time.Since(md.Timestamp))
		}
		var pd events.ParkedData
		if err := e.Decode(&pd); err != nil {
			a.problems = append(a.problems, err.Error())
			return
		}
		for _, call := range pd.Awaiting {
			q, ok := a.questions[e.RunID+"/"+call]
			if !ok {
				a.problems = append(a.problems, fmt.Sprintf("run %s parked on %s without an approval_requested event before it", e.RunID, call))
				continue
			}
			if q.Kind != "approval" {
				// An unknown outcome loopgate could not reconcile: a human
				// would have to guess. The soak never guesses; it fails.
				a.needsHuman = append(a.needsHuman, fmt.Sprintf("run %s call %s: %s", e.RunID, call, q.Why))
				continue
			}
			key := fmt.Sprintf("%s/%s/%d", e.RunID, call, q.Round)
			if a.sent[key] {
				continue
			}
			a.sent[key] = true
			a.approvals++
			approve := a.approveFunc(e.RunID, call, q.ArgsHash, key)
			if a.held[e.RunID] {
				a.heldApprovals[e.RunID] = append(a.heldApprovals[e.RunID], approve)
				if ch, ok := a.heldParked[e.RunID]; ok {
					close(ch)
					delete(a.heldParked, e.RunID)
				}
				continue
			}
			approve()
		}
	case events.TypeFinished:
		var fd events.FinishedData
		if err := e.Decode(&fd); err != nil {
			a.problems = append(a.problems, err.Error())
			return
		}
		if prev, ok := a.ended[e.RunID]; ok {
			a.problems = append(a.problems, fmt.Sprintf("run %s finished twice: %s then %s", e.RunID, prev.Reason, fd.Reason))
			return
		}
		now := time.Now()
		a.ended[e.RunID] = ending{Reason: fd.Reason, Detail: fd.Detail, At: now}
		a.finishes = append(a.finishes, now)
		if ch, ok := a.waiters[e.RunID]; ok {
			close(ch)
			delete(a.waiters, e.RunID)
		}
	}
}

// answerEntries makes the approver also watch loopgate_approvals, as an
// approval service watching the bucket (or a human at loopgate pending)
// would, and approve each pending approval entry of the runs eager picks
// as soon as it appears. A worker writes the entry just before the
// question's event, so such an answer often arrives before the question is
// in the run, and when the worker is killed in between, before anyone asks
// it again. The events still answer whatever the watch misses (a server
// down under it, say); each question is answered once either way.
func (a *approver) answerEntries(eager func(runID string) bool) {
	a.t.Helper()
	kv, err := a.js.KeyValue(a.ctx, "loopgate_approvals")
	if err != nil {
		a.t.Fatalf("approver: approvals bucket: %v", err)
	}
	w, err := kv.WatchAll(a.ctx, jetstream.UpdatesOnly())
	if err != nil {
		a.t.Fatalf("approver: watch approvals: %v", err)
	}
	a.mu.Lock()
	a.eager = eager
	a.mu.Unlock()
	a.pubs.Go(func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-a.ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					a.onEntry(e.Value())
				}
			}
		}
	})
}

// onEntry approves a pending approval entry of an eager run.
func (a *approver) onEntry(value []byte) {
	var e struct {
		State    string `json:"state"`
		Kind     string `json:"kind"`
		Round    int    `json:"round"`
		RunID    string `json:"run_id"`
		CallID   string `json:"call_id"`
		ArgsHash string `json:"args_hash"`
	}
	if err := json.Unmarshal(value, &e); err != nil {
		a.problem("undecodable approvals entry: %v", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.State != "pending" || e.Kind != "approval" || !a.eager(e.RunID) || a.held[e.RunID] {
		return // needs_human questions are left to the events, which fail the test on them
	}
	key := fmt.Sprintf("%s/%s/%d", e.RunID, e.CallID, e.Round)
	if a.sent[key] {
		return
	}
	a.sent[key] = true
	a.approvals++
	a.eagerSent++
	a.approveFunc(e.RunID, e.CallID, e.ArgsHash, key)()
}

// approveFunc returns what publishes the approval of one call: signed
// when it is sent, retried until JetStream stores it.
func (a *approver) approveFunc(runID, call, hash, key string) func() {
	return func() {
		a.pubs.Go(func() {
			m := approval{RunID: runID, CallID: call, ArgsHash: hash, Decision: "approve",
				Approver: map[string]string{"id": supervisor}, Reason: "soak"}
			if err := a.signer.sign(&m); err != nil {
				a.problem("sign approval %s: %v", key, err)
				return
			}
			payload, _ := json.Marshal(m)
			ctx, cancel := context.WithTimeout(a.ctx, 2*time.Minute)
			defer cancel()
			subject := "loopgate.approvals." + tenant + "." + runID + "." + call
			began := time.Now()
			if err := retryPublish(ctx, a.js, subject, payload, "soak-approve/"+key); err != nil && a.ctx.Err() == nil {
				a.problem("approve %s: %v", key, err)
			}
			a.mu.Lock()
			a.pubTime = append(a.pubTime, time.Since(began))
			a.mu.Unlock()
		})
	}
}

// hold makes the approver keep its approvals of run to itself until
// release; the channel is closed when the run parks on a question.
func (a *approver) hold(runID string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held[runID] = true
	ch := make(chan struct{})
	a.heldParked[runID] = ch
	return ch
}

// release sends the approvals held for run and stops holding it.
func (a *approver) release(runID string) {
	a.mu.Lock()
	fns := a.heldApprovals[runID]
	delete(a.heldApprovals, runID)
	delete(a.held, runID)
	delete(a.heldParked, runID)
	a.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

func (a *approver) problem(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.problems = append(a.problems, fmt.Sprintf(format, args...))
	a.troubledOnce.Do(func() { close(a.troubled) })
}

// finished returns a channel closed when the run has finished.
func (a *approver) finished(runID string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := make(chan struct{})
	if _, ok := a.ended[runID]; ok {
		close(ch)
		return ch
	}
	if w, ok := a.waiters[runID]; ok {
		return w
	}
	a.waiters[runID] = ch
	return ch
}

func (a *approver) ending(runID string) (ending, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.ended[runID]
	return e, ok
}

func (a *approver) finishedCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ended)
}

func (a *approver) approvalCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.approvals
}

func (a *approver) eagerCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.eagerSent
}

func (a *approver) finishTimes() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.finishes)
}

// trouble returns what the approver found wrong: needs_human questions
// (unknown outcomes nobody could reconcile) and protocol problems.
func (a *approver) trouble() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, s := range a.needsHuman {
		out = append(out, "needs_human question: "+s)
	}
	return append(out, a.problems...)
}

// stored is one message of LOOPGATE_EVENTS as a plain reader sees it.
type stored = trail.Stored

// readEvents reads every event under filter, in stream order, grouped by
// run, through an ordered consumer. A read that fails (a cluster still
// settling after a node died) is started over, a few times.
func readEvents(ctx context.Context, js jetstream.JetStream, filter string) (map[string][]stored, error) {
	var err error
	// Up to 30 tries a second apart: after a nats-server was killed and
	// started again, make soak once saw five reads in a row answered "no
	// responders" (a just-made consumer's first pull, or the JetStream API
	// of a server still catching up).
	for range 30 {
		var out map[string][]stored
		if out, err = readEventsOnce(ctx, js, filter); err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
	}
	return nil, fmt.Errorf("read %s: %w", filter, err)
}

func readEventsOnce(ctx context.Context, js jetstream.JetStream, filter string) (map[string][]stored, error) {
	cons, err := js.OrderedConsumer(ctx, "LOOPGATE_EVENTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, err
	}
	out := map[string][]stored{}
	for {
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(3*time.Second))
		if err != nil {
			return nil, err
		}
		n, pending := 0, uint64(1)
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			pending = meta.NumPending
			var e events.Event
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				return nil, fmt.Errorf("stream seq %d (%s): not an event: %w", meta.Sequence.Stream, m.Subject(), err)
			}
			out[e.RunID] = append(out[e.RunID], stored{Event: e, StreamSeq: meta.Sequence.Stream, Subject: m.Subject(), MsgID: m.Headers().Get("Nats-Msg-Id")})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if n == 0 || pending == 0 {
			return out, nil
		}
	}
}

// runReport is the verdict on one run's events.
type runReport struct {
	RunID    string
	Events   int
	Reason   events.Reason
	Ops      map[string]*trail.Call // by operation id, draft_escalation only
	Notables []string               // recovery events: unknown, reconciled, approval_rejected
	Problems []string
}

// checkRun checks one run's events with trail (the wire contract: gapless
// seq from 1, unique UUID v7 event ids, each on its own subject with
// Nats-Msg-Id <run>/<seq>, started first and one finished last, no call
// taking effect twice, no write begun again while an attempt's outcome
// was unknown), then the happy path's outcome: finished done, three
// approved drafts, each with one successful outcome and observed once.
func checkRun(runID string, evs []stored) *runReport {
	check := trail.New(tenant, runID)
	for _, e := range evs {
		check.Add(e)
	}
	v := check.Verdict()
	r := &runReport{RunID: runID, Events: v.Events, Reason: v.Reason, Ops: map[string]*trail.Call{}, Problems: v.Problems}
	bad := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	switch {
	case len(evs) == 0:
		bad("no events")
		return r
	case v.End != events.TypeFinished:
		bad("no finished event: the last is %s", evs[len(evs)-1].Type)
	case v.Reason != events.ReasonDone:
		bad("finished %s (%s), not done", v.Reason, v.Detail)
	}
	r.Notables = notables(evs)
	for _, call := range v.Calls {
		if call.Tool == drafter {
			r.Ops[cmp.Or(call.OperationID, events.OperationID(runID, call.CallID))] = call
		}
	}
	if len(r.Ops) != 3 {
		bad("%d %s calls, want 3", len(r.Ops), drafter)
	}
	for id, o := range r.Ops {
		switch {
		case o.Approved != 1:
			bad("op %s (%s): approved %d times", id, o.CallID, o.Approved)
		case o.Observed != 1:
			bad("op %s (%s): observed %d times", id, o.CallID, o.Observed)
		case o.FreshOK+o.ReusedOK+o.ReconciledApplied != 1:
			bad("op %s (%s): no single successful outcome: fresh %d, reused %d, reconciled applied %d, other %v", id, o.CallID, o.FreshOK, o.ReusedOK, o.ReconciledApplied, o.Other)
		case len(o.Other) > 0:
			bad("op %s (%s): executed with status %v", id, o.CallID, o.Other)
		case o.Executing > 1 && o.ReconciledNot+o.NotRun == 0:
			bad("op %s (%s): %d attempts begun without a reconcile saying the first did not take effect", id, o.CallID, o.Executing)
		}
	}
	return r
}

// notables are the events of a recovery, for the report: attempts that
// did not end ok, recorded results reused, reconciles, approval messages
// that decided nothing.
func notables(evs []stored) []string {
	var out []string
	for _, e := range evs {
		switch e.Type {
		case events.TypeExecuted:
			var d events.ExecutedData
			_ = e.Decode(&d)
			switch {
			case d.Status == events.ExecOK && d.Message == events.RecordedResultReused:
				out = append(out, fmt.Sprintf("%d executed ok (recorded result reused) %s", e.Seq, e.CallID))
			case d.Status == events.ExecTransient && d.ErrorClass == events.DeadlinePassed:
				out = append(out, fmt.Sprintf("%d executed transient (deadline passed, not run) %s", e.Seq, e.CallID))
			case d.Status != events.ExecOK:
				out = append(out, fmt.Sprintf("%d executed %s %s", e.Seq, d.Status, e.CallID))
			}
		case events.TypeReconciled:
			var d events.ReconciledData
			_ = e.Decode(&d)
			line := fmt.Sprintf("%d reconciled applied=%v %s", e.Seq, d.Applied, e.CallID)
			if d.Error != "" {
				line += " error " + d.Error
			}
			out = append(out, line)
		case events.TypeApprovalRejected:
			var d events.ApprovalRejectedData
			_ = e.Decode(&d)
			out = append(out, fmt.Sprintf("%d approval_rejected %s %s", e.Seq, e.CallID, d.Class))
		case events.TypeDiscarded:
			out = append(out, fmt.Sprintf("%d discarded (a lost model call, charged)", e.Seq))
		}
	}
	return out
}

// checkIdempotency checks the loopgate_idempotency record of each
// operation: completed, bound to the call's run.
func checkIdempotency(ctx context.Context, kv jetstream.KeyValue, r *runReport) {
	for id, o := range r.Ops {
		entry, err := kv.Get(ctx, id)
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("op %s: idempotency record: %v", id, err))
			continue
		}
		var rec struct {
			State  string `json:"state"`
			RunID  string `json:"run_id"`
			CallID string `json:"call_id"`
		}
		if err := json.Unmarshal(entry.Value(), &rec); err != nil || rec.State != "completed" || rec.RunID != r.RunID || rec.CallID != o.CallID {
			r.Problems = append(r.Problems, fmt.Sprintf("op %s: idempotency record %s (err %v): want completed for %s/%s", id, entry.Value(), err, r.RunID, o.CallID))
		}
	}
}

// checkDrafts checks the outbox has exactly the run's three drafts, each
// naming its operation.
func checkDrafts(outbox string, r *runReport) {
	for id := range r.Ops {
		name := "escalation-" + id + ".txt"
		b, err := os.ReadFile(filepath.Join(outbox, name))
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("draft of op %s: %v", id, err))
			continue
		}
		if !bytes.Contains(b, []byte("Operation: "+id+"\n")) || !bytes.HasPrefix(b, []byte("ESCALATION DRAFT")) {
			r.Problems = append(r.Problems, fmt.Sprintf("draft %s does not look like the draft of op %s:\n%s", name, id, b))
		}
	}
}

// outboxFiles lists the outbox: drafts, tombstones (draft_status fenced
// an operation whose draft was not there; the call's next attempt writes
// its draft under another operation id) and leftovers of interrupted
// writes. A tombstone is written as a draft is, a temp file linked into
// place.
func outboxFiles(t testing.TB, outbox string) (drafts, tombstones, temps []string) {
	t.Helper()
	entries, err := os.ReadDir(outbox)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch n := e.Name(); {
		case strings.HasPrefix(n, "escalation-") && strings.HasSuffix(n, ".txt"):
			if b, err := os.ReadFile(filepath.Join(outbox, n)); err == nil && bytes.HasPrefix(b, []byte("ABANDONED OPERATION")) {
				tombstones = append(tombstones, n)
				continue
			}
			drafts = append(drafts, n)
		default:
			temps = append(temps, n)
		}
	}
	sort.Strings(drafts)
	return drafts, tombstones, temps
}

// outboxWatch counts, through inotify, every write of a draft file: the
// CityOps tool writes a temporary file and hard-links it into place (a link
// onto an existing name fails), and finds an existing draft without
// writing. So each name created in the outbox is one side effect of the
// tool, seen from outside loopgate; a name created twice (or renamed onto,
// which the tool never does) means the operation ran twice.
type outboxWatch struct {
	f *os.File

	mu       sync.Mutex
	placed   map[string]int
	temps    int
	overflow bool
	done     chan struct{}
}

func watchOutbox(t testing.TB, dir string) *outboxWatch {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_MOVED_TO|syscall.IN_CREATE); err != nil {
		syscall.Close(fd)
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	w := &outboxWatch{f: os.NewFile(uintptr(fd), "inotify"), placed: map[string]int{}, done: make(chan struct{})}
	go w.loop()
	t.Cleanup(w.close)
	return w
}

func (w *outboxWatch) loop() {
	defer close(w.done)
	buf := make([]byte, 256<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			name := strings.TrimRight(string(nameBytes), "\x00")
			w.mu.Lock()
			switch {
			case ev.Mask&syscall.IN_Q_OVERFLOW != 0:
				w.overflow = true
			case ev.Mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0 && strings.HasPrefix(name, "escalation-"):
				w.placed[name]++
			case ev.Mask&syscall.IN_CREATE != 0 && strings.HasPrefix(name, ".escalation-"):
				w.temps++
			}
			w.mu.Unlock()
			off += syscall.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

func (w *outboxWatch) close() {
	_ = w.f.Close()
	<-w.done
}

// writes returns how often each draft was put in place, the temp files
// created, and whether the kernel dropped events.
func (w *outboxWatch) writes() (map[string]int, int, bool) {
	// Give the kernel's queue a moment to reach us.
	time.Sleep(200 * time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.placed))
	for k, v := range w.placed {
		out[k] = v
	}
	return out, w.temps, w.overflow
}

func mustMkdir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
}

// diagnose describes the work and approvals streams and consumers, for
// failure messages about a run that did not move.
func diagnose(ctx context.Context, js jetstream.JetStream, runID string) string {
	var b strings.Builder
	for _, sc := range [][2]string{{"LOOPGATE_WORK", "loopgate-workers"}, {"LOOPGATE_APPROVALS", "loopgate-approvals"}} {
		st, err := js.Stream(ctx, sc[0])
		if err != nil {
			fmt.Fprintf(&b, "stream %s: %v\n", sc[0], err)
			continue
		}
		si, err := st.Info(ctx, jetstream.WithSubjectFilter("loopgate.>"))
		if err == nil {
			fmt.Fprintf(&b, "stream %s: msgs %d, first %d, last %d, subjects %v\n", sc[0], si.State.Msgs, si.State.FirstSeq, si.State.LastSeq, si.State.Subjects)
		}
		c, err := st.Consumer(ctx, sc[1])
		if err != nil {
			fmt.Fprintf(&b, "consumer %s: %v\n", sc[1], err)
			continue
		}
		ci, err := c.Info(ctx)
		if err == nil {
			fmt.Fprintf(&b, "consumer %s: pending %d, ack pending %d, redelivered %d, waiting %d, delivered %d, ack floor %d\n",
				sc[1], ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream)
		}
	}
	if kv, err := js.KeyValue(ctx, "loopgate_approvals"); err == nil {
		if keys, err := kv.ListKeys(ctx); err == nil {
			for k := range keys.Keys() {
				if strings.HasPrefix(k, runID) {
					if e, err := kv.Get(ctx, k); err == nil {
						fmt.Fprintf(&b, "approval entry %s: %s\n", k, clip(string(e.Value()), 400))
					}
				}
			}
		}
	}
	return b.String()
}

// waitDrained waits until the worker and approvals consumers hold nothing:
// no message pending delivery or awaiting an ack (scheduled expiry
// wake-ups are not delivered until due, so they do not count).
func waitDrained(ctx context.Context, js jetstream.JetStream, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		drained := true
		last = ""
		for _, sc := range [][2]string{{"LOOPGATE_WORK", "loopgate-workers"}, {"LOOPGATE_APPROVALS", "loopgate-approvals"}} {
			c, err := js.Consumer(ctx, sc[0], sc[1])
			if err != nil {
				return err
			}
			ci, err := c.Info(ctx)
			if err != nil {
				drained = false
				last += fmt.Sprintf("%s: %v; ", sc[1], err)
				continue
			}
			if ci.NumPending != 0 || ci.NumAckPending != 0 {
				drained = false
			}
			last += fmt.Sprintf("%s: pending %d, ack pending %d, redelivered %d; ", sc[1], ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
		}
		if drained {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consumers not drained after %s: %s", timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lags returns the approver's own delays: seeing parked events, and
// publishing approvals.
func (a *approver) lags() (park, pub []time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.parkLag), slices.Clone(a.pubTime)
}

// spread summarises durations: count, p50, p99, max.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(f float64) time.Duration { return s[min(len(s)-1, int(f*float64(len(s))))] }
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("n=%d p50 %s p99 %s max %s", len(s), r(q(0.5)), r(q(0.99)), r(s[len(s)-1]))
}

// whereTimeWent sums, over runs, the gap before each event by the pair of
// event types around it (from the events' own times), largest total
// first: where a run waited, and for what.
func whereTimeWent(runs map[string][]stored, top int) string {
	type agg struct {
		total time.Duration
		gaps  []time.Duration
	}
	by := map[string]*agg{}
	for _, evs := range runs {
		for i := 1; i < len(evs); i++ {
			k := string(evs[i-1].Type) + " → " + string(evs[i].Type)
			g, ok := by[k]
			if !ok {
				g = &agg{}
				by[k] = g
			}
			d := evs[i].Time.Sub(evs[i-1].Time)
			g.total += d
			g.gaps = append(g.gaps, d)
		}
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return by[keys[i]].total > by[keys[j]].total })
	var b strings.Builder
	for i, k := range keys {
		if i == top {
			break
		}
		fmt.Fprintf(&b, "    %-40s total %9s  %s\n", k, by[k].total.Round(time.Millisecond), spread(by[k].gaps))
	}
	return b.String()
}

// verdict is what checking many runs found.
type verdict struct {
	problems []string
	reasons  map[string]int // finished reasons
	notables map[string]int // recovery events, by kind
	events   int            // events of all the runs
	ops      int            // distinct operations of the write tool
	// notApplied counts the reconciles of the write tool that found no
	// effect: each is followed by a new attempt, beside which the lost
	// attempt's tool may still run (its worker frozen inside it).
	notApplied int
	all        map[string][]stored
}

// verifyRuns reads every run of runIDs back from the stream and checks
// each (checkRun, checkIdempotency, checkDrafts), that no operation
// belongs to two runs, and that the stream holds no other runs. It logs
// the trail of the first runs with problems.
func verifyRuns(ctx context.Context, t *testing.T, js jetstream.JetStream, outbox string, runIDs []string) verdict {
	t.Helper()
	all, err := readEvents(ctx, js, "loopgate.events."+tenant+".>")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "loopgate_idempotency")
	if err != nil {
		t.Fatal(err)
	}
	v := verdict{reasons: map[string]int{}, notables: map[string]int{}, all: all}
	ops := map[string]string{}
	for _, id := range runIDs {
		rep := checkRun(id, all[id])
		checkIdempotency(ctx, kv, rep)
		checkDrafts(outbox, rep)
		v.reasons[string(rep.Reason)]++
		v.events += rep.Events
		for _, n := range rep.Notables {
			f := strings.Fields(n)
			v.notables[strings.Join(f[1:len(f)-1], " ")]++
		}
		for op, call := range rep.Ops {
			v.notApplied += call.ReconciledNot
			if other, dup := ops[op]; dup {
				rep.Problems = append(rep.Problems, fmt.Sprintf("operation %s also belongs to run %s", op, other))
			}
			ops[op] = id
		}
		for _, p := range rep.Problems {
			v.problems = append(v.problems, id+": "+p)
		}
		if len(rep.Problems) > 0 && len(v.problems) < 40 {
			t.Logf("run %s:\n%s", id, renderTrail(all[id]))
		}
	}
	if len(all) != len(runIDs) {
		v.problems = append(v.problems, fmt.Sprintf("the events stream holds %d runs, want %d", len(all), len(runIDs)))
	}
	v.ops = len(ops)
	return v
}

// outboxVerdict is what checkOutbox found.
type outboxVerdict struct {
	problems   []string
	drafts     int
	leftovers  []string // temp files of writes a kill interrupted
	tempWrites int      // draft writes begun
	twice      int      // drafts put in place more than once
}

// checkOutbox checks the drafts against the tool's writes seen through
// inotify: want drafts, each put in place exactly once, and no more tool
// runs than the drafts and the runs a kill cut short. Every run of the
// tool creates one temp file, and removes it once its link is made or
// found made. A write that a kill interrupted before its link took no
// effect (the draft is not there; draft_status reconciles it as not
// applied and the retry writes it) and leaves its temp file behind; so
// does, rarely, one killed between its link and the temp file's removal.
// A write that found the draft already linked removes its temp file and
// places nothing: a tool run twice for one operation shows only here. So
// the temp files created are at least the drafts and at most the drafts
// and the leftovers; they used to be taken only as the lower bound, and
// a write run twice passed.
//
// overlapping is how many more tool runs are allowed: a worker frozen
// inside the tool (not killed) goes on with it when woken, beside the
// attempt that another worker began once a reconcile found nothing
// applied; one of the two finds the other's draft and leaves nothing.
// Where workers are only killed it is 0. (The tool also sweeps temp files
// older than 10 minutes when a worker starts: a soak must not run that
// long with leftovers in its outbox.)
func checkOutbox(t *testing.T, outbox string, watch *outboxWatch, want, overlapping int) outboxVerdict {
	t.Helper()
	drafts, tombstones, temps := outboxFiles(t, outbox)
	v := outboxVerdict{drafts: len(drafts), leftovers: temps}
	if len(drafts) != want {
		v.problems = append(v.problems, fmt.Sprintf("outbox holds %d drafts, want %d", len(drafts), want))
	}
	drafts = append(drafts, tombstones...) // each put in place once, by a temp file of its own
	placed, tempWrites, overflow := watch.writes()
	v.tempWrites = tempWrites
	if overflow {
		v.problems = append(v.problems, "inotify queue overflowed: write counts unknown")
	}
	for _, d := range drafts {
		if placed[d] != 1 {
			v.twice++
			v.problems = append(v.problems, fmt.Sprintf("draft %s was put in place %d times", d, placed[d]))
		}
	}
	switch most := len(drafts) + len(temps) + overlapping; {
	case tempWrites < len(drafts):
		v.problems = append(v.problems, fmt.Sprintf("the draft tool began %d writes for %d drafts: the watch missed some", tempWrites, len(drafts)))
	case tempWrites > most:
		v.problems = append(v.problems, fmt.Sprintf("the draft tool ran %d times for %d drafts, %d writes cut short and %d allowed to overlap: %d runs found their draft already written, an operation run again",
			tempWrites, len(drafts), len(temps), overlapping, tempWrites-most))
	}
	return v
}

// runsListing is what `loopgate runs` says of a test's runs once they
// have all finished.
type runsListing struct {
	problems []string
	behind   int // records behind the events, shown as the events say (a problem each)
}

// checkRunsCommand runs `loopgate runs --json --limit 0`, as an operator
// checks a deployment after a fault, and checks that it lists exactly
// runIDs, each finished done, and that the projection it reads is not
// behind the events.
func checkRunsCommand(ctx context.Context, t *testing.T, urls []string, runIDs []string) runsListing {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, loopgateBinary(t), "runs", "--json", "--limit", "0", "--nats", strings.Join(urls, ","))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return runsListing{problems: []string{fmt.Sprintf("loopgate runs: %v: %s", err, errOut.String())}}
	}
	var l runsListing
	want := map[string]bool{}
	for _, id := range runIDs {
		want[id] = true
	}
	seen := map[string]bool{}
	for line := range strings.Lines(out.String()) {
		var r struct {
			RunID     string `json:"run_id"`
			Status    string `json:"status"`
			Reason    string `json:"reason"`
			Projected string `json:"projected_status"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			l.problems = append(l.problems, fmt.Sprintf("loopgate runs printed %q: %v", line, err))
			continue
		}
		switch {
		case !want[r.RunID]:
			l.problems = append(l.problems, fmt.Sprintf("loopgate runs lists run %s, not one of the test's", r.RunID))
		case seen[r.RunID]:
			l.problems = append(l.problems, fmt.Sprintf("loopgate runs lists run %s twice", r.RunID))
		case r.Status != "finished" || r.Reason != "done":
			l.problems = append(l.problems, fmt.Sprintf("loopgate runs says run %s is %s %s, want finished done", r.RunID, r.Status, r.Reason))
		}
		seen[r.RunID] = true
		if r.Projected != "" {
			// A run's messages are acknowledged only once its record is
			// written, so a worker killed before that leaves them to a
			// worker that writes it: by the time the queues are drained,
			// no record is behind.
			l.behind++
			l.problems = append(l.problems, fmt.Sprintf("the projection's record of run %s says %s, behind its events (%s)", r.RunID, r.Projected, r.Status))
		}
	}
	if len(seen) != len(runIDs) {
		l.problems = append(l.problems, fmt.Sprintf("loopgate runs lists %d runs, want %d", len(seen), len(runIDs)))
	}
	return l
}
