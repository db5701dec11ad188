package worker_test

// BenchmarkParkedRuns is issue 3's figure: park many runs awaiting approval
// and report the worker's heap per parked run (goal: under 1 KiB, since a
// parked run lives in the stream and the KV, not in a worker) and the
// approval-to-resume latency.
//
//	go test -run '^$' -bench BenchmarkParkedRuns -benchtime 1x ./worker
//	go test -run '^$' -bench 'BenchmarkParkedRuns/server=process/sync=2m' -benchtime 1x ./worker -parked=1000
//
// Each sub-benchmark does its work once, whatever b.N is: -benchtime 1x
// says so out loud. Sub-benchmarks:
//
//   - server=process: nats-server runs in a child process (this test binary
//     re-executed, see benchServerMain), so the benchmark's heap is the
//     worker pool's (plus this benchmark's client connection) and nothing
//     else. This is the figure that answers "does a parked run cost worker
//     memory". The child reports its own heap too (server-B/parked-run):
//     that is where a parked run does live.
//   - server=inproc: the server embedded in the same process, connected
//     in-process, like `loopgate serve` without --nats. The heap delta is
//     then the worker's and the server's together.
//   - sync=always (the embedded default: an fsync per write) and sync=2m.
//
// Metrics: B/parked-run (heap delta over the N parked runs / N, after a
// warm-up of parked runs and a GC), goroutines-delta, parked-runs/s (N
// tasks published to N parked), p50-ms / p99-ms / max-ms (from publishing
// an approval to the executing event of the approved call, over a sample of
// the parked runs spread evenly in parking order, -parked.inflight at a
// time), and oldest-tenth-p50-ms / newest-tenth-p50-ms (the same for the
// tenth of the sample parked first and last: a run's resume costs more the
// more events were stored after it parked, see docs/benchmarks.md).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/worker"
)

// Flags of BenchmarkParkedRuns; go test passes them to the test binary
// when they follow the package list.
var (
	parkedRuns     = flag.Int("parked", 0, "BenchmarkParkedRuns: runs to park (default $LOOPGATE_BENCH_PARKED, else 10000)")
	parkedSample   = flag.Int("parked.sample", 1000, "BenchmarkParkedRuns: parked runs approved and timed (at most -parked)")
	parkedInflight = flag.Int("parked.inflight", 1, "BenchmarkParkedRuns: approvals in flight at once while timing")
	parkedWorkers  = flag.Int("parked.workers", 4, "BenchmarkParkedRuns: workers in the pool")
	parkedCache    = flag.Int("parked.cache", journal.DefaultRunCacheBytes, "BenchmarkParkedRuns: the pool's run cache in bytes (0: none, so every run is read from the stream, as by a worker that did not park it)")
)

const (
	benchTool     = "bench_write"
	benchAgent    = "bench-writer"
	benchApprover = "supervisor@cityops"
	// benchWarmup runs are parked before the baseline, so one-time
	// allocations (schemas, connection buffers, first KV and consumer
	// handles) are not charged to the measured runs.
	benchWarmup = 100
)

// The child process of server=process is this test binary run again.
func init() { natstest.ServeChildIfAsked() }

func BenchmarkParkedRuns(b *testing.B) {
	n := *parkedRuns
	if n == 0 {
		n = 10000
		if v := os.Getenv("LOOPGATE_BENCH_PARKED"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil {
				b.Fatalf("LOOPGATE_BENCH_PARKED=%q: %v", v, err)
			}
		}
	}
	if n < 1 || *parkedSample < 0 || *parkedInflight < 1 || *parkedWorkers < 1 {
		b.Fatalf("want -parked ≥ 1, -parked.sample ≥ 0, -parked.inflight ≥ 1, -parked.workers ≥ 1")
	}
	for _, server := range []string{"process", "inproc"} {
		for _, interval := range []string{natsd.SyncAlways, "2m"} {
			b.Run("server="+server+"/sync="+interval, func(b *testing.B) {
				benchParked(b, server, interval, n, min(*parkedSample, n))
			})
		}
	}
}

func benchParked(b *testing.B, server, interval string, n, sample int) {
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
	defer cancel()
	st := startBenchStack(b, server, interval)
	client := st.client
	js := st.clientJS

	parked := subscribeCount(b, client, "loopgate.events.cityops.*."+string(events.TypeParked))
	finished := subscribeCount(b, client, "loopgate.events.cityops.*."+string(events.TypeFinished))
	var pending sync.Map // run id → chan time.Time, for the runs being timed
	execSub, err := client.Subscribe("loopgate.events.cityops.*."+string(events.TypeExecuting), func(m *nats.Msg) {
		at := time.Now()
		if ch, ok := pending.Load(strings.Split(m.Subject, ".")[3]); ok {
			select {
			case ch.(chan time.Time) <- at:
			default:
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = execSub.SetPendingLimits(-1, -1)
	if err := client.Flush(); err != nil {
		b.Fatal(err)
	}

	// Warm up, then take the baseline with the pool idle.
	warm := min(benchWarmup, n)
	submitBench(ctx, b, js, "warm", warm)
	st.waitParked(ctx, parked, warm)
	heap0, gor0 := heapInUse()
	srv0 := st.serverHeap()

	began := time.Now()
	submitBench(ctx, b, js, "park", n)
	st.waitParked(ctx, parked, warm+n)
	parkTime := time.Since(began)
	heap1, gor1 := heapInUse()
	srv1 := st.serverHeap()

	perRun := (float64(heap1) - float64(heap0)) / float64(n)
	b.ReportMetric(0, "ns/op") // the work is done once; ns/op would mean nothing
	b.ReportMetric(perRun, "B/parked-run")
	b.ReportMetric(float64(gor1-gor0), "goroutines-delta")
	b.ReportMetric(float64(n)/parkTime.Seconds(), "parked-runs/s")
	if server == "process" {
		b.ReportMetric((float64(srv1)-float64(srv0))/float64(n), "server-B/parked-run")
	}
	b.Logf("server=%s sync=%s: %d runs parked in %s; heap %d → %d B (%+.0f B/run), goroutines %d → %d, server heap %d → %d B",
		server, interval, n, parkTime.Round(time.Millisecond), heap0, heap1, perRun, gor0, gor1, srv0, srv1)
	if perRun >= 1024 && server == "process" {
		b.Logf("over the 1 KiB goal: the pool keeps memory per parked run")
	}
	if sample == 0 {
		return
	}

	// The question of each sampled run, read back from the stream (after
	// the measurement, so this bookkeeping is not charged to the runs).
	questions := map[string]events.Event{}
	reqs, err := st.journal.Replay(ctx, "loopgate.events.cityops.*."+string(events.TypeApprovalRequested))
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range reqs {
		questions[e.RunID] = e
	}
	if len(questions) != warm+n {
		b.Fatalf("%d approval_requested events for %d parked runs", len(questions), warm+n)
	}
	runs := make([]string, sample)
	for i := range runs {
		runs[i] = events.RunID("cityops", benchTaskID("park", i*n/sample))
	}

	key := exampleKey(b, benchApprover) // the example requires signed approvals
	lat := make([]time.Duration, sample)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *parkedInflight)
	for range *parkedInflight {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= sample {
					return
				}
				d, err := approveAndTime(ctx, js, &pending, questions[runs[i]], key)
				if err != nil {
					errs <- fmt.Errorf("%w\n%s", err, st.describeRun(ctx, runs[i]))
					return
				}
				lat[i] = d
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	// Every approved run goes on to finish (the script answers after the
	// write); wait for them so the pool is quiet when it stops.
	if err := finished.wait(ctx, int64(sample), st.tail); err != nil {
		b.Fatalf("approved runs did not finish: %v", err)
	}
	// The sample is in parking order: the first tenth parked longest ago,
	// with the most events stored after theirs.
	tenth := max(sample/10, 1)
	oldest := slices.Sorted(slices.Values(lat[:tenth]))
	newest := slices.Sorted(slices.Values(lat[sample-tenth:]))
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(ms(percentile(oldest, 50)), "oldest-tenth-p50-ms")
	b.ReportMetric(ms(percentile(newest, 50)), "newest-tenth-p50-ms")
	b.Logf("approval → executing over %d runs, %d in flight: p50 %s p99 %s max %s; p50 of the tenth parked first %s, of the tenth parked last %s",
		sample, *parkedInflight, percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1], percentile(oldest, 50), percentile(newest, 50))
}

// approveAndTime approves the question q as the supervisor, signed with
// key, and returns the time from the publish to the executing event of its
// call (signing comes before, and is not timed).
func approveAndTime(ctx context.Context, js jetstream.JetStream, pending *sync.Map, q events.Event, key nkeys.KeyPair) (time.Duration, error) {
	var data events.ApprovalRequestedData
	if err := q.Decode(&data); err != nil {
		return 0, err
	}
	msg := approvals.Message{
		RunID: q.RunID, CallID: q.CallID, ArgsHash: data.ArgsHash,
		Decision: approvals.Approve, Approver: approvals.Approver{ID: benchApprover},
	}
	if err := approvals.Sign(&msg, key, time.Now()); err != nil {
		return 0, err
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return 0, err
	}
	ch := make(chan time.Time, 1)
	pending.Store(q.RunID, ch)
	defer pending.Delete(q.RunID)
	start := time.Now()
	if _, err := js.Publish(ctx, events.ApprovalSubject("cityops", q.RunID, q.CallID), payload); err != nil {
		return 0, fmt.Errorf("publish approval of run %s: %w", q.RunID, err)
	}
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	select {
	case at := <-ch:
		return at.Sub(start), nil
	case <-wait.C:
		return 0, fmt.Errorf("run %s: no executing event 30s after its approval", q.RunID)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// heapInUse is the heap in use and the goroutine count after the garbage of
// finished work is collected.
func heapInUse() (uint64, int) {
	return natstest.HeapInUse(), runtime.NumGoroutine()
}

func benchTaskID(prefix string, i int) string { return fmt.Sprintf("bench-%s-%06d", prefix, i) }

// submitBench publishes n tasks for the bench agent, asynchronously in
// windows, and waits for the stream to acknowledge them all.
func submitBench(ctx context.Context, b *testing.B, js jetstream.JetStream, prefix string, n int) {
	b.Helper()
	const window = 256
	for lo := 0; lo < n; lo += window {
		futures := make([]jetstream.PubAckFuture, 0, window)
		for i := lo; i < min(lo+window, n); i++ {
			id := benchTaskID(prefix, i)
			payload, err := json.Marshal(task(id, benchAgent))
			if err != nil {
				b.Fatal(err)
			}
			f, err := js.PublishAsync(events.TaskSubject("cityops"), payload, jetstream.WithMsgID(id), jetstream.WithStallWait(time.Minute))
			if err != nil {
				b.Fatalf("publish task %s: %v", id, err)
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatalf("publish task %s: %v", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
			case <-ctx.Done():
				b.Fatal(ctx.Err())
			}
		}
	}
}

// counter counts messages on a subject through a core subscription: it
// keeps nothing per message.
type counter struct {
	n    atomic.Int64
	tick chan struct{}
}

func subscribeCount(b *testing.B, nc *nats.Conn, subject string) *counter {
	b.Helper()
	c := &counter{tick: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(subject, func(*nats.Msg) {
		c.n.Add(1)
		select {
		case c.tick <- struct{}{}:
		default:
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	return c
}

// wait waits until target messages were counted. It gives up when the
// count does not move for a minute.
func (c *counter) wait(ctx context.Context, target int64, tail *tailWriter) error {
	seen, moved := c.n.Load(), time.Now()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		cur := c.n.Load()
		if cur >= target {
			return nil
		}
		if cur != seen {
			seen, moved = cur, time.Now()
		}
		if time.Since(moved) > time.Minute {
			return fmt.Errorf("stuck at %d of %d for a minute; pool log tail:\n%s", cur, target, tail.String())
		}
		select {
		case <-c.tick:
		case <-check.C:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d: %w", cur, target, ctx.Err())
		}
	}
}

// benchStack is a server (a child process or in this one), a worker pool
// on its own connection, and a client connection for the benchmark.
type benchStack struct {
	b        *testing.B
	client   *nats.Conn
	clientJS jetstream.JetStream
	journal  *journal.Journal
	work     jetstream.Consumer
	child    *natstest.ChildServer
	tail     *tailWriter
}

func startBenchStack(b *testing.B, server, interval string) *benchStack {
	b.Helper()
	st := &benchStack{b: b, tail: &tailWriter{}}
	jsOpts := []jetstream.JetStreamOpt{jetstream.WithDefaultTimeout(30 * time.Second)}
	var poolConn *nats.Conn
	switch server {
	case "inproc":
		env := natstest.StartWith(b, natstest.Options{SyncInterval: interval, Layout: journal.Layout{AckWait: 30 * time.Second}})
		poolConn = env.Conn
		nc, err := env.Server.Connect(nats.Name("bench client"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		st.client = nc
	case "process":
		st.child = natstest.StartChildServer(b, interval)
		for _, name := range []string{"bench pool", "bench client"} {
			nc, err := nats.Connect(st.child.URL, nats.Name(name))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			if poolConn == nil {
				poolConn = nc
			} else {
				st.client = nc
			}
		}
		pjs, err := jetstream.New(poolConn, jsOpts...)
		if err != nil {
			b.Fatal(err)
		}
		if err := journal.Ensure(b.Context(), pjs, journal.Layout{}); err != nil {
			b.Fatal(err)
		}
	default:
		b.Fatalf("unknown server placement %q", server)
	}
	var err error
	if st.clientJS, err = jetstream.New(st.client, jsOpts...); err != nil {
		b.Fatal(err)
	}
	if st.journal, err = journal.New(b.Context(), st.clientJS); err != nil {
		b.Fatal(err)
	}
	if st.work, err = st.clientJS.Consumer(b.Context(), journal.StreamWork, journal.ConsumerWorkers); err != nil {
		b.Fatal(err)
	}
	startBenchPool(b, poolConn, st.tail)
	return st
}

// startBenchPool starts a pool with the CityOps config plus bench_write, a
// write tool (approval required) that operators may call and supervisors
// approve, and bench-writer, an agent whose script calls it at once and
// answers once it ran.
func startBenchPool(b *testing.B, nc *nats.Conn, tail *tailWriter) {
	b.Helper()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	j, err := journal.New(b.Context(), js, journal.WithRunCache(*parkedCache))
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Load(cityops.Files, "loopgate.yaml")
	if err != nil {
		b.Fatal(err)
	}
	builtins := tools.Builtins{}
	if err := cityops.Register(builtins, cityops.Options{Outbox: b.TempDir()}); err != nil {
		b.Fatal(err)
	}
	builtins.MustRegister(benchTool, func(ctx context.Context, c tools.Call) (any, error) {
		return map[string]string{"operation_id": c.OperationID}, nil
	})
	cfg.Tools = append(cfg.Tools, tools.Manifest{
		Name: benchTool, Description: "benchmark write tool", Permission: tools.Write,
		ArgsSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`),
		Timeout:    events.Duration(5 * time.Second), Approval: tools.ApprovalRequired,
	})
	operator := cfg.Policy.Roles["operator"]
	operator.Call = append(slices.Clone(operator.Call), benchTool)
	cfg.Policy.Roles["operator"] = operator
	supervisor := cfg.Policy.Roles["supervisor"]
	supervisor.Approve = append(slices.Clone(supervisor.Approve), benchTool)
	cfg.Policy.Roles["supervisor"] = supervisor
	cfg.Agents[benchAgent] = config.Profile{
		Model: config.Model{Provider: "scripted"}, Tools: []string{benchTool}, Roles: []string{"operator"},
		Limits: withDefaults(events.Limits{}),
	}
	models := map[string]model.Model{}
	for name, p := range cfg.Agents {
		if name == benchAgent {
			continue
		}
		if models[name], err = model.Build(p.Model, cfg.ReadFile); err != nil {
			b.Fatal(err)
		}
	}
	models[benchAgent] = scripted(b,
		`{"tool_calls":[{"tool":"`+benchTool+`","args":{"n":1}}]}`,
		`{"final_answer":{"summary":"written"}}`)
	reg, err := tools.NewRegistry(cfg.Tools, builtins)
	if err != nil {
		b.Fatal(err)
	}
	// Info logs, formatted as in production, into a fixed-size tail: the
	// log costs what it costs and keeps nothing per run.
	log := slog.New(slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pool, err := worker.New(worker.Deps{JS: js, Journal: j, App: cfg, Registry: reg, Models: models},
		&worker.Config{Workers: *parkedWorkers, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	if err := pool.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pool.Stop(ctx)
	})
}

// waitParked waits for total parked events, then for the work consumer to
// have nothing pending or unacknowledged: every worker has let go.
func (st *benchStack) waitParked(ctx context.Context, parked *counter, total int) {
	st.b.Helper()
	if err := parked.wait(ctx, int64(total), st.tail); err != nil {
		st.b.Fatalf("parking: %v", err)
	}
	for {
		info, err := st.work.Info(ctx)
		if err != nil {
			st.b.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			st.b.Fatalf("pool did not go idle: %v", ctx.Err())
		}
	}
}

// describeRun renders a run's trail, with the data of its last event and
// the pool's log tail, for failure messages.
func (st *benchStack) describeRun(ctx context.Context, runID string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	evs, _, err := st.journal.Load(ctx, "cityops", runID)
	if err != nil {
		return fmt.Sprintf("load run %s: %v", runID, err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
	}
	out := "trail: " + strings.Join(types, " ")
	if len(evs) > 0 {
		out += "\nlast event data: " + string(evs[len(evs)-1].Data)
	}
	return out + "\npool log tail:\n" + st.tail.String()
}

// serverHeap is the child server's heap in use, 0 in process.
func (st *benchStack) serverHeap() uint64 {
	if st.child == nil {
		return 0
	}
	h, err := st.child.Heap()
	if err != nil {
		st.b.Fatal(err)
	}
	return h
}

// tailWriter keeps the last 64 KiB written to it, in a fixed buffer.
type tailWriter struct {
	mu   sync.Mutex
	buf  [64 << 10]byte
	next int
	full bool
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if len(p) > len(w.buf) {
		p = p[len(p)-len(w.buf):]
	}
	for len(p) > 0 {
		c := copy(w.buf[w.next:], p)
		p, w.next = p[c:], w.next+c
		if w.next == len(w.buf) {
			w.next, w.full = 0, true
		}
	}
	return n, nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.full {
		return string(w.buf[:w.next])
	}
	return string(w.buf[w.next:]) + string(w.buf[:w.next])
}
