//go:build soak

package soak

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/natsd"
	"github.com/nats-io/nats.go/jetstream"
)

// crashExitCode is what a worker killed by LOOPGATE_CRASH_AT exits with.
const crashExitCode = 86

// crashCase is one crash point, armed either from the task's start or
// only once the run reaches its first draft, and maybe a second point,
// armed in the worker that recovers from the first crash.
type crashCase struct {
	point string
	// atDraft: an unarmed worker runs the task until it parks on the
	// first draft's approval and stops; the armed worker takes over from
	// the approval, so the point fires on the write path (the first
	// executing, executed and observed it reaches are the draft's).
	atDraft bool
	// then: the worker started after the first crash is armed at this
	// point, so it crashes during the recovery (the first executed it
	// appends is the lost attempt's end, the first reconciled the
	// reconcile of that attempt); a fresh worker finishes the run.
	then string
}

func (c crashCase) String() string {
	s := c.point
	if c.atDraft {
		s += " @draft"
	}
	if c.then != "" {
		s += " then " + c.then
	}
	return s
}

// name is the case's sub-test name.
func (c crashCase) name() string {
	n := strings.ReplaceAll(c.point, ":", "_")
	if c.atDraft {
		n += "_at_draft"
	}
	if c.then != "" {
		n += "_then_" + strings.ReplaceAll(c.then, ":", "_")
	}
	return n
}

// crashCases are the points of LOOPGATE_CRASH_AT, in the order a happy
// run reaches them: before its run is read (before:load), before and
// after the append of each event type the worker writes (approved is
// appended by the approvals consumer of the same process;
// deliver:approval is where that consumer has been handed an approval
// message and not yet queued it; before:decision is where it has checked
// an approval and not yet written the decision to the approval's entry;
// after:approved is also where it has recorded a decision and not yet
// published the wake-up), and the four points inside a write: its
// deadline checked and its operation not yet claimed, claimed with its
// tool not started, between the tool's side effect and its record, and
// recorded with no executed event. A point fires the first time the
// process reaches it: for executing, executed and observed that is the
// first read (get_procedure), so those are run a second time armed at
// the first draft, to crash around the write itself. Last, a second
// crash during the recovery from a crash inside the first draft's write:
// around the executed event that ends the lost attempt (unknown) and
// around the reconciled event that settles it, once with the draft
// written (after:side_effect: reconciled applied) and once without
// (before:side_effect: not applied, so the write is run again).
func crashCases() []crashCase {
	var cases []crashCase
	add := func(points ...string) {
		for _, p := range points {
			cases = append(cases, crashCase{point: p})
		}
	}
	add("before:load") // the task taken, its run not yet read
	for _, typ := range []events.Type{
		events.TypeStarted, events.TypeProposed, events.TypeValidated, events.TypeExecuting, events.TypeExecuted,
		events.TypeObserved, events.TypeApprovalRequested, events.TypeParked, events.TypeApproved,
	} {
		add("before:"+string(typ), "after:"+string(typ))
		if typ == events.TypeParked {
			add("deliver:approval") // in the approvals consumer, the message not yet queued in its lane
			add("before:decision")  // in the approvals consumer, before the entry's compare-and-set
		}
	}
	add("before:claim", "before:side_effect", "after:side_effect", "after:idempotency_record")
	for _, typ := range []events.Type{events.TypeExecuting, events.TypeExecuted, events.TypeObserved} {
		cases = append(cases, crashCase{point: "before:" + string(typ), atDraft: true}, crashCase{point: "after:" + string(typ), atDraft: true})
	}
	add("before:"+string(events.TypeFinished), "after:"+string(events.TypeFinished))
	for _, then := range []string{"before:executed", "after:executed", "before:reconciled", "after:reconciled"} {
		cases = append(cases, crashCase{point: "after:side_effect", atDraft: true, then: then})
	}
	cases = append(cases, crashCase{point: "before:side_effect", atDraft: true, then: "after:reconciled"})
	return cases
}

// parkAtFirstDraft has an unarmed worker (o) take the task to its first
// draft's question, holding the approval back, then stops that worker
// with SIGTERM. It returns the approver (from approverOf, called once the
// worker has made the streams); the caller starts the worker under test
// and releases the approval to it.
func parkAtFirstDraft(ctx context.Context, t *testing.T, js jetstream.JetStream, approverOf func() *approver, o workerOptions, taskID string) *approver {
	t.Helper()
	runID := events.RunID(tenant, taskID)
	w0 := startWorker(t, o)
	ap := approverOf()
	parked := ap.hold(runID)
	if _, err := submit(ctx, js, taskID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-parked:
	case <-time.After(90 * time.Second):
		t.Fatalf("run %s did not park on its first draft; log %s:\n%s", runID, w0.logPath, tail(w0.logPath, 30))
	}
	if code := w0.stop(30 * time.Second); code != 0 {
		t.Fatalf("unarmed worker exited %d on SIGTERM", code)
	}
	// A worker stopped by SIGTERM settles what it held: the run is parked,
	// so nothing may wait for an ack (a lost ack would come back after
	// AckWait as a second message).
	if err := waitDrained(ctx, js, 1500*time.Millisecond); err != nil {
		t.Errorf("after SIGTERM of the unarmed worker: %v", err)
	}
	return ap
}

// checkLoneRun checks a run that was alone in its outbox once it has
// finished: every check of checkRun, its idempotency records, and its
// three drafts, each written once (watch), nothing else in the outbox,
// and no trouble seen by the approver. It returns the report and the
// run's events.
func checkLoneRun(ctx context.Context, t *testing.T, js jetstream.JetStream, ap *approver, runID, outbox string, watch *outboxWatch) (*runReport, []stored) {
	t.Helper()
	all, err := readEvents(ctx, js, events.RunFilter(tenant, runID))
	if err != nil {
		t.Fatal(err)
	}
	rep := checkRun(runID, all[runID])
	kv, err := js.KeyValue(ctx, "loopgate_idempotency")
	if err != nil {
		t.Fatal(err)
	}
	checkIdempotency(ctx, kv, rep)
	checkDrafts(outbox, rep)
	drafts, tombstones, temps := outboxFiles(t, outbox)
	if len(drafts) != 3 || len(temps) != 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("outbox holds drafts %v and other files %v, want exactly 3 drafts", drafts, temps))
	}
	// A fence (the tool claimed, then never started) leaves a tombstone,
	// written once as a draft is.
	drafts = append(drafts, tombstones...)
	placed, tempWrites, overflow := watch.writes()
	if overflow {
		rep.Problems = append(rep.Problems, "inotify queue overflowed: write counts unknown")
	}
	for _, d := range drafts {
		if placed[d] != 1 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("draft %s was written %d times", d, placed[d]))
		}
	}
	if tempWrites != len(drafts) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the draft tool wrote %d times, want %d (3 drafts and %d tombstones)", tempWrites, len(drafts), len(tombstones)))
	}
	if tr := ap.trouble(); len(tr) > 0 {
		rep.Problems = append(rep.Problems, tr...)
	}
	return rep, all[runID]
}

// crashRow is one line of the report.
type crashRow struct {
	point     string
	outcome   string
	crashedIn time.Duration // from the task's publish (or the approval's release) to the first exit
	doneIn    time.Duration // from the last crash (or the publish) to finished
	events    int
	naks      int // deliveries handed back ("run interrupted") by the workers
	notables  []string
	failed    bool
}

// TestCrashAtEveryPoint runs the CityOps happy path in a worker process
// that kills itself at one crash point, then in a fresh worker process,
// for every point in turn, against one real nats-server (TCP, file store,
// sync_interval always); for the recovery points, the worker between the
// two kills itself at the second point. For each it asserts that every
// armed worker crashed at its point (a run that finishes without the
// crash fails: the case tests nothing), that the run finishes done with
// its three drafts, its events gapless, and no operation executed twice
// (from the events, the idempotency records and inotify on the outbox).
func TestCrashAtEveryPoint(t *testing.T) {
	base := t.TempDir()
	srv, err := natsd.Start(natsd.Config{StoreDir: filepath.Join(base, "jetstream"), SyncInterval: natsd.SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	crashAtEveryPoint(t, base, []string{srv.ClientURL()}, 1)
}

// TestCrashAtEveryPointBatched is TestCrashAtEveryPoint on a 3-node
// cluster with R3 streams, where workers append each step's events in one
// atomic batch (loopgate turns batching on for replicated layouts): the
// before:/after: points then fire around the batch that carries the
// event, so a crash loses or keeps the whole step.
func TestCrashAtEveryPointBatched(t *testing.T) {
	base := t.TempDir()
	nodes := startCluster(t, base, logDir(t), 3)
	crashAtEveryPoint(t, base, clientURLs(nodes), 3)
}

func crashAtEveryPoint(t *testing.T, base string, urls []string, replicas int) {
	loopgateBinary(t) // build before the clock starts
	_, js := connect(t, urls)

	var ap *approver
	parent := t
	var rows []*crashRow
	defer func() { printCrashTable(t, rows) }()

	for i, cc := range crashCases() {
		point := cc.point
		row := &crashRow{point: cc.String()}
		name := cc.name()
		ok := t.Run(name, func(t *testing.T) {
			rows = append(rows, row)
			data := filepath.Join(base, fmt.Sprintf("point-%02d", i))
			logs := logDir(parent)
			outbox := filepath.Join(data, "outbox")
			watch := watchOutbox(t, outbox)
			opts := workerOptions{natsURLs: urls, data: data, logDir: logs, workers: 2, replicas: replicas}
			if replicas == 1 {
				opts.groupCommit = "on" // as serve on one server
			}

			armed := opts
			armed.name, armed.crashAt = fmt.Sprintf("%02d-armed-%s", i, name), point
			taskID := fmt.Sprintf("crash-%02d-%s-%d", i, strings.ReplaceAll(name, "_", "-"), time.Now().UnixNano())
			runID := events.RunID(tenant, taskID)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			var w1 *proc
			var began time.Time
			if cc.atDraft {
				pre := opts
				pre.name = fmt.Sprintf("%02d-pre", i)
				ap = parkAtFirstDraft(ctx, t, js, func() *approver {
					if ap == nil {
						ap = startApprover(parent, js) // it lives as long as the test
					}
					return ap
				}, pre, taskID)
				w1 = startWorker(t, armed)
				began = time.Now()
				ap.release(runID)
			} else {
				w1 = startWorker(t, armed)
				if ap == nil {
					ap = startApprover(parent, js) // the first worker created the streams; it lives as long as the test
				}
				began = time.Now()
				if _, err := submit(ctx, js, taskID); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("point %s: task %s, run %s", cc, taskID, runID)

			// Each armed worker must crash at its point: one that finishes
			// the run instead has tested nothing (its hook call gone, or
			// the run no longer passing there), and used to pass.
			w2 := w1
			crashedAt := began
			procs := []*proc{w1}
			if !crashed(t, ap, runID, w1, row) {
				row.outcome = "not reached"
				t.Errorf("the armed worker finished the run without reaching %s", point)
			} else {
				crashedAt = w1.exitTime()
				row.crashedIn = crashedAt.Sub(began)
				row.outcome = "crashed"
				if cc.then != "" {
					again := opts
					again.name, again.crashAt = fmt.Sprintf("%02d-armed-again-%s", i, name), cc.then
					w2 = startWorker(t, again)
					procs = append(procs, w2)
					if !crashed(t, ap, runID, w2, row) {
						row.outcome = "crashed, then not reached"
						t.Errorf("the worker armed at %s recovered the run from the crash at %s without reaching it", cc.then, point)
					} else {
						crashedAt = w2.exitTime()
						row.outcome = "crashed twice"
					}
				}
				if w2.exited() {
					fresh := opts
					fresh.name = fmt.Sprintf("%02d-fresh", i)
					w2 = startWorker(t, fresh)
					procs = append(procs, w2)
				}
			}

			select {
			case <-ap.finished(runID):
				row.doneIn = time.Since(crashedAt)
			case <-ap.troubled:
				t.Fatalf("approver: %v\n%s\nlog %s:\n%s", ap.trouble(), diagnose(ctx, js, runID), w2.logPath, tail(w2.logPath, 30))
			case <-time.After(2 * time.Minute):
				row.outcome += ", not finished"
				t.Fatalf("run %s did not finish within 2m of the %s; approver: %v\n%s\nlog %s:\n%s", runID, row.outcome, ap.trouble(), diagnose(ctx, js, runID), w2.logPath, tail(w2.logPath, 40))
			}
			// Nothing may be left behind: the work and approval messages
			// the crashed worker held come back and are settled.
			if err := waitDrained(ctx, js, 30*time.Second); err != nil {
				t.Errorf("after the run finished: %v\n%s", err, diagnose(ctx, js, runID))
			}
			for _, w := range procs {
				row.naks += len(grepLog(w.logPath, `"msg":"run interrupted`))
			}
			if code := w2.stop(30 * time.Second); code != 0 {
				t.Errorf("worker %s exited %d on SIGTERM, want 0", w2.name, code)
			}

			rep, trail := checkLoneRun(ctx, t, js, ap, runID, outbox, watch)
			row.events, row.notables = rep.Events, rep.Notables
			if len(rep.Problems) > 0 {
				row.failed = true
				t.Errorf("point %s, run %s:\n  %s\nevents:\n%s\nlog %s (last lines):\n%s", point, runID,
					strings.Join(rep.Problems, "\n  "), renderTrail(trail), w2.logPath, tail(w2.logPath, 25))
			}
		})
		if !ok {
			row.failed = true
		}
	}
}

// crashed waits until armed worker w exits with crashExitCode, and says
// whether it did; false means the run finished and w lives on (its point
// not reached). It fails t when w exits otherwise, gets stuck, or the
// approver sees trouble.
func crashed(t *testing.T, ap *approver, runID string, w *proc, row *crashRow) bool {
	t.Helper()
	select {
	case <-w.done:
	case <-ap.finished(runID):
		// A crash right after the finished event races with the
		// approver seeing it: give the process a moment to die.
		select {
		case <-w.done:
		case <-time.After(3 * time.Second):
		}
	case <-ap.troubled:
		t.Fatalf("approver: %v; log %s:\n%s", ap.trouble(), w.logPath, tail(w.logPath, 30))
	case <-time.After(90 * time.Second):
		row.outcome = "stuck"
		t.Fatalf("armed worker %s neither crashed nor finished the run in 90s; log %s:\n%s", w.name, w.logPath, tail(w.logPath, 30))
	}
	if !w.exited() {
		return false
	}
	if code := w.code(); code != crashExitCode {
		row.outcome = fmt.Sprintf("exit %d", code)
		t.Fatalf("armed worker %s exited %d, not %d; log %s:\n%s", w.name, code, crashExitCode, w.logPath, tail(w.logPath, 30))
	}
	return true
}

func printCrashTable(t *testing.T, rows []*crashRow) {
	var b strings.Builder
	w := 33
	for _, r := range rows {
		w = max(w, len(r.point))
	}
	fmt.Fprintf(&b, "\n%-*s %-28s %9s %9s %6s %5s  %s\n", w, "crash point", "outcome", "crash at", "done in", "events", "naks", "recovery events")
	for _, r := range rows {
		verdict := r.outcome
		if r.failed {
			verdict += " FAIL"
		} else if r.outcome != "" {
			verdict += ", done"
		}
		crash := "-"
		if strings.HasPrefix(r.outcome, "crashed") {
			crash = r.crashedIn.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "%-*s %-28s %9s %9s %6d %5d  %s\n", w, r.point, verdict, crash, r.doneIn.Round(10*time.Millisecond), r.events, r.naks, strings.Join(r.notables, "; "))
	}
	t.Log(b.String())
}

// renderTrail prints a run's events one per line, for failure messages.
func renderTrail(evs []stored) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %3d %-18s %-6s %-18s %s\n", e.Seq, e.Type, e.CallID, e.Tool, clip(string(e.Data), 160))
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
