//go:build soak

package soak

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	laptopRuns = 600              // happy-path tasks, published at a steady pace (20 s)
	laptopPace = 30               // tasks per second
	laptopFor  = 20 * time.Second // how long processes get killed: while tasks come in
)

// TestTheLaptopSurvivesKills is issue 4's check on the one-command
// deployment: `loopgate serve` (an embedded nats-server, sync_interval
// always, and a pool of workers in one process) with one `loopgate worker
// --nats` beside it. Under load, every one to three seconds one of the two
// is killed (SIGKILL) and started again, serve on its own store and port:
// so the whole JetStream server goes down with the workers it carries, and
// the other process and every client lose it until it is back. Then no
// run may be lost, stuck or duplicated, and no side effect may happen
// twice: the checks of TestRandomKillsUnderLoad.
//
// SOAK_SEED=n replays a schedule of kills (the seed is logged).
func TestTheLaptopSurvivesKills(t *testing.T) {
	rng, seed := soakRNG(t)

	logs := logDir(t)
	data := filepath.Join(t.TempDir(), "data")
	outbox := filepath.Join(data, "outbox")
	watch := watchOutbox(t, outbox)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	urls := []string{"nats://" + listen}

	starts := 0
	startServe := func() *proc {
		starts++
		p := startProc(t, fmt.Sprintf("serve-%d", starts), logs, "loopgate serving on", loopgateBinary(t), nil,
			"serve",
			"--listen", listen,
			"--config", filepath.Join(binDir, "cityops", "loopgate.yaml"),
			"--data", data,
			"--workers", fmt.Sprint(workersPerProc),
			"--ack-wait", ackWait,
			"--log-format", "json",
		)
		p.waitReady(t, 60*time.Second)
		return p
	}
	startOther := func() *proc {
		starts++
		return startWorker(t, workerOptions{name: fmt.Sprintf("worker-%d", starts), natsURLs: urls, data: data, logDir: logs, workers: workersPerProc, replicas: 1, groupCommit: "on"})
	}
	procs := []*proc{startServe(), startOther()}
	restart := []func() *proc{startServe, startOther}

	_, js := connect(t, urls)
	ap := startApprover(t, js)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()

	began := time.Now()
	runIDs, submitted := submitAtPace(ctx, js, laptopRuns, laptopPace, "laptop", began)

	var log []string
	note := func(format string, args ...any) {
		line := fmt.Sprintf("+%s ", time.Since(began).Round(100*time.Millisecond)) + fmt.Sprintf(format, args...)
		log = append(log, line)
		t.Log(line)
	}
	kills := [2]int{}
	for time.Since(began) < laptopFor {
		time.Sleep(chaosGap + time.Duration(rng.Int64N(int64(2*time.Second))))
		i := rng.IntN(len(procs))
		procs[i].kill()
		kills[i]++
		note("SIGKILL %s (%d runs finished)", procs[i].name, ap.finishedCount())
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
		procs[i] = restart[i]()
	}
	note("kills over: serve killed %d times, the worker %d times", kills[0], kills[1])
	if err := <-submitted; err != nil {
		t.Fatalf("submit: %v", err)
	}
	awaitFinished(ctx, t, js, ap, runIDs)
	total := time.Since(began)
	note("all %d runs finished", laptopRuns)
	if err := waitDrained(ctx, js, 60*time.Second); err != nil {
		t.Errorf("after every run finished: %v", err)
	}
	// Checked while serve still runs: it holds the store.
	v := verifyRuns(ctx, t, js, outbox, runIDs)
	problems := v.problems
	ov := checkOutbox(t, outbox, watch, 3*laptopRuns, 0)
	problems = append(problems, ov.problems...)
	problems = append(problems, ap.trouble()...)
	for _, i := range []int{1, 0} { // the worker first: serve is its server
		if code := procs[i].stop(30 * time.Second); code != 0 {
			t.Errorf("%s exited %d on SIGTERM, want 0", procs[i].name, code)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\nlaptop soak: %d runs at %d/s, loopgate serve (embedded server, sync always) + 1 worker process, %d workers each, ack-wait %s, seed %d\n",
		laptopRuns, laptopPace, workersPerProc, ackWait, seed)
	fmt.Fprintf(&b, "  all done in %s; serve killed %d times, the worker %d times\n", total.Round(time.Millisecond), kills[0], kills[1])
	fmt.Fprintf(&b, "  events %d (%d beyond the %d of undisturbed runs); drafts %d, put in place more than once %d; draft writes begun %d (%d temp files left)\n",
		v.events, v.events-laptopRuns*happyEvents, laptopRuns*happyEvents, ov.drafts, ov.twice, ov.tempWrites, len(ov.leftovers))
	keys := make([]string, 0, len(v.notables))
	for k := range v.notables {
		keys = append(keys, k)
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "  recovery: %-50s x%d\n", k, v.notables[k])
	}
	for _, l := range log {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	t.Log(b.String())
	if len(problems) > 0 {
		t.Fatalf("%d problems:\n%s", len(problems), strings.Join(problems[:min(len(problems), 60)], "\n"))
	}
}
