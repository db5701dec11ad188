package bench_test

// BenchmarkLoopgate is issue 4's loopgate-level measure: on one embedded
// server per fsync setting (sync=always, loopgate's default, and sync=2m,
// JetStream's), in one run,
//
//   - raw/conc=C: the physical limit, conditional appends (journal.Append
//     of one ~300-byte event, each writer on its own run, as
//     BenchmarkConditionalAppend) by C writers at once;
//   - <variant>/conc=C/pools=P: the CityOps happy path (scripted model: get
//     the procedure, look the complaints up, three draft_escalation writes,
//     answer) with C runs in flight at once (a closed loop: a run that
//     finishes is replaced by the next task), worked on by P worker.Pool
//     instances on connections of their own (P processes), each with
//     Workers: C. Variants: approval=required is the happy path as
//     configured, every draft approved by the supervisor as soon as its
//     run's parked event is stored (the benchmark's approver follows the
//     stream); approval=none is the same with draft_escalation's manifest
//     set to approval "none": the host's own overhead without the approval
//     round trips;
//   - census/<variant>: a few runs with a subscription on every subject, to
//     count what the host sends to the server per run (appends, KV
//     operations, consumer creations, reads, acks, wake-ups) and stores;
//   - server=process/<variant>/conc=C/pools=1: the happy path with the
//     server in a child process (TCP on loopback), for the heap per active
//     run of the pool alone (run first, before the in-process server).
//
//	go test -run '^$' -bench BenchmarkLoopgate -benchtime 1x ./bench
//
// One op of raw/… is rawAppendsPerOp appends; one op of a happy-path
// sub-benchmark is a round of runs (lgRunsPerRound); -benchtime 1x does one
// of each, the default benchtime as many as fill a second. Metrics:
// events/s (events stored in LOOPGATE_EVENTS over the wall-clock time from
// the first task published to the last run's finished event), tool-steps/s
// (executed tool calls), runs/s, x-raw (events/s over raw/conc=C's appends/s
// measured before, on a server started alike: the goal is ≥ 0.5 at C=64;
// every line has an embedded server of its own, on an empty store),
// B/active-run (server=process only: heap in use with the runs in flight,
// after a GC, minus the heap with the pool idle, over the runs in flight,
// the median of three samples in an extra, untimed round of runs), events/run and writes/run (messages stored
// in every stream, KV buckets included: each is an fsync under
// sync=always). A table of everything is printed at the end.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/worker"
)

const (
	// rawAppendsPerOp is one op of raw/conc=C: enough appends to last about
	// a second under sync=always on this machine.
	rawAppendsPerOp = 4096
	// lgWarmupRuns are run before each measurement (at most lgWarmupConc at
	// once), so first-use costs (consumers, buffers, caches) are not charged.
	lgWarmupRuns = 8
	lgWarmupConc = 8
	// lgCensusRuns, at lgCensusRuns at once, are counted subject by subject.
	lgCensusRuns = 8
	// lgTenant, lgAgent and the principal are the CityOps happy path's.
	lgTenant   = "cityops"
	lgAgent    = "escalation-assistant"
	lgApprover = "supervisor@cityops"
	// lgStuck fails a measurement when no run finished for this long.
	lgStuck = time.Minute
	// lgToolSteps is the number of tool calls of one happy-path run.
	lgToolSteps = 5
	// lgEventsPerRun are the events of one happy-path run: started, then
	// per model call proposed, and per tool call validated, executing,
	// executed, observed, and per draft approval_requested, parked and
	// approved; finished.
	lgEventsPerRun           = 1 + 6 + 4*lgToolSteps + 3*3 + 1
	lgEventsPerRunNoApproval = lgEventsPerRun - 3*3
	// lgHeapMinConc is the least concurrency the heap per active run is
	// measured at: with one run in flight, the noise of a collected heap
	// is larger than the run.
	lgHeapMinConc = 8
)

// lgRunsPerRound is the number of runs of one op at each concurrency:
// enough to reach a steady state, few enough to finish in seconds.
func lgRunsPerRound(conc int) int {
	if conc == 1 {
		return 16
	}
	return 2 * conc
}

// lgVariant is a configuration of the happy path.
type lgVariant struct {
	name     string
	approval bool // draft_escalation needs an approval (as configured)
	// tmpfs puts the draft tool's outbox on /dev/shm: the same tool code
	// (temp file, write, fsync, rename), without the disk. The tool's own
	// file writes are not the host's overhead, and at sync=2m, where the
	// stream does no fsync, the drafts' creates and fsyncs on the disk
	// shared with the store are what the runs wait for most.
	tmpfs bool
}

var lgVariants = []lgVariant{{name: "approval=required", approval: true}, {name: "approval=none"}}

// lgTmpfsVariants are measured at the goal's concurrency only.
var lgTmpfsVariants = []lgVariant{
	{name: "approval=required,outbox=tmpfs", approval: true, tmpfs: true},
	{name: "approval=none,outbox=tmpfs", tmpfs: true},
}

// outbox is a directory for a pool's drafts.
func (v lgVariant) outbox(b *testing.B) string {
	if !v.tmpfs {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "loopgate-bench-outbox-")
	if err != nil {
		b.Skipf("no tmpfs for the outbox: %v", err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

var lgPoolCounts = []int{1, 2}

// lgResult is one line of the table.
type lgResult struct {
	sync, variant string
	where         string // in-process, or child process (TCP)
	conc, pools   int
	runs          int
	events, steps int
	writes        int
	elapsed       time.Duration
	heapPerRun    float64
	inflight      int
	raw           float64       // raw appends/s at conc under the same setting, 0 if not measured
	rawWindow     time.Duration // how long raw was timed over
	isRaw         bool
	writesOnly    bool // the writes-only line (benchWritesOnly)
	rawAppends    int
	grouped       journal.GroupStats // what group commit did, summed over the pools' journals
	procs         int                // GOMAXPROCS while it ran, if raised as loopgate serve does (0: the default)
	// cpu is the CPU time this process used in the timed window (the
	// embedded server's included; a server in a child process not).
	cpu time.Duration
}

// cpuPer is cpu in microseconds per one of n.
func cpuPer(cpu time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / float64(n)
}

func (r lgResult) eventsPerSec() float64 { return rate(r.events, r.elapsed) }

// ratioCeiling is the x raw the line's writes allow: its events over all
// the messages it stored, as if each cost a raw append and nothing else
// did. The goal of 0.5 × raw is out of reach of any host whose runs store
// more than two messages per event.
func (r lgResult) ratioCeiling() float64 {
	if r.writes == 0 {
		return 0
	}
	return float64(r.events) / float64(r.writes)
}

// lgTable collects the results of the sub-benchmarks for the final table;
// a sub-benchmark run again (default benchtime) replaces its line.
type lgTable struct {
	mu     sync.Mutex
	order  []string
	lines  map[string]lgResult
	census map[string]string
	procs  int // the default GOMAXPROCS
}

// put records a line, with the GOMAXPROCS it ran with if not the default.
func (t *lgTable) put(key string, r lgResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := runtime.GOMAXPROCS(0); n != t.procs {
		r.procs = n
	}
	if _, ok := t.lines[key]; !ok {
		t.order = append(t.order, key)
	}
	t.lines[key] = r
}

func BenchmarkLoopgate(b *testing.B) {
	table := &lgTable{lines: map[string]lgResult{}, census: map[string]string{}, procs: runtime.GOMAXPROCS(0)}
	for _, s := range syncSettings {
		b.Run("sync="+s, func(b *testing.B) {
			// The heap per active run, with the server in a child process:
			// the heap of this process is then the pool's (and the
			// driver's) alone. First, while no server runs in this process
			// (its caches come and go and would swamp the measure).
			for _, v := range lgVariants {
				conc := concurrencies[len(concurrencies)-1]
				b.Run(fmt.Sprintf("server=process/%s/conc=%d/pools=1", v.name, conc), func(b *testing.B) {
					r := benchHappyPath(b, startChildServer(b, s), v, conc, 1, true)
					r.sync = s
					table.put(b.Name(), r)
				})
			}
			// Each line runs on a server of its own, started for it with
			// the setting's options: raw lines and happy paths alike begin
			// on an empty store. On one server shared by the lines, each
			// ran on what the lines before it had stored (about a million
			// messages by the last ones, at 30 rounds a line) and paid for
			// it, up to a third of its rate, while the raw line it is
			// compared with ran first, on an empty store.
			fresh := func(b *testing.B) (*natstest.Env, *lgServer) {
				// AckWait 30s as in production (natstest's 5s is for
				// tests): a run held through a long segment under load
				// must not be redelivered to another worker.
				env := natstest.StartWith(b, natstest.Options{SyncInterval: s, Layout: journal.Layout{AckWait: 30 * time.Second}})
				srv := inProcess(env)
				srv.groupCommit = groupCommitFor(s)
				srv.stageEvents = stageWith(srv.groupCommit)
				return env, srv
			}
			raw := map[int]float64{}
			rawWindow := map[int]time.Duration{}
			for _, conc := range slices.Concat(concurrencies, *moreConc) {
				b.Run(fmt.Sprintf("raw/conc=%d", conc), func(b *testing.B) {
					serveProcs(b, s)
					env, _ := fresh(b)
					r := benchRawAppends(b, conc, func(ctx context.Context, run *simRun) error { return run.appendRaw(ctx, env.JS) })
					r.sync = s
					raw[conc], rawWindow[conc] = rate(r.rawAppends, r.elapsed), r.elapsed
					table.put(b.Name(), r)
				})
			}
			// The same appends through a journal with group commit: what
			// the stream stores when appends of different runs that wait
			// at once share atomic batches. Not the goal's denominator
			// (raw/conc=C is), but the limit a pool with group commit has.
			for _, conc := range slices.Concat(concurrencies, *moreConc) {
				b.Run(fmt.Sprintf("raw,group-commit/conc=%d", conc), func(b *testing.B) {
					serveProcs(b, s)
					env, _ := fresh(b)
					j, err := journal.New(b.Context(), env.JS, journal.WithGroupCommit(0))
					if err != nil {
						b.Fatal(err)
					}
					r := benchRawAppends(b, conc, func(ctx context.Context, run *simRun) error { return run.appendOne(ctx, j) })
					r.sync, r.grouped, r.raw, r.rawWindow = s, j.GroupStats(), raw[conc], rawWindow[conc]
					if r.grouped.Batches > 0 {
						b.ReportMetric(eventsPerBatch(r.grouped), "events/batch")
					}
					table.put(b.Name(), r)
				})
			}
			happyPath := func(v lgVariant, conc, pools int) {
				b.Run(fmt.Sprintf("%s/conc=%d/pools=%d", v.name, conc, pools), func(b *testing.B) {
					serveProcs(b, s)
					_, srv := fresh(b)
					r := benchHappyPath(b, srv, v, conc, pools, false)
					r.sync, r.raw, r.rawWindow = s, raw[conc], rawWindow[conc]
					if r.raw > 0 {
						b.ReportMetric(r.eventsPerSec()/r.raw, "x-raw")
					}
					table.put(b.Name(), r)
				})
			}
			for _, v := range lgVariants {
				for _, conc := range concurrencies {
					for _, pools := range lgPoolCounts {
						happyPath(v, conc, pools)
					}
				}
			}
			for _, v := range lgTmpfsVariants {
				happyPath(v, concurrencies[len(concurrencies)-1], 1)
			}
			for _, conc := range *moreConc {
				for _, v := range slices.Concat(lgVariants, lgTmpfsVariants) {
					happyPath(v, conc, 1)
				}
			}
			if !groupCommitFor(s) {
				conc := concurrencies[len(concurrencies)-1]
				b.Run(fmt.Sprintf("writes-only/conc=%d", conc), func(b *testing.B) {
					serveProcs(b, s)
					_, srv := fresh(b)
					r := benchWritesOnly(b, srv, conc)
					r.sync, r.raw, r.rawWindow = s, raw[conc], rawWindow[conc]
					if r.raw > 0 {
						b.ReportMetric(r.eventsPerSec()/r.raw, "x-raw")
					}
					table.put(b.Name(), r)
				})
			}
			// Durable throughput where appends share fsyncs: three servers
			// in this process, loopgate's streams and buckets at three
			// replicas (each server's Raft log writes the proposals queued
			// meanwhile as one append entry). On two vCPUs the three
			// servers also share the CPU with the pool.
			b.Run("cluster=R3", func(b *testing.B) {
				c, _ := startCluster(b, s)
				srv := inCluster(c)
				conc := concurrencies[len(concurrencies)-1]
				var (
					raw       float64
					rawWindow time.Duration
				)
				b.Run(fmt.Sprintf("raw/conc=%d", conc), func(b *testing.B) {
					r := benchRawAppends(b, conc, func(ctx context.Context, run *simRun) error { return run.appendRaw(ctx, srv.js) })
					r.sync, r.where = s, srv.where
					raw, rawWindow = rate(r.rawAppends, r.elapsed), r.elapsed
					table.put(b.Name(), r)
				})
				for _, v := range slices.Concat(lgVariants, lgTmpfsVariants) {
					b.Run(fmt.Sprintf("%s/conc=%d/pools=1", v.name, conc), func(b *testing.B) {
						r := benchHappyPath(b, srv, v, conc, 1, false)
						r.sync, r.raw, r.rawWindow = s, raw, rawWindow
						if r.raw > 0 {
							b.ReportMetric(r.eventsPerSec()/r.raw, "x-raw")
						}
						table.put(b.Name(), r)
					})
				}
			})
			for _, v := range lgVariants {
				b.Run("census/"+v.name, func(b *testing.B) {
					_, srv := fresh(b)
					c := benchCensus(b, srv, v)
					table.mu.Lock()
					defer table.mu.Unlock()
					table.census[s+" "+v.name] = c
				})
			}
		})
	}
	// b.Log of a benchmark with sub-benchmarks is shown only with -v.
	fmt.Printf("\nBenchmarkLoopgate results (%s, GOMAXPROCS %d):\n%s\n", runtime.Version(), runtime.GOMAXPROCS(0), table.String())
}

// benchRawAppends is benchAppends with rawAppendsPerOp appends per op, each
// made by appendOne: the raw lines' plain conditional publish
// (simRun.appendRaw), or the journal's append, for the group-commit line.
func benchRawAppends(b *testing.B, conc int, appendOne func(ctx context.Context, r *simRun) error) lgResult {
	runs := make([]*simRun, conc)
	for w := range runs {
		runs[w] = newRun()
	}
	// Warm up, untimed, as the happy-path lines do: the first appends of
	// a stream, its runs' subjects new, measure lower. Without it a raw
	// line run once (b.N 1: a -bench pattern that names only part of its
	// path, see rawShortWindow) gave a ratio a quarter too kind.
	spread(b, conc, rawAppendsPerOp, func(ctx context.Context, w int) error {
		return appendOne(ctx, runs[w])
	})
	n := b.N * rawAppendsPerOp
	cpu0 := processCPU()
	elapsed := spread(b, conc, n, func(ctx context.Context, w int) error {
		return appendOne(ctx, runs[w])
	})
	cpu := processCPU() - cpu0
	reportRates(b, elapsed, map[string]int{"events/s": n, "appends/s": n})
	b.ReportMetric(cpuPer(cpu, n), "cpu-us/append")
	return lgResult{isRaw: true, conc: conc, rawAppends: n, elapsed: elapsed, cpu: cpu}
}

// lgServer is where a measurement runs: the embedded server in this
// process (in-process connections) or in a child process (TCP).
type lgServer struct {
	where   string
	connect func(name string) (*nats.Conn, error)
	js      jetstream.JetStream // for stream states
	// batchEvents is worker.Config.BatchEvents for the pools: on, as
	// `loopgate serve/worker --replicas 3` turns it on, where the streams
	// are replicated.
	batchEvents bool
	// groupCommit opens the pools' journals with journal.WithGroupCommit,
	// as `loopgate serve` does on its embedded server with sync always.
	groupCommit bool
	// stageEvents is worker.Config.StageEvents, on with group commit as
	// `loopgate serve` has it.
	stageEvents bool
}

// eventsPerBatch is the mean size of the batches group commit stored.
func eventsPerBatch(g journal.GroupStats) float64 {
	if g.Batches == 0 {
		return 0
	}
	return float64(g.Events) / float64(g.Batches)
}

// groupLabel names what group commit did on a line ("" without it).
func groupLabel(g journal.GroupStats) string {
	if g.Batches+g.Alone+g.Refused == 0 {
		return ""
	}
	ms := 0.0
	if g.Batches > 0 {
		ms = float64(g.BatchTime.Microseconds()) / 1000 / float64(g.Batches)
	}
	return fmt.Sprintf(", group commit (%.1f events/batch, %.1f ms/batch, %d alone, %d refused)", eventsPerBatch(g), ms, g.Alone, g.Refused)
}

// procsLabel names a GOMAXPROCS other than the default ("" for it).
func procsLabel(procs int) string {
	if procs == 0 {
		return ""
	}
	return fmt.Sprintf(", GOMAXPROCS %d", procs)
}

// addGroupStats sums two journals' group commit counts (MaxShare: the
// larger).
func addGroupStats(a, b journal.GroupStats) journal.GroupStats {
	return journal.GroupStats{Batches: a.Batches + b.Batches, Events: a.Events + b.Events, Alone: a.Alone + b.Alone,
		Refused: a.Refused + b.Refused, MaxShare: max(a.MaxShare, b.MaxShare), BatchTime: a.BatchTime + b.BatchTime}
}

// subGroupStats is what group commit did between the counts before and
// after (MaxShare: over the whole life of the journals).
func subGroupStats(after, before journal.GroupStats) journal.GroupStats {
	return journal.GroupStats{Batches: after.Batches - before.Batches, Events: after.Events - before.Events,
		Alone: after.Alone - before.Alone, Refused: after.Refused - before.Refused, MaxShare: after.MaxShare,
		BatchTime: after.BatchTime - before.BatchTime}
}

// groupCommitFor is whether the pools on one server with the given fsync
// setting use group commit and staged steps, as `loopgate serve` sets them:
// on where every append is an fsync. LOOPGATE_BENCH_GROUP=0 turns both
// off, LOOPGATE_BENCH_STAGE=0 staging alone.
func groupCommitFor(syncInterval string) bool {
	return syncInterval == "always" && os.Getenv("LOOPGATE_BENCH_GROUP") != "0"
}

// serveProcs sets GOMAXPROCS, for the rest of a benchmark on the embedded
// server in this process, as loopgate serve does with its embedded server
// at the given fsync setting (natsd.Procs: twice the default with always),
// raw lines included (one process, one setting). The testing package sets
// GOMAXPROCS before each benchmark that has no sub-benchmarks, so each
// such one calls it. LOOPGATE_BENCH_PROCS=0 leaves the default, for an A/B.
func serveProcs(b *testing.B, syncInterval string) {
	if os.Getenv("LOOPGATE_BENCH_PROCS") == "0" {
		return
	}
	def := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(natsd.Procs(syncInterval, def))
	b.Cleanup(func() { runtime.GOMAXPROCS(def) })
}

// stageWith is worker.Config.StageEvents for pools with or without group
// commit: on with it, as in `loopgate serve`.
func stageWith(groupCommit bool) bool {
	return groupCommit && os.Getenv("LOOPGATE_BENCH_STAGE") != "0"
}

// journalOptions are the options of the pools' journals on srv.
func (srv *lgServer) journalOptions() []journal.Option {
	if srv.groupCommit {
		// LOOPGATE_BENCH_GROUP_MIN overrides journal.DefaultGroupMin.
		least, _ := strconv.Atoi(os.Getenv("LOOPGATE_BENCH_GROUP_MIN"))
		return []journal.Option{journal.WithGroupCommit(least)}
	}
	return nil
}

func inProcess(env *natstest.Env) *lgServer {
	return &lgServer{
		where:   "in-process",
		connect: func(name string) (*nats.Conn, error) { return env.Server.Connect(nats.Name(name)) },
		js:      env.JS,
	}
}

// inCluster is the first server of a natstest cluster (in-process
// connections); the streams' leaders are spread over the three.
func inCluster(c *natstest.Cluster) *lgServer {
	return &lgServer{
		where: "3-server cluster, R3",
		connect: func(name string) (*nats.Conn, error) {
			return nats.Connect("", nats.InProcessServer(c.Servers[0]), nats.Name(name))
		},
		js:          c.JS,
		batchEvents: os.Getenv("LOOPGATE_BENCH_R3_BATCH") != "0",
		// Off, as serve's auto has it on a replicated stream;
		// LOOPGATE_BENCH_R3_GROUP=1 measures it on.
		groupCommit: os.Getenv("LOOPGATE_BENCH_R3_GROUP") == "1",
	}
}

// The child process of server=process is this test binary run again.
func init() { natstest.ServeChildIfAsked() }

// startChildServer starts the embedded server with the given fsync
// setting in a child process (natstest.StartChildServer), ensures
// loopgate's layout (AckWait 30s) and returns it; connections to it are
// TCP on loopback. The heap of this process is then the pools' and the
// benchmark's, not the server's.
func startChildServer(b *testing.B, interval string) *lgServer {
	b.Helper()
	url := natstest.StartChildServer(b, interval).URL
	connect := func(name string) (*nats.Conn, error) { return nats.Connect(url, nats.Name(name)) }
	admin, err := connect("bench admin")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(admin.Close)
	js, err := jetstream.New(admin, jetstream.WithDefaultTimeout(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	if err := journal.Ensure(b.Context(), js, journal.Layout{AckWait: 30 * time.Second}); err != nil {
		b.Fatal(err)
	}
	group := groupCommitFor(interval)
	return &lgServer{where: "child process (TCP)", connect: connect, js: js, groupCommit: group, stageEvents: stageWith(group)}
}

// benchHappyPath measures one configuration: warm-up, then b.N rounds of
// lgRunsPerRound(conc) runs with conc in flight; with heap, then the heap
// per active run in one more round.
func benchHappyPath(b *testing.B, srv *lgServer, v lgVariant, conc, pools int, heap bool) lgResult {
	ctx, cancel := context.WithTimeout(b.Context(), 15*time.Minute)
	defer cancel()
	cfg := lgConfig(b, v.approval)
	stop, grouped := startLGPools(b, srv, cfg, v.outbox, conc, pools)
	defer stop()
	d := newLGDriver(b, srv)
	defer d.close()

	if _, err := d.drive(ctx, "warm", lgWarmupRuns, min(conc, lgWarmupConc), nil); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	groupedBefore := grouped()
	perRun := lgEventsPerRun
	if !v.approval {
		perRun = lgEventsPerRunNoApproval
	}
	r := measureRounds(ctx, b, srv, d, conc, perRun)
	r.variant, r.pools = v.name, pools
	r.grouped = subGroupStats(grouped(), groupedBefore)
	if heap && conc >= lgHeapMinConc {
		// Untimed: a GC with the runs in flight would stall them.
		r.heapPerRun, r.inflight = heapPerActiveRun(ctx, b, d, conc)
	}
	if r.inflight > 0 {
		b.ReportMetric(r.heapPerRun, "B/active-run")
	}
	b.ReportMetric(r.ratioCeiling(), "x-raw-max")
	if r.grouped.Batches > 0 {
		b.ReportMetric(eventsPerBatch(r.grouped), "events/batch")
	}
	if r.steps != r.runs*lgToolSteps {
		b.Logf("%d tool steps for %d runs, want %d each", r.steps, r.runs, lgToolSteps)
	}
	return r
}

// measureRounds is the timed part of a happy-path line, after its
// warm-up: b.N rounds of lgRunsPerRound(conc) runs driven by d, conc at
// once, each run's trail checked to have perRun events, and what the
// streams stored meanwhile counted.
func measureRounds(ctx context.Context, b *testing.B, srv *lgServer, d *lgDriver, conc, perRun int) lgResult {
	b.Helper()
	before := streamSeqs(ctx, b, srv.js)
	total := b.N * lgRunsPerRound(conc)
	b.ResetTimer()
	cpu0 := processCPU()
	elapsed, err := d.drive(ctx, "run", total, conc, nil)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	after := streamSeqs(ctx, b, srv.js)
	steps := checkTrails(ctx, b, srv.js, before[journal.StreamEvents], d.runs, perRun)
	stored := int(after[journal.StreamEvents] - before[journal.StreamEvents])
	writes := 0
	for name, seq := range after {
		writes += int(seq - before[name])
	}
	r := lgResult{
		where: srv.where, conc: conc, pools: 1, runs: total,
		events: stored, steps: steps, writes: writes, elapsed: elapsed, cpu: cpu,
	}
	b.ReportMetric(r.eventsPerSec(), "events/s")
	b.ReportMetric(rate(steps, elapsed), "tool-steps/s")
	b.ReportMetric(rate(total, elapsed), "runs/s")
	b.ReportMetric(float64(stored)/float64(total), "events/run")
	b.ReportMetric(float64(writes)/float64(total), "writes/run")
	b.ReportMetric(cpuPer(cpu, stored), "cpu-us/event")
	return r
}

// heapPerActiveRun takes the heap in use with the pools idle, runs another
// round of lgRunsPerRound(conc) runs, conc at once, and samples the heap
// when a quarter, half and three quarters of them have finished (their
// replacements published): it returns the median of the growth per run in
// flight, and the runs in flight.
func heapPerActiveRun(ctx context.Context, b *testing.B, d *lgDriver, conc int) (float64, int) {
	b.Helper()
	heap0 := liveHeap()
	total := lgRunsPerRound(conc)
	var perRun []float64
	var samples []string
	inflight := 0
	_, err := d.drive(ctx, "heap", total, conc, func(done, n int) {
		if n == 0 || (done != total/4 && done != total/2 && done != 3*total/4) {
			return
		}
		h := liveHeap()
		perRun = append(perRun, (float64(h)-float64(heap0))/float64(n))
		samples = append(samples, fmt.Sprintf("%d B with %d in flight", h, n))
		inflight = max(inflight, n)
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("heap: %d B idle; %s", heap0, strings.Join(samples, ", "))
	if len(perRun) == 0 {
		return 0, 0
	}
	slices.Sort(perRun)
	return perRun[len(perRun)/2], inflight
}

// lgConfig is the CityOps configuration; without approval, draft_escalation
// runs without asking anyone (still a write: idempotency record, operation
// id, write-ahead executing event).
func lgConfig(b *testing.B, approval bool) *config.Config {
	b.Helper()
	cfg, err := config.Load(cityops.Files, "loopgate.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if !approval {
		cfg.Tools = slices.Clone(cfg.Tools)
		i := slices.IndexFunc(cfg.Tools, func(m tools.Manifest) bool { return m.Name == "draft_escalation" })
		if i < 0 {
			b.Fatal("no draft_escalation in the CityOps config")
		}
		cfg.Tools[i].Approval = tools.ApprovalNone
	}
	return cfg
}

// startLGPools starts pools worker pools on the server, each on a
// connection of its own (as separate processes would be) with workers
// workers, its own tools and outbox, and no logs. stop stops them;
// grouped sums what group commit did in their journals so far.
func startLGPools(b *testing.B, srv *lgServer, cfg *config.Config, outbox func(*testing.B) string, workers, pools int) (stop func(), grouped func() journal.GroupStats) {
	b.Helper()
	var started []*worker.Pool
	var conns []*nats.Conn
	var journals []*journal.Journal
	grouped = func() journal.GroupStats {
		var sum journal.GroupStats
		for _, j := range journals {
			sum = addGroupStats(sum, j.GroupStats())
		}
		return sum
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, p := range started {
			if err := p.Stop(ctx); err != nil {
				b.Logf("stop pool: %v", err)
			}
		}
		for _, nc := range conns {
			nc.Close()
		}
		started, conns = nil, nil
	}
	for i := range pools {
		nc, err := srv.connect(fmt.Sprintf("bench pool %d", i+1))
		if err != nil {
			stop()
			b.Fatal(err)
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
		if err != nil {
			stop()
			b.Fatal(err)
		}
		j, err := journal.New(b.Context(), js, srv.journalOptions()...)
		if err != nil {
			stop()
			b.Fatal(err)
		}
		journals = append(journals, j)
		builtins := tools.Builtins{}
		if err := cityops.Register(builtins, cityops.Options{Outbox: outbox(b)}); err != nil {
			stop()
			b.Fatal(err)
		}
		reg, err := tools.NewRegistry(cfg.Tools, builtins)
		if err != nil {
			stop()
			b.Fatal(err)
		}
		p, err := worker.New(worker.Deps{JS: js, Journal: j, App: cfg, Registry: reg},
			&worker.Config{Workers: workers, Logger: slog.New(slog.DiscardHandler), BatchEvents: srv.batchEvents, StageEvents: srv.stageEvents})
		if err != nil {
			stop()
			b.Fatal(err)
		}
		if err := p.Start(b.Context()); err != nil {
			stop()
			b.Fatal(err)
		}
		started = append(started, p)
	}
	return stop, grouped
}

// lgDriver plays the upstream system and the approver: it publishes tasks,
// approves every draft as soon as its run is parked, and follows the runs
// through an ordered consumer on LOOPGATE_EVENTS (stored events only,
// after they are stored) filtered to the events it needs: approval
// questions, parked runs, executed calls (the tool steps) and finished
// runs.
type lgDriver struct {
	b     *testing.B
	nc    *nats.Conn
	js    jetstream.JetStream
	store *approvals.Store
	key   nkeys.KeyPair // lgApprover's example key: the example requires signed approvals
	cc    jetstream.ConsumeContext
	cons  string // the ordered consumer's name, for the census
	id    string // unique per driver: task ids never repeat on a server

	mu       sync.Mutex
	hashes   map[string]string // <run_id>.<call_id> → args hash, from approval_requested
	approved map[string]bool   // <run_id>.<call_id> approvals published
	finished chan lgEnd
	failed   chan error
	runs     map[string]bool // the run ids of the last drive
	pending  sync.WaitGroup  // approvals being published
}

type lgEnd struct {
	runID  string
	reason events.Reason
	detail string
}

func newLGDriver(b *testing.B, srv *lgServer) *lgDriver {
	b.Helper()
	nc, err := srv.connect("bench driver")
	if err != nil {
		b.Fatal(err)
	}
	fail := func(err error) {
		nc.Close()
		b.Fatal(err)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
	if err != nil {
		fail(err)
	}
	kv, err := js.KeyValue(b.Context(), journal.BucketApprovals)
	if err != nil {
		fail(err)
	}
	seed, err := cityops.ApproverSeed(lgApprover)
	if err != nil {
		fail(err)
	}
	key, err := approvals.ParseSeed(seed)
	if err != nil {
		fail(err)
	}
	d := &lgDriver{
		b: b, nc: nc, js: js, store: approvals.NewStore(kv, nil), key: key, id: uuid.NewString()[:8],
		hashes: map[string]string{}, approved: map[string]bool{},
		finished: make(chan lgEnd, 1<<16), failed: make(chan error, 16),
	}
	var filters []string
	for _, t := range []events.Type{events.TypeApprovalRequested, events.TypeParked, events.TypeFinished} {
		filters = append(filters, events.EventsPrefix+"."+lgTenant+".*."+string(t))
	}
	cons, err := js.OrderedConsumer(b.Context(), journal.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		fail(err)
	}
	d.cons = cons.CachedInfo().Name
	if d.cc, err = cons.Consume(d.onEvent); err != nil {
		fail(err)
	}
	return d
}

func (d *lgDriver) close() {
	d.pending.Wait()
	d.cc.Stop()
	d.nc.Close()
}

func (d *lgDriver) fail(err error) {
	select {
	case d.failed <- err:
	default:
	}
}

// onEvent runs for each stored event the driver follows, in stream order.
func (d *lgDriver) onEvent(m jetstream.Msg) {
	tok := strings.Split(m.Subject(), ".") // loopgate.events.<tenant>.<run_id>.<type>
	if len(tok) != 5 {
		return
	}
	runID, typ := tok[3], events.Type(tok[4])
	var e events.Event
	if err := json.Unmarshal(m.Data(), &e); err != nil {
		d.fail(fmt.Errorf("decode %s event of run %s: %w", typ, runID, err))
		return
	}
	switch typ {
	case events.TypeApprovalRequested:
		var q events.ApprovalRequestedData
		if err := e.Decode(&q); err != nil {
			d.fail(err)
			return
		}
		d.mu.Lock()
		d.hashes[approvals.Key(runID, e.CallID)] = q.ArgsHash
		d.mu.Unlock()
	case events.TypeParked:
		var p events.ParkedData
		if err := e.Decode(&p); err != nil {
			d.fail(err)
			return
		}
		for _, callID := range p.Awaiting {
			key := approvals.Key(runID, callID)
			d.mu.Lock()
			hash, done := d.hashes[key], d.approved[key]
			d.approved[key] = true
			delete(d.hashes, key)
			d.mu.Unlock()
			if done {
				continue // parked again (a premature wake-up): already answered
			}
			d.pending.Add(1)
			go func() {
				defer d.pending.Done()
				if err := d.approve(runID, callID, hash); err != nil {
					d.fail(err)
				}
			}()
		}
	case events.TypeFinished:
		var f events.FinishedData
		if err := e.Decode(&f); err != nil {
			d.fail(err)
			return
		}
		d.finished <- lgEnd{runID: runID, reason: f.Reason, detail: f.Detail}
	}
}

// approve publishes the supervisor's approval of the call's exact
// arguments (the args hash of its question, from the pending entry if
// the question was not seen), signed with the supervisor's example key.
func (d *lgDriver) approve(runID, callID, hash string) error {
	ctx, cancel := context.WithTimeout(d.b.Context(), 30*time.Second)
	defer cancel()
	if hash == "" {
		e, _, err := d.store.Get(ctx, runID, callID)
		if err != nil {
			return fmt.Errorf("approve %s/%s: %w", runID, callID, err)
		}
		hash = e.ArgsHash
	}
	msg := approvals.Message{
		RunID: runID, CallID: callID, ArgsHash: hash,
		Decision: approvals.Approve, Approver: approvals.Approver{ID: lgApprover},
	}
	if err := approvals.Sign(&msg, d.key, time.Now()); err != nil {
		return fmt.Errorf("approve %s/%s: %w", runID, callID, err)
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := d.js.Publish(ctx, events.ApprovalSubject(lgTenant, runID, callID), payload); err != nil {
		return fmt.Errorf("approve %s/%s: %w", runID, callID, err)
	}
	return nil
}

// drive runs total happy-path runs, conc at once: it publishes conc tasks,
// then one more each time a run finishes, and returns the time from the
// first publish to the last finished event. Each time a run finishes (and
// its replacement is published), it calls sample, if not nil, with the
// number of runs finished and the number in flight. Every run must finish
// done.
func (d *lgDriver) drive(ctx context.Context, phase string, total, conc int, sample func(done, inflight int)) (time.Duration, error) {
	ours := make(map[string]bool, total)
	var futures []jetstream.PubAckFuture
	submitted := 0
	submit := func() error {
		taskID := fmt.Sprintf("bench-%s-%s-%06d", d.id, phase, submitted)
		payload, err := json.Marshal(events.Task{
			TaskID:    taskID,
			Tenant:    lgTenant,
			Principal: events.Principal{ID: "dev@cityops", Roles: []string{"operator"}},
			Agent:     lgAgent,
			Input:     json.RawMessage(`"Find the five oldest open sanitation complaints and draft an escalation for each one that qualifies."`),
		})
		if err != nil {
			return err
		}
		f, err := d.js.PublishAsync(events.TaskSubject(lgTenant), payload, jetstream.WithMsgID(lgTenant+"/"+taskID), jetstream.WithStallWait(time.Minute))
		if err != nil {
			return fmt.Errorf("publish task %s: %w", taskID, err)
		}
		futures = append(futures, f)
		ours[events.RunID(lgTenant, taskID)] = true
		submitted++
		return nil
	}
	t0 := time.Now()
	for submitted < min(conc, total) {
		if err := submit(); err != nil {
			return 0, err
		}
	}
	done := map[string]bool{}
	var bad []string
	stuck := time.NewTimer(lgStuck)
	defer stuck.Stop()
	for len(done) < total {
		select {
		case e := <-d.finished:
			if !ours[e.runID] || done[e.runID] {
				continue
			}
			done[e.runID] = true
			if e.reason != events.ReasonDone {
				bad = append(bad, fmt.Sprintf("run %s finished %s: %s", e.runID, e.reason, e.detail))
			}
			if submitted < total {
				if err := submit(); err != nil {
					return 0, err
				}
			}
			if sample != nil {
				sample(len(done), submitted-len(done))
			}
			stuck.Reset(lgStuck)
		case err := <-d.failed:
			return 0, err
		case <-stuck.C:
			return 0, fmt.Errorf("%s: %d of %d runs finished, none in the last %s; %s", phase, len(done), total, lgStuck, d.trail(ctx, ours, done))
		case <-ctx.Done():
			return 0, fmt.Errorf("%s: %d of %d runs finished: %w", phase, len(done), total, ctx.Err())
		}
	}
	elapsed := time.Since(t0)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return 0, fmt.Errorf("publish task: %w", err)
		}
	}
	if len(bad) > 0 {
		return 0, fmt.Errorf("%d of %d runs did not finish done; first: %s", len(bad), total, bad[0])
	}
	d.runs = ours
	return elapsed, nil
}

// trail describes the events of one run of ours that did not finish, to
// say where runs are stuck.
func (d *lgDriver) trail(ctx context.Context, ours, done map[string]bool) string {
	for runID := range ours {
		if done[runID] {
			continue
		}
		j, err := journal.New(ctx, d.js)
		if err != nil {
			return err.Error()
		}
		evs, _, err := j.Load(ctx, lgTenant, runID)
		if err != nil {
			return err.Error()
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, "run %s:", runID)
		for _, e := range evs {
			fmt.Fprintf(&sb, " %s", e.Type)
			if e.Type == events.TypeApprovalRejected || e.Type == events.TypeFinished || e.Type == events.TypeRejected {
				fmt.Fprintf(&sb, "%s", e.Data)
			}
		}
		return sb.String()
	}
	return ""
}

// liveHeap is the heap in use after a garbage collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC() // and what the first one's finalizers let go
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// streamSeqs is the last sequence of every stream (KV buckets included):
// the difference of two is the number of messages stored meanwhile.
func streamSeqs(ctx context.Context, b *testing.B, js jetstream.JetStream) map[string]uint64 {
	b.Helper()
	out := map[string]uint64{}
	l := js.StreamNames(ctx)
	var names []string
	for name := range l.Name() {
		names = append(names, name)
	}
	if err := l.Err(); err != nil {
		b.Fatal(err)
	}
	// Each stream's own info, answered by its leader: on a cluster the
	// stream list's states can trail the last acknowledged writes.
	for _, name := range names {
		st, err := js.Stream(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		out[name] = st.CachedInfo().State.LastSeq
	}
	return out
}

// benchCensus runs lgCensusRuns runs at once on one pool with a
// subscription on every subject of the account, and reports what went to
// the server per run, by kind: loopgate's appends, KV writes and reads,
// consumer creations and deletions (each Journal.Load of a run with more
// than one event is an ordered consumer), pull requests, acks, wake-ups;
// and messages stored per stream. It returns the census as text.
func benchCensus(b *testing.B, srv *lgServer, v lgVariant) string {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	cfg := lgConfig(b, v.approval)
	stop, _ := startLGPools(b, srv, cfg, v.outbox, lgCensusRuns, 1)
	defer stop()
	d := newLGDriver(b, srv)
	defer d.close()
	if _, err := d.drive(ctx, "warm", 2, 2, nil); err != nil {
		b.Fatalf("warm-up: %v", err)
	}

	before := streamSeqs(ctx, b, srv.js)
	spy, err := srv.connect("bench census")
	if err != nil {
		b.Fatal(err)
	}
	defer spy.Close()
	var mu sync.Mutex
	kinds := map[string]int{}
	sub, err := spy.Subscribe(">", func(m *nats.Msg) {
		k := subjectKind(m.Subject)
		if r := strings.Split(m.Reply, "."); len(r) > 3 && r[0] == "$JS" && r[1] == "ACK" {
			// A consumer's delivery: the spy sees it on the subject it was
			// stored under; the reply names the stream and the consumer.
			k = "~ delivered from " + r[2]
			if r[3] == d.cons {
				k = "~ delivered to the benchmark's driver"
			}
		} else if strings.HasSuffix(m.Subject, "."+d.cons) {
			k = "~ the benchmark's driver: " + k
		}
		mu.Lock()
		kinds[k]++
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := spy.Flush(); err != nil {
		b.Fatal(err)
	}
	if _, err := d.drive(ctx, "census", lgCensusRuns, lgCensusRuns, nil); err != nil {
		b.Fatal(err)
	}
	d.pending.Wait()
	// Let the last acks and deletions of ordered consumers arrive.
	time.Sleep(500 * time.Millisecond)
	_ = spy.Flush()
	_ = sub.Unsubscribe()
	after := streamSeqs(ctx, b, srv.js)

	mu.Lock()
	defer mu.Unlock()
	var sb strings.Builder
	fmt.Fprintf(&sb, "census %s: per run (%d runs, %d at once, 1 pool), messages seen on the server by kind:\n", v.name, lgCensusRuns, lgCensusRuns)
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	per := func(n int) float64 { return float64(n) / lgCensusRuns }
	for _, k := range keys {
		fmt.Fprintf(w, "  %s\t%.1f\t\n", k, per(kinds[k]))
		b.ReportMetric(per(kinds[k]), metricName(k)+"/run")
	}
	fmt.Fprintf(w, "  stored, by stream:\t\t\n")
	names := make([]string, 0, len(after))
	for name := range after {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if n := after[name] - before[name]; n > 0 {
			fmt.Fprintf(w, "  %s\t%.1f\t\n", name, per(int(n)))
		}
	}
	_ = w.Flush()
	return sb.String()
}

// subjectKind classifies a subject for the census.
func subjectKind(s string) string {
	tok := strings.Split(s, ".")
	at := func(i int) string {
		if i < len(tok) {
			return tok[i]
		}
		return ""
	}
	switch {
	case at(0) == "_INBOX":
		return "~ replies and deliveries (_INBOX)"
	case at(0) == "loopgate" && at(1) == "events":
		return "loopgate.events (append " + at(4) + ")"
	case at(0) == "loopgate":
		return "loopgate." + at(1)
	case at(0) == "$KV":
		return "$KV." + at(1) + " (KV write)"
	case at(0) == "$JS" && at(1) == "API" && at(2) == "DIRECT":
		return "$JS.API.DIRECT.GET." + at(4)
	case at(0) == "$JS" && at(1) == "API" && at(2) == "CONSUMER":
		if at(3) == "MSG" {
			return "$JS.API.CONSUMER.MSG.NEXT." + at(5)
		}
		return "$JS.API.CONSUMER." + at(3) + "." + at(4)
	case at(0) == "$JS" && at(1) == "API" && at(2) == "STREAM":
		if at(3) == "MSG" {
			return "$JS.API.STREAM.MSG." + at(4) + "." + at(5)
		}
		return "$JS.API.STREAM." + at(3) + "." + at(4)
	case at(0) == "$JS" && at(1) == "API":
		return "$JS.API." + at(2)
	case at(0) == "$JS" && at(1) == "ACK":
		return "$JS.ACK." + at(2) + " (ack, nak, in-progress)"
	case at(0) == "$JS" && at(1) == "EVENT":
		return "$JS.EVENT (advisories)"
	case at(0) == "$JS" && at(1) == "FC":
		return "$JS.FC (flow control)"
	case at(0) == "$KV" || at(0) == "$JS":
		return at(0) + "." + at(1)
	}
	return at(0) + "." + at(1)
}

// metricName turns a census kind into a metric unit (no spaces).
func metricName(k string) string {
	switch {
	case strings.HasPrefix(k, "loopgate.events (append "):
		k = "append-" + strings.TrimSuffix(strings.TrimPrefix(k, "loopgate.events (append "), ")")
	case strings.HasPrefix(k, "~ delivered from "):
		k = "delivered-" + strings.TrimPrefix(k, "~ delivered from ")
	case strings.HasPrefix(k, "~ delivered to "):
		k = "delivered-driver"
	case strings.HasPrefix(k, "~ replies"):
		k = "replies"
	case strings.HasPrefix(k, "~ the benchmark's driver: "):
		k = "driver-" + strings.TrimPrefix(k, "~ the benchmark's driver: ")
	}
	if i := strings.Index(k, " ("); i > 0 {
		k = k[:i]
	}
	return strings.NewReplacer(" ", "", "(", "", ")", "").Replace(k)
}

// lgRowKind orders the table: raw appends, the happy path in-process,
// with the server in a child process.
func lgRowKind(r lgResult) int {
	switch {
	case r.isRaw:
		return 0
	case r.where == "in-process":
		return 1
	}
	return 2
}

// cpuCell is the CPU µs/event cell: "-" where the server's CPU is not
// this process's.
func cpuCell(cpu time.Duration, n int, where string) string {
	if cpu == 0 || (where != "" && where != "in-process") {
		return "-"
	}
	return fmt.Sprintf("%.1f", cpuPer(cpu, n))
}

// rawShortWindow is the time under which a raw line is flagged in the
// table: go test runs a sub-benchmark its -bench pattern matches only in
// part (BenchmarkLoopgate/sync=2m/(raw|x)/conc=64/(pools=1)?$ stops above
// raw's level) once, for b.N 1, and 4,096 appends at 40,000/s are a tenth
// of a second: too short to be the denominator of the ratios.
const rawShortWindow = time.Second

// ratioCell is an x raw cell, in parentheses when its raw line was timed
// too briefly to be trusted.
func ratioCell(ratio float64, rawWindow time.Duration) string {
	if rawWindow < rawShortWindow {
		return fmt.Sprintf("(%.2f)", ratio)
	}
	return fmt.Sprintf("%.2f", ratio)
}

// writesOnlyCell is r's events/s over those of the writes-only line of
// its setting, concurrency and server ("-" without one). The line replays
// a run without approvals, so runs with approvals, which store more, are
// not compared with it.
func (t *lgTable) writesOnlyCell(r lgResult) string {
	if !r.writesOnly && !strings.HasPrefix(r.variant, "approval=none") {
		return "-"
	}
	for _, w := range t.lines {
		if w.writesOnly && w.sync == r.sync && w.conc == r.conc && w.where == r.where && w.eventsPerSec() > 0 {
			return fmt.Sprintf("%.2f", r.eventsPerSec()/w.eventsPerSec())
		}
	}
	return "-"
}

// String is the table of every result, by fsync setting.
func (t *lgTable) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "sync\tconfiguration\truns\tevents/s\ttool-steps/s\truns/s\tx raw\tx raw max\tx writes-only\tCPU µs/event\tB/active-run\tevents/run\twrites/run\t")
	var order []string
	for _, s := range syncSettings {
		for pass := range 3 {
			for _, key := range t.order {
				r := t.lines[key]
				if r.sync == s && pass == lgRowKind(r) {
					order = append(order, key)
				}
			}
		}
	}
	for _, key := range order {
		r := t.lines[key]
		if r.isRaw {
			name := fmt.Sprintf("raw conditional appends, conc=%d", r.conc)
			if r.where != "" {
				name += ", server: " + r.where
			}
			name += groupLabel(r.grouped) + procsLabel(r.procs)
			if r.elapsed < rawShortWindow {
				name += fmt.Sprintf(" (timed %.0f ms only: name it in -bench to time it longer)", float64(r.elapsed.Microseconds())/1000)
			}
			ratio := "1.00"
			if r.raw > 0 {
				ratio = ratioCell(rate(r.rawAppends, r.elapsed)/r.raw, r.rawWindow)
			}
			fmt.Fprintf(w, "%s\t%s\t-\t%.0f\t-\t-\t%s\t-\t-\t%s\t-\t-\t-\t\n", r.sync, name, rate(r.rawAppends, r.elapsed), ratio, cpuCell(r.cpu, r.rawAppends, r.where))
			continue
		}
		ratio := "-"
		if r.raw > 0 {
			ratio = ratioCell(r.eventsPerSec()/r.raw, r.rawWindow)
		}
		heap := "-"
		if r.inflight > 0 {
			heap = fmt.Sprintf("%.0f", r.heapPerRun)
		}
		name := fmt.Sprintf("%s conc=%d pools=%d", r.variant, r.conc, r.pools)
		if r.where != "in-process" {
			name += ", server: " + r.where
		}
		name += groupLabel(r.grouped) + procsLabel(r.procs)
		fmt.Fprintf(w, "%s\t%s\t%d\t%.0f\t%.0f\t%.1f\t%s\t%.2f\t%s\t%s\t%s\t%.1f\t%.1f\t\n",
			r.sync, name, r.runs, r.eventsPerSec(), rate(r.steps, r.elapsed),
			rate(r.runs, r.elapsed), ratio, r.ratioCeiling(), t.writesOnlyCell(r), cpuCell(r.cpu, r.events, r.where), heap, float64(r.events)/float64(r.runs), float64(r.writes)/float64(r.runs))
	}
	_ = w.Flush()
	fmt.Fprintln(&sb, "x raw: events/s over the raw conditional appends/s at the same concurrency and setting, each line on an embedded server of its own from an empty store (goal ≥ 0.50 at conc=64); in parentheses when that raw line was timed under a second (untrustworthy: name the raw line fully in -bench).")
	fmt.Fprintln(&sb, "x raw max: events/run over writes/run, the x raw a line would reach if loopgate's own work cost nothing and each message it stores cost one raw append (its reads not counted): the most its writes allow when each is stored on its own (group commit stores many events per fsync and can pass it).")
	fmt.Fprintln(&sb, "x writes-only: events/s over the writes-only line's at the same setting and concurrency: the share of the CPU the host leaves to the persistence its runs need (0.50: the host costs as much as those writes; see bench/writesonly_test.go). The writes-only line's own x raw is the most any host could reach with the writes of this run, measured.")
	fmt.Fprintln(&sb, "group commit: the pools' journals (or the raw writers') shared atomic batches between runs (journal.WithGroupCommit), as loopgate serve does with sync always; events/batch is the mean.")
	fmt.Fprintln(&sb, "CPU µs/event: this process's CPU time (user and system; the embedded server, the pools and the benchmark's driver together) over the timed window, per event stored (raw lines: per append); not shown where the server runs in a child process.")
	fmt.Fprintln(&sb, "B/active-run: heap in use (after a GC) with the runs in flight minus with the pool idle, per run in flight (server in a child process).")
	keys := make([]string, 0, len(t.census))
	for k := range t.census {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&sb, "\n[sync=%s] %s", k, t.census[k])
	}
	if len(t.lines) == 0 && len(t.census) == 0 {
		return "(nothing measured)"
	}
	return sb.String()
}
