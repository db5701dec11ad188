//go:build soak

package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchRuns is the load of TestBenchUnderKills.
const benchRuns = 200

// TestBenchUnderKills is the operator's check done with the operator's
// tools: `loopgate bench` drives 200 happy-path runs, 64 at once, into a
// 3-node cluster (R3) with two worker processes, as a process of its own
// that knows nothing of the test; meanwhile a nats-server is SIGKILLed
// and started again on its store, and a worker process is SIGKILLed and
// started again. bench must exit 0 (every run ended done, every trail
// whole, no call taking effect twice), and the outbox must hold exactly
// the 600 drafts, each put in place once.
func TestBenchUnderKills(t *testing.T) {
	base := t.TempDir()
	logs := logDir(t)
	bin := loopgateBinary(t)
	serverBin := natsServerBinary(t)
	nodes := startCluster(t, base, logs, 3)
	urls := clientURLs(nodes)
	data := filepath.Join(base, "data")
	outbox := filepath.Join(data, "outbox")
	watch := watchOutbox(t, outbox)
	workers := make([]*proc, 2)
	for i := range workers {
		workers[i] = startWorker(t, workerOptions{name: fmt.Sprintf("worker-%d", i+1), natsURLs: urls, data: data, logDir: logs, workers: workersPerProc, replicas: 3})
	}
	_, js := connect(t, urls)
	stream, err := js.Stream(t.Context(), "LOOPGATE_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	// The count the kills wait for. Each read is bounded (a request to a
	// leader that just died used to take the client's 5 s timeout), and a
	// read that fails keeps the last count, with its error kept for the
	// failure message: once, after a node's restart, every read failed
	// until the bench had ended, and the test could only say "before N
	// events".
	var lastCount uint64
	var lastErr error
	eventsNow := func() uint64 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		si, err := stream.Info(ctx)
		if err != nil {
			lastErr = err
			return lastCount
		}
		lastCount, lastErr = si.State.Msgs, nil
		return lastCount
	}
	baseEvents := eventsNow()

	began := time.Now()
	bench := startProc(t, "bench", logs, "{", bin, nil, "bench",
		"--nats", strings.Join(urls, ","), "--runs", fmt.Sprint(benchRuns), "--concurrency", "64",
		"--prefix", fmt.Sprintf("bench-%d", began.UnixNano()), "--timeout", "10m", "--json")
	note := func(format string, args ...any) {
		t.Logf("+%s "+format, append([]any{time.Since(began).Round(100 * time.Millisecond)}, args...)...)
	}
	waitEvents := func(share float64) {
		target := baseEvents + uint64(share*benchRuns*happyEvents)
		for eventsNow() < target {
			select {
			case <-bench.done:
				t.Fatalf("bench exited (code %d) before %d events (the stream's count read %d, last error %v):\n%s", bench.code(), target, lastCount, lastErr, tail(bench.logPath, 40))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	waitEvents(0.25)
	victim := nodes[1]
	victim.proc.kill()
	note("SIGKILL nats-server %s", victim.name)
	time.Sleep(5 * time.Second)
	victim.proc = startProc(t, "nats-"+victim.name+"-again", logs, "Server is ready", serverBin, nil, "-c", victim.conf)
	victim.proc.waitReady(t, 60*time.Second)
	note("nats-server %s started again on its store", victim.name)

	waitEvents(0.6)
	workers[0].kill()
	note("SIGKILL %s", workers[0].name)
	workers[0] = startWorker(t, workerOptions{name: "worker-1-again", natsURLs: urls, data: data, logDir: logs, workers: workersPerProc, replicas: 3})
	note("%s started", workers[0].name)

	select {
	case <-bench.done:
	case <-time.After(12 * time.Minute):
		t.Fatalf("bench did not exit:\n%s", tail(bench.logPath, 40))
	}
	note("bench exited %d", bench.code())
	rep := readBenchReport(t, bench.logPath)
	t.Logf("bench: %d runs ended in %s: %.1f runs/s, %.0f events/s; reasons %v; events %d (%d beyond undisturbed trails); approvals %d, publishes retried %d; ends per second %v",
		rep.Ended, time.Duration(rep.Elapsed).Round(time.Millisecond), rep.RunsPerSec, rep.EventsPerSec, rep.Reasons,
		rep.Events, rep.Events-benchRuns*happyEvents, rep.Approvals, rep.Retried, rep.EndsPerSecond)
	if code := bench.code(); code != 0 || rep.Reasons["done"] != benchRuns || rep.Ended != benchRuns ||
		len(rep.Problems)+len(rep.Lost)+len(rep.Stuck)+len(rep.Refused) > 0 {
		t.Errorf("bench exited %d: problems %v, lost %v, stuck %v, refused %v", code, rep.Problems, rep.Lost, rep.Stuck, rep.Refused)
	}
	if ov := checkOutbox(t, outbox, watch, 3*benchRuns, 0); len(ov.problems) > 0 {
		t.Errorf("outbox: %d drafts: %s", ov.drafts, strings.Join(ov.problems, "; "))
	}
}

// benchReport is the part of `loopgate bench --json`'s report the soak reads.
type benchReport struct {
	Ended         int                 `json:"ended"`
	Elapsed       int64               `json:"elapsed_ns"`
	Events        int                 `json:"events"`
	RunsPerSec    float64             `json:"runs_per_sec"`
	EventsPerSec  float64             `json:"events_per_sec"`
	Reasons       map[string]int      `json:"reasons"`
	Approvals     int                 `json:"approvals_sent"`
	Retried       int                 `json:"publishes_retried"`
	EndsPerSecond []int               `json:"ends_per_second"`
	Refused       []string            `json:"approvals_refused"`
	Lost          []string            `json:"lost"`
	Stuck         []string            `json:"stuck"`
	Problems      map[string][]string `json:"problems"`
}

// readBenchReport reads the JSON object bench printed into its log (the
// lines from "{" to "}").
func readBenchReport(t *testing.T, logPath string) benchReport {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	// The last report: with -count above 1 each bench of the test
	// appends to the same log.
	from, to := strings.LastIndex(s, "\n{\n"), strings.LastIndex(s, "\n}\n")
	if from < 0 || to < from {
		t.Fatalf("no report in the bench's output:\n%s", tail(logPath, 40))
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(s[from+1:to+2]), &rep); err != nil {
		t.Fatalf("bench's report: %v:\n%s", err, tail(logPath, 40))
	}
	return rep
}
