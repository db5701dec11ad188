//go:build soak

package soak

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	freezesRuns       = 400
	freezesFor        = 30 * time.Second
	freezesNodeFrozen = 12 * time.Second // longer than a connection's pings allow
)

// TestRandomFreezesUnderLoad is TestRandomKillsUnderLoad with processes
// stopped rather than killed: a frozen process (SIGSTOP: a stalled VM, a
// long pause) holds everything a dead one holds, and then goes on as if
// nothing happened, with what it knew before. Every 1 to 3 s one of the
// two worker processes is frozen for 0.5 to 6 s (the ack wait is 2 s, an
// attempt's lease 7 s: some freezes outlast the one, some not) and woken;
// once, a random nats-server is frozen for freezesNodeFrozen and woken.
// Woken workers find their runs moved on, leases passed, messages
// redelivered to others. Then, as after kills: every run done with
// gapless events, each draft put in place exactly once, every operation's
// record completed for its own run, nothing left unacknowledged.
func TestRandomFreezesUnderLoad(t *testing.T) {
	rng, seed := soakRNG(t)
	base := t.TempDir()
	logs := logDir(t)
	loopgateBinary(t)
	nodes := startCluster(t, base, logs, 3)
	urls := clientURLs(nodes)
	data := filepath.Join(base, "data")
	outbox := filepath.Join(data, "outbox")
	watch := watchOutbox(t, outbox)
	workers := make([]*proc, 2)
	for i := range workers {
		workers[i] = startWorker(t, workerOptions{name: fmt.Sprintf("worker-%d", i+1), natsURLs: urls, data: data, logDir: logs, workers: workersPerProc, replicas: 3})
	}
	// Whatever the test ends with, nothing is left stopped.
	var (
		frozenMu sync.Mutex
		frozen   = map[*proc]bool{}
	)
	freeze := func(p *proc) bool {
		frozenMu.Lock()
		defer frozenMu.Unlock()
		if frozen[p] || p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
			return false
		}
		frozen[p] = true
		return true
	}
	thaw := func(p *proc) {
		frozenMu.Lock()
		defer frozenMu.Unlock()
		if frozen[p] {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			delete(frozen, p)
		}
	}
	t.Cleanup(func() {
		frozenMu.Lock()
		defer frozenMu.Unlock()
		for p := range frozen {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	})

	_, js := connect(t, urls)
	ap := startApprover(t, js)
	ap.answerEntries(func(runID string) bool { return strings.ContainsRune("02468ace", rune(runID[len(runID)-1])) })
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	began := time.Now()
	runIDs, submitted := submitAtPace(ctx, js, freezesRuns, chaosPace, "freezes", began)

	var (
		logMu sync.Mutex
		log   []string
	)
	note := func(format string, args ...any) {
		line := fmt.Sprintf("+%s ", time.Since(began).Round(100*time.Millisecond)) + fmt.Sprintf(format, args...)
		logMu.Lock()
		log = append(log, line)
		logMu.Unlock()
		t.Log(line)
	}
	var thaws sync.WaitGroup
	freezeFor := func(p *proc, what string, d time.Duration) {
		if !freeze(p) {
			return
		}
		note("SIGSTOP %s for %s (%d runs finished)", what, d.Round(100*time.Millisecond), ap.finishedCount())
		thaws.Go(func() {
			time.Sleep(d)
			thaw(p)
			note("SIGCONT %s", what)
		})
	}
	nodeAt := time.Duration(rng.Int64N(int64(freezesFor / 2)))
	nodeDone, workerFreezes := false, 0
	for time.Since(began) < freezesFor {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(chaosGap + time.Duration(rng.Int64N(int64(2*time.Second)))):
		}
		if !nodeDone && time.Since(began) >= nodeAt {
			// The server a worker is on, when the log says: a frozen
			// server holds its clients until their pings give it up.
			nd := nodes[rng.IntN(len(nodes))]
			if on := serverOf(workers[rng.IntN(len(workers))], nodes); on != nil {
				nd = on
			}
			freezeFor(nd.proc, "nats-server "+nd.name, freezesNodeFrozen)
			nodeDone = true
			continue
		}
		w := workers[rng.IntN(len(workers))]
		freezeFor(w, w.name, 500*time.Millisecond+time.Duration(rng.Int64N(int64(5500*time.Millisecond))))
		workerFreezes++
	}
	thaws.Wait()
	note("freezes over: %d of worker processes, 1 of a nats-server", workerFreezes)
	if err := <-submitted; err != nil {
		t.Fatalf("submit: %v", err)
	}

	awaitFinished(ctx, t, js, ap, runIDs)
	total := time.Since(began)
	if err := waitDrained(ctx, js, 60*time.Second); err != nil {
		t.Errorf("after every run finished: %v", err)
	}
	for _, w := range workers {
		if code := w.stop(30 * time.Second); code != 0 {
			t.Errorf("%s exited %d on SIGTERM, want 0", w.name, code)
		}
	}

	v := verifyRuns(ctx, t, js, outbox, runIDs)
	// A worker frozen while its tool ran wakes past the call's timeout:
	// the attempt is recorded `executed timeout`, an unknown outcome,
	// and reconciled. That is the right trail after a freeze (a kill
	// leaves no such event, so the shared check calls it a problem); the
	// check reports it only once the call had its one success and was
	// approved and observed once, so here it is counted instead.
	var problems []string
	timedOut := 0
	for _, p := range v.problems {
		if strings.HasSuffix(p, "executed with status [timeout]") {
			timedOut++
			continue
		}
		problems = append(problems, p)
	}
	// A worker frozen inside the draft tool finishes its run when woken,
	// beside the attempt begun after a reconcile found no draft.
	ov := checkOutbox(t, outbox, watch, 3*freezesRuns, v.notApplied)
	problems = append(problems, ov.problems...)
	problems = append(problems, ap.trouble()...)
	listing := checkRunsCommand(ctx, t, urls, runIDs)
	problems = append(problems, listing.problems...)

	var b strings.Builder
	fmt.Fprintf(&b, "\nfreezes soak: %d runs at %d/s, 3 nats-servers (R3, sync always), 2 worker processes x %d workers, ack-wait %s, seed %d\n",
		freezesRuns, chaosPace, workersPerProc, ackWait, seed)
	fmt.Fprintf(&b, "  all done in %s; %d worker freezes, one nats-server frozen %s\n", total.Round(time.Millisecond), workerFreezes, freezesNodeFrozen)
	fmt.Fprintf(&b, "  finished %v; events %d (%d beyond undisturbed runs); drafts %d, put in place more than once %d; draft writes begun %d\n",
		v.reasons, v.events, v.events-freezesRuns*happyEvents, ov.drafts, ov.twice, ov.tempWrites)
	fmt.Fprintf(&b, "  calls timed out by a freeze during the tool, then reconciled: %d\n", timedOut)
	fmt.Fprintf(&b, "  loopgate runs: %d problems; records behind their events: %d\n", len(listing.problems), listing.behind)
	keys := make([]string, 0, len(v.notables))
	for k := range v.notables {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  recovery: %-50s x%d\n", k, v.notables[k])
	}
	for _, w := range workers {
		fmt.Fprintf(&b, "  %s: not started late (past its deadline) %d; stale connections %d\n", w.name,
			len(grepLog(w.logPath, "not run")), len(grepLog(w.logPath, "stale connection")))
	}
	for _, l := range log {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	t.Log(b.String())
	if len(problems) > 0 {
		t.Fatalf("%d problems:\n%s", len(problems), strings.Join(problems[:min(len(problems), 60)], "\n"))
	}
}

// serverOf is the node w last said it connected to (`nats: connected`,
// `nats: reconnected`), or nil.
func serverOf(w *proc, nodes []*natsNode) *natsNode {
	var on *natsNode
	for _, line := range grepLog(w.logPath, `"msg":"nats: `) {
		if !strings.Contains(line, "connected") {
			continue
		}
		for _, nd := range nodes {
			if strings.Contains(line, `"server":"`+nd.clientURL+`"`) {
				on = nd
			}
		}
	}
	return on
}
