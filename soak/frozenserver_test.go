//go:build soak

package soak

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"path/filepath"
)

// frozenServerBound is how long the runs may take to finish once a
// nats-server froze under them. A dead server closes its connections and
// its clients move at once; a frozen one (SIGSTOP, a stalled VM, a network
// that drops rather than refuses) keeps them open and answers nothing, and
// only the client's pings tell. With nats.go's defaults (a ping every
// 2 minutes, 2 unanswered allowed) that takes 4 to 6 minutes, while every
// worker connected to it sits still; loopgate's connections ping every
// 2 s (internal/natsconn) and leave after 3 unanswered.
const frozenServerBound = 90 * time.Second

// TestAFrozenServerIsLeft freezes (SIGSTOP) the nats-server both worker
// processes are connected to, a third of the way through 200 concurrent
// runs on a 3-node cluster, and keeps it frozen until every run finished.
// The workers are given only that server's URL and learn the other two
// from it, as a worker whose pick among its URLs landed on the frozen one
// would be. They must notice it answers nothing, move to a live server and
// finish every run done, within frozenServerBound of the freeze, with the
// drafts written once each and every trail whole.
func TestAFrozenServerIsLeft(t *testing.T) {
	base := t.TempDir()
	logs := logDir(t)
	loopgateBinary(t)
	nodes := startCluster(t, base, logs, 3)
	victim, live := nodes[0], clientURLs(nodes[1:])

	data := filepath.Join(base, "data")
	outbox := filepath.Join(data, "outbox")
	watch := watchOutbox(t, outbox)
	var workers []*proc
	for i := range 2 {
		workers = append(workers, startWorker(t, workerOptions{
			name: fmt.Sprintf("worker-%d", i+1), natsURLs: []string{victim.clientURL}, data: data, logDir: logs,
			workers: workersPerProc, replicas: 3,
		}))
	}
	_, js := connect(t, live)
	ap := startApprover(t, js)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	eventsStream, err := js.Stream(ctx, "LOOPGATE_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := eventsStream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	baseEvents := info.State.Msgs

	began := time.Now()
	runIDs := make([]string, clusterRuns)
	errs := make([]error, clusterRuns)
	var wg sync.WaitGroup
	for i := range clusterRuns {
		wg.Go(func() {
			runIDs[i], errs[i] = submit(ctx, js, fmt.Sprintf("frozen-%03d-%d", i, began.UnixNano()))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	target := baseEvents + uint64(nodeKillAtShare*clusterRuns*happyEvents)
	for {
		ictx, icancel := context.WithTimeout(ctx, time.Second)
		si, err := eventsStream.Info(ictx)
		icancel()
		if err == nil && si.State.Msgs >= target {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the runs did not reach %d events before the freeze", target-baseEvents)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := victim.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	finishedAtFreeze := ap.finishedCount()
	t.Logf("+%s: SIGSTOP nats-server %s (both workers' server), %d runs finished", frozenAt.Sub(began).Round(time.Millisecond), victim.name, finishedAtFreeze)
	// It stays frozen through the checks below, which read from the live
	// two (a thawed server rejoining moves leaders about again).
	t.Cleanup(func() { _ = victim.proc.cmd.Process.Signal(syscall.SIGCONT) })

	fctx, fcancel := context.WithDeadline(ctx, frozenAt.Add(frozenServerBound))
	awaitFinished(fctx, t, js, ap, runIDs)
	fcancel()
	allDone := time.Now()
	t.Logf("all %d runs finished %s after the freeze (%s in all)",
		clusterRuns, allDone.Sub(frozenAt).Round(time.Millisecond), allDone.Sub(began).Round(time.Millisecond))
	var firstAfter time.Duration
	for _, at := range ap.finishTimes() {
		if d := at.Sub(frozenAt); d > 0 && (firstAfter == 0 || d < firstAfter) {
			firstAfter = d
		}
	}
	t.Logf("first run finished %s after the freeze", firstAfter.Round(time.Millisecond))

	if err := waitDrained(ctx, js, 60*time.Second); err != nil {
		t.Errorf("after every run finished: %v", err)
	}
	for _, w := range workers {
		if code := w.stop(30 * time.Second); code != 0 {
			t.Errorf("%s exited %d on SIGTERM, want 0", w.name, code)
		}
		lost := grepLog(w.logPath, "stale connection")
		if len(lost) == 0 {
			t.Errorf("%s never logged that its server went stale; log %s", w.name, w.logPath)
			continue
		}
		t.Logf("%s: %s", w.name, lost[0])
	}

	v := verifyRuns(ctx, t, js, outbox, runIDs)
	problems := v.problems
	ov := checkOutbox(t, outbox, watch, 3*clusterRuns, 0)
	problems = append(problems, ov.problems...)
	problems = append(problems, ap.trouble()...)
	problems = append(problems, checkRunsCommand(ctx, t, live, runIDs).problems...)
	t.Logf("frozen server: finished %v; events %d (%d beyond undisturbed runs); drafts %d, written twice %d; operations %d",
		v.reasons, v.events, v.events-clusterRuns*happyEvents, ov.drafts, ov.twice, v.ops)
	if len(problems) > 0 {
		if len(problems) > 60 {
			problems = append(problems[:60], fmt.Sprintf("… and %d more", len(problems)-60))
		}
		t.Errorf("%d problems:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
}
