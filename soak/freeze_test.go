//go:build soak

package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/natsd"
)

// TestAFrozenWorkerDoesNotWriteLate freezes a worker process (SIGSTOP, as
// a stalled VM would be) after it claimed the first draft's operation and
// before the draft tool started. Its lease ends; a fresh worker takes the
// run over (an unknown outcome, reconciled: no draft, so a second attempt)
// and finishes it. Then the frozen worker is woken (SIGCONT) with the
// first attempt in its hands, long past that attempt's deadline: it must
// not start the tool, so the draft is written once, and the run's trail is
// what the fresh worker left.
func TestAFrozenWorkerDoesNotWriteLate(t *testing.T) {
	base := t.TempDir()
	srv, err := natsd.Start(natsd.Config{StoreDir: filepath.Join(base, "jetstream"), SyncInterval: natsd.SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	urls := []string{srv.ClientURL()}
	loopgateBinary(t)
	_, js := connect(t, urls)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	data := filepath.Join(base, "data")
	outbox := filepath.Join(data, "outbox")
	watch := watchOutbox(t, outbox)
	opts := workerOptions{natsURLs: urls, data: data, logDir: logDir(t), workers: 2, replicas: 1, groupCommit: "on"}
	taskID := fmt.Sprintf("freeze-%d", time.Now().UnixNano())
	runID := events.RunID(tenant, taskID)

	pre := opts
	pre.name = "freeze-pre"
	ap := parkAtFirstDraft(ctx, t, js, func() *approver { return startApprover(t, js) }, pre, taskID)
	frozen := opts
	frozen.name, frozen.crashAt = "freeze-frozen", "freeze:before:side_effect"
	w1 := startWorker(t, frozen)
	ap.release(runID)
	if err := waitState(w1, 'T', time.Minute); err != nil {
		t.Fatalf("the armed worker did not stop itself: %v; log %s:\n%s", err, w1.logPath, tail(w1.logPath, 30))
	}
	frozenAt := time.Now()

	fresh := opts
	fresh.name = "freeze-fresh"
	w2 := startWorker(t, fresh)
	select {
	case <-ap.finished(runID):
	case <-ap.troubled:
		t.Fatalf("approver: %v; log %s:\n%s", ap.trouble(), w2.logPath, tail(w2.logPath, 30))
	case <-time.After(2 * time.Minute):
		t.Fatalf("run %s did not finish while its first worker was frozen\n%s\nlog %s:\n%s", runID, diagnose(ctx, js, runID), w2.logPath, tail(w2.logPath, 40))
	}
	t.Logf("the fresh worker finished the run %s after the freeze", time.Since(frozenAt).Round(10*time.Millisecond))

	// Wake the frozen worker. It goes on from the claim, the attempt's
	// deadline long gone, and finds the record moved on under it.
	if err := w1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !waitLog(w1.logPath, `"msg":"operation record changed under this attempt`, 30*time.Second) {
		t.Errorf("the woken worker never reached its outcome record; log %s:\n%s", w1.logPath, tail(w1.logPath, 30))
	}
	if err := waitDrained(ctx, js, 30*time.Second); err != nil {
		t.Errorf("after the frozen worker woke: %v\n%s", err, diagnose(ctx, js, runID))
	}
	for _, w := range []*proc{w1, w2} {
		if code := w.stop(30 * time.Second); code != 0 {
			t.Errorf("worker %s exited %d on SIGTERM, want 0", w.name, code)
		}
	}
	if n := len(grepLog(w1.logPath, `"msg":"attempt's deadline passed before its tool started`)); n != 1 {
		t.Errorf("the woken worker logged %d refusals to start its tool late, want 1", n)
	}

	rep, trail := checkLoneRun(ctx, t, js, ap, runID, outbox, watch)
	t.Logf("run %s: %d events; %s", runID, rep.Events, strings.Join(rep.Notables, "; "))
	if len(rep.Problems) > 0 {
		t.Errorf("run %s:\n  %s\nevents:\n%s", runID, strings.Join(rep.Problems, "\n  "), renderTrail(trail))
	}
}

// waitState waits until the process is in the given state of
// /proc/<pid>/stat ('T': stopped by a signal).
func waitState(p *proc, state byte, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			return err
		}
		// pid (comm) state …: comm may hold spaces, so look after its ')'.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == state {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("exited with code %d", p.code())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not in state %c after %s", state, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLog waits until the log at path has a line containing s.
func waitLog(path, s string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for len(grepLog(path, s)) == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}
