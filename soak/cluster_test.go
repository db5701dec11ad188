//go:build soak

package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Sizes of the cluster soak.
const (
	clusterRuns       = 200
	workersPerProc    = 16
	nodeKillAtShare   = 0.30 // of the expected events: kill a nats-server
	workerKillAtShare = 0.65 // of the expected events: kill a worker process
)

// natsNode is one nats-server process of the test cluster.
type natsNode struct {
	name      string
	clientURL string
	conf      string // its config file, to start it again on the same store
	proc      *proc
}

// startCluster starts n nats-server processes forming the JetStream
// cluster "loopgate" on loopback ports, each with its own store and
// sync_interval: always (loopgate's documented default, and what
// deploy/nats-cluster.conf runs), and waits until JetStream answers.
func startCluster(t *testing.T, base, logs string, n int) []*natsNode {
	t.Helper()
	bin := natsServerBinary(t)
	clientPorts, clusterPorts := make([]int, n), make([]int, n)
	for i := range n {
		clientPorts[i], clusterPorts[i] = freePort(t), freePort(t)
	}
	nodes := make([]*natsNode, n)
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[j]))
			}
		}
		store := filepath.Join(base, name)
		mustMkdir(t, store)
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: always
  limits { batch { max_inflight_per_stream: 1000 } }
}
cluster {
  name: loopgate
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, name, clientPorts[i], store, clusterPorts[i], strings.Join(routes, ", "))
		confPath := filepath.Join(base, name+".conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		nodes[i] = &natsNode{
			name:      name,
			clientURL: fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[i]),
			conf:      confPath,
			proc:      startProc(t, "nats-"+name, logs, "Server is ready", bin, nil, "-c", confPath),
		}
	}
	for _, nd := range nodes {
		nd.proc.waitReady(t, 30*time.Second)
	}
	_, js := connect(t, clientURLs(nodes))
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nodes
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster not ready after 60s: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func clientURLs(nodes []*natsNode) []string {
	var urls []string
	for _, nd := range nodes {
		urls = append(urls, nd.clientURL)
	}
	return urls
}

// sample is one observation of progress.
type sample struct {
	at       time.Time
	events   uint64 // messages in LOOPGATE_EVENTS
	finished int
}

// TestClusterSurvivesANodeAndAWorker runs 200 concurrent happy-path runs
// on a 3-node JetStream cluster (R3 streams and KV) with two worker
// processes and an auto-approver, SIGKILLs the nats-server leading the
// worker consumer about a third of the way through and one worker process
// about two thirds of the way, and asserts that every run finishes done,
// with 600 drafts written once each, no operation run twice, and every
// run's events gapless and complete.
func TestClusterSurvivesANodeAndAWorker(t *testing.T) {
	base := t.TempDir()
	logs := logDir(t)
	loopgateBinary(t)
	nodes := startCluster(t, base, logs, 3)
	urls := clientURLs(nodes)

	data := filepath.Join(base, "data")
	outbox := filepath.Join(data, "outbox")
	watch := watchOutbox(t, outbox)
	var workers []*proc
	for i := range 2 {
		workers = append(workers, startWorker(t, workerOptions{
			name: fmt.Sprintf("worker-%d", i+1), natsURLs: urls, data: data, logDir: logs,
			workers: workersPerProc, replicas: 3,
		}))
	}
	nc, js := connect(t, urls)
	ap := startApprover(t, js)
	// JetStream's advisories say how often workers handed messages back
	// (naks: retries after an error, a busy run, a lost race) and which
	// messages ran out of deliveries. A core subscription: it may miss a
	// few while its server is down, so these are lower bounds.
	var naks sync.Map // consumer -> *atomic.Int64
	count := func(key string) {
		v, _ := naks.LoadOrStore(key, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	for _, subj := range []string{"$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>", "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>"} {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			parts := strings.Split(m.Subject, ".")
			if len(parts) >= 7 {
				count(parts[4] + " " + parts[6])
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	events, err := js.Stream(ctx, "LOOPGATE_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 {
		t.Fatalf("LOOPGATE_EVENTS has %d replicas, want 3", info.Config.Replicas)
	}
	baseEvents := info.State.Msgs
	expected := uint64(clusterRuns * happyEvents)

	// Progress: the events stream's size and the runs finished, sampled.
	var (
		samplesMu sync.Mutex
		samples   []sample
		progress  atomic.Uint64
	)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
			ictx, icancel := context.WithTimeout(sampleCtx, time.Second)
			si, err := events.Info(ictx)
			icancel()
			if err != nil {
				continue // no leader for a moment: skip the sample
			}
			n := si.State.Msgs - baseEvents
			progress.Store(n)
			samplesMu.Lock()
			samples = append(samples, sample{at: time.Now(), events: n, finished: ap.finishedCount()})
			samplesMu.Unlock()
		}
	}()

	// 200 tasks at once, as 200 upstream publishes.
	began := time.Now()
	runIDs := make([]string, clusterRuns)
	var wg sync.WaitGroup
	errs := make([]error, clusterRuns)
	for i := range clusterRuns {
		wg.Go(func() {
			runIDs[i], errs[i] = submit(ctx, js, fmt.Sprintf("cluster-%03d-%d", i, began.UnixNano()))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tasks published in %s", clusterRuns, time.Since(began).Round(time.Millisecond))

	waitProgress := func(share float64) {
		t.Helper()
		target := uint64(share * float64(expected))
		for progress.Load() < target {
			select {
			case <-ctx.Done():
				t.Fatalf("progress stuck at %d of %d events", progress.Load(), target)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	// Kill the nats-server that leads the worker consumer, the queue every
	// worker pulls from: the worst node to lose (its pending pulls vanish
	// with it). Which nodes led the events stream and the approvals
	// consumer goes into the log.
	// SOAK_BASELINE=1 runs the same load without killing anything, for
	// the undisturbed throughput to compare with.
	baseline := os.Getenv("SOAK_BASELINE") != ""
	waitProgress(nodeKillAtShare)
	leaders := map[string]string{}
	if si, err := events.Info(ctx); err == nil && si.Cluster != nil {
		leaders["LOOPGATE_EVENTS"] = si.Cluster.Leader
	}
	for _, sc := range [][2]string{{"LOOPGATE_WORK", "loopgate-workers"}, {"LOOPGATE_APPROVALS", "loopgate-approvals"}} {
		if c, err := js.Consumer(ctx, sc[0], sc[1]); err == nil {
			if ci, err := c.Info(ctx); err == nil && ci.Cluster != nil {
				leaders[sc[1]] = ci.Cluster.Leader
			}
		}
	}
	victim := nodes[0]
	for _, nd := range nodes {
		if nd.name == leaders["loopgate-workers"] {
			victim = nd
		}
	}
	nodeKilled := time.Now()
	if !baseline {
		victim.proc.kill()
	}
	t.Logf("+%s: SIGKILL (unless baseline) nats-server %s at %d events, %d runs finished; leaders: %v",
		nodeKilled.Sub(began).Round(time.Millisecond), victim.name, progress.Load(), ap.finishedCount(), leaders)

	waitProgress(workerKillAtShare)
	workerKilled := time.Now()
	if !baseline {
		workers[0].kill()
	}
	t.Logf("+%s: SIGKILL (unless baseline) %s at %d events, %d runs finished",
		workerKilled.Sub(began).Round(time.Millisecond), workers[0].name, progress.Load(), ap.finishedCount())

	// Every run finishes.
	awaitFinished(ctx, t, js, ap, runIDs)
	allDone := time.Now()
	total := allDone.Sub(began)
	time.Sleep(500 * time.Millisecond) // a last sample
	stopSampling()
	<-sampled
	t.Logf("all %d runs finished in %s", clusterRuns, total.Round(time.Millisecond))

	if err := waitDrained(ctx, js, 60*time.Second); err != nil {
		t.Errorf("after every run finished: %v", err)
	}
	for _, w := range workers {
		if w.exited() {
			continue
		}
		if code := w.stop(30 * time.Second); code != 0 {
			t.Errorf("%s exited %d on SIGTERM, want 0", w.name, code)
		}
	}

	// The verdict, from the stream as any audit reader sees it.
	v := verifyRuns(ctx, t, js, outbox, runIDs)
	problems, reasons, notables, totalEvents := v.problems, v.reasons, v.notables, v.events
	extraEvents := totalEvents - clusterRuns*happyEvents
	ov := checkOutbox(t, outbox, watch, 3*clusterRuns, 0)
	problems = append(problems, ov.problems...)
	problems = append(problems, ap.trouble()...)
	listing := checkRunsCommand(ctx, t, urls, runIDs)
	problems = append(problems, listing.problems...)

	// The report.
	samplesMu.Lock()
	defer samplesMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\ncluster soak: %d runs, 3 nats-servers (R3, sync_interval always), 2 worker processes x %d workers, ack-wait %s\n", clusterRuns, workersPerProc, ackWait)
	verb := "killed"
	if baseline {
		verb = "NOT killed (baseline)"
	}
	fmt.Fprintf(&b, "  total %s; node %s %s at +%s (leaders then: %v); %s %s at +%s\n", total.Round(time.Millisecond),
		victim.name, verb, nodeKilled.Sub(began).Round(time.Millisecond), leaders, workers[0].name, verb, workerKilled.Sub(began).Round(time.Millisecond))
	fmt.Fprintf(&b, "  finished: %v; events %d (%d beyond the %d of undisturbed runs); drafts %d, tool writes %d (%d interrupted, temp file left), drafts written twice %d; operations %d\n",
		reasons, totalEvents, extraEvents, clusterRuns*happyEvents, ov.drafts, ov.tempWrites, len(ov.leftovers), ov.twice, v.ops)
	fmt.Fprintf(&b, "  loopgate runs: %d problems; projection records behind their events (shown as the events say): %d\n", len(listing.problems), listing.behind)
	keys := make([]string, 0, len(notables))
	for k := range notables {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  recovery: %-48s x%d\n", k, notables[k])
	}
	b.WriteString(throughputReport(samples, began, nodeKilled, workerKilled, allDone))
	var nakLines []string
	naks.Range(func(k, v any) bool {
		nakLines = append(nakLines, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(nakLines)
	fmt.Fprintf(&b, "  consumer advisories (at least): %s\n", strings.Join(nakLines, ", "))
	park, pub := ap.lags()
	fmt.Fprintf(&b, "  approver: parked event seen after it was stored %s; approval published in %s\n", spread(park), spread(pub))
	b.WriteString("  where the runs' time went (gap before an event, by the event types around it):\n")
	b.WriteString(whereTimeWent(v.all, 12))
	t.Log(b.String())

	if len(problems) > 0 {
		if len(problems) > 60 {
			problems = append(problems[:60], fmt.Sprintf("… and %d more", len(problems)-60))
		}
		t.Errorf("%d problems:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
}

// throughputReport says how many events were appended and runs finished
// per second in the windows between the kills, the worst second after
// each kill, and a per-second timeline.
func throughputReport(samples []sample, began, nodeKilled, workerKilled, allDone time.Time) string {
	var b strings.Builder
	at := func(t time.Time) sample { // the last sample at or before t
		s := sample{at: began}
		for _, x := range samples {
			if x.at.After(t) {
				break
			}
			s = x
		}
		return s
	}
	window := func(name string, from, to time.Time) {
		a, z := at(from), at(to)
		secs := z.at.Sub(a.at).Seconds()
		if secs <= 0 {
			return
		}
		fmt.Fprintf(&b, "  %-34s %6.1fs  %7.0f events/s  %6.1f runs finished/s\n", name, secs,
			float64(z.events-a.events)/secs, float64(z.finished-a.finished)/secs)
	}
	b.WriteString("  throughput windows:\n")
	window("start → node kill", began, nodeKilled)
	window("node kill → worker kill", nodeKilled, workerKilled)
	window("worker kill → all done", workerKilled, allDone)
	window("whole run", began, allDone)
	// Per second, from the samples.
	b.WriteString("  per second (events appended, runs finished; N = node kill, W = worker kill):\n   ")
	prev := sample{at: began}
	for sec := 1; ; sec++ {
		t := began.Add(time.Duration(sec) * time.Second)
		if t.After(allDone.Add(time.Second)) {
			break
		}
		s := at(t)
		mark := ""
		if !nodeKilled.Before(t.Add(-time.Second)) && nodeKilled.Before(t) {
			mark += "N"
		}
		if !workerKilled.Before(t.Add(-time.Second)) && workerKilled.Before(t) {
			mark += "W"
		}
		fmt.Fprintf(&b, " %d%s:%d/%d", sec, mark, s.events-prev.events, s.finished-prev.finished)
		if sec%10 == 0 {
			b.WriteString("\n   ")
		}
		prev = s
	}
	b.WriteString("\n")
	return b.String()
}
