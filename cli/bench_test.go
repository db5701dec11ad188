package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/trail"
)

func bench(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(t.Context(), append([]string{"bench", "--nats", url}, args...), nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

// loopgate bench drives the CityOps happy path through a running serve,
// approving every draft as the supervisor with the example key, measures
// raw appends on a scratch stream it then deletes, and reports what the
// stream holds: every run done, 37 events each, five tool steps, three
// approvals.
func TestBenchDrivesRunsToTheEndAndChecksEveryTrail(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	code, out, errOut := bench(t, srv.url, "--runs", "6", "--concurrency", "3", "--prefix", "b", "--raw", "--raw-for", "300ms", "--json")
	if code != exitOK {
		t.Fatalf("bench: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	if rep.Submitted != 6 || rep.Ended != 6 || rep.Reasons["done"] != 6 || len(rep.Reasons) != 1 ||
		rep.Events != 6*37 || rep.ToolSteps != 6*5 || rep.Approvals != 6*3 || len(rep.Problems)+len(rep.Lost)+len(rep.Stuck)+len(rep.Refused) != 0 {
		t.Fatalf("report %+v: want 6 runs done, 37 events and 5 tool steps each, 18 approvals, nothing wrong", rep)
	}
	if rep.Raw == nil || rep.Raw.Appends < 3 || rep.Raw.PerSec <= 0 || rep.XRaw <= 0 || rep.Raw.Writers != 3 || rep.Raw.Storage != "File" {
		t.Fatalf("raw %+v, x raw %v: want appends measured by 3 writers on file storage", rep.Raw, rep.XRaw)
	}
	if rep.RunTime[0] <= 0 || rep.RunTime[2] < rep.RunTime[1] || rep.RunTime[1] < rep.RunTime[0] || rep.Elapsed < rep.RunTime[2] {
		t.Errorf("run times %v over %s", rep.RunTime, rep.Elapsed)
	}
	ends := 0
	for _, n := range rep.EndsPerSecond {
		ends += n
	}
	if ends != 6 {
		t.Errorf("ends per second %v: want 6 in all", rep.EndsPerSecond)
	}

	// What the report says is what the stream holds, and the scratch
	// stream is gone.
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	j, err := journal.New(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 6; i++ {
		runID := events.RunID("cityops", fmt.Sprintf("b-%d", i))
		evs, _, err := j.Load(t.Context(), "cityops", runID)
		if err != nil || len(evs) != 37 || evs[36].Type != events.TypeFinished {
			t.Fatalf("run b-%d: %d events, err %v: want 37 ending finished", i, len(evs), err)
		}
	}
	for name := range js.StreamNames(t.Context()).Name() {
		if strings.HasPrefix(name, "LOOPGATE_BENCH_RAW_") {
			t.Errorf("scratch stream %s left behind", name)
		}
	}

	// A prefix used before is refused: its runs exist, and a bench that
	// follows the stream from its end would report them lost.
	if code, _, errOut := bench(t, srv.url, "--runs", "1", "--prefix", "b"); code != exitError || !strings.Contains(errOut, `--prefix "b" was used before`) {
		t.Errorf("bench with a used prefix: exit %d, %s", code, errOut)
	}

	// The text report says the same in words.
	code, out, errOut = bench(t, srv.url, "--runs", "2", "--concurrency", "2")
	if code != exitOK || !strings.Contains(out, "2 runs ended in") || !strings.Contains(out, "ended: done 2") ||
		!strings.Contains(out, "trails checked: 2 runs, 0 with problems; lost 0, stuck 0, not submitted 0") ||
		!strings.Contains(out, "approvals sent as supervisor@cityops: 6") || !strings.Contains(out, "every run ended done") {
		t.Fatalf("bench: exit %d\n%s\n%s", code, out, errOut)
	}
}

// Runs that do not end done are named, and the exit code says so: with
// nobody to approve, runs stay parked (stuck when the bench gives up);
// another agent's runs stop for their own reasons; an unknown agent's
// tasks are rejected.
func TestBenchNamesRunsThatDidNotEndDone(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())

	code, out, errOut := bench(t, srv.url, "--runs", "2", "--approver", "", "--timeout", "3s", "--prefix", "parked", "--progress", "1s")
	if code != exitStopped || !strings.Contains(out, "lost 0, stuck 2") || strings.Count(out, "stuck: run") != 2 || !strings.Contains(out, ": parked after 15 events") ||
		!strings.Contains(out, "  +1s  ended 0 of 2 (0.0/s in the last 1s), in flight 2\n") {
		t.Fatalf("nobody approving: exit %d\n%s\n%s", code, out, errOut)
	}
	// Given a server list, the header says which one it connected to of
	// how many (one refuses: nothing listens on port 1).
	code, out, errOut = bench(t, srv.url+",nats://127.0.0.1:1", "--runs", "2", "--agent", "runaway-assistant")
	if code != exitStopped || !strings.Contains(out, "ended: max_steps 2") || strings.Contains(out, "every run ended done") ||
		!strings.Contains(out, " (connected; 2 servers given) (task ids") {
		t.Fatalf("runaway agent: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = bench(t, srv.url, "--runs", "1", "--agent", "no-such-agent")
	if code != exitStopped || !strings.Contains(out, "ended: rejected 1") {
		t.Fatalf("unknown agent: exit %d\n%s\n%s", code, out, errOut)
	}
}

// An interrupted bench (Ctrl-C, SIGTERM) calls the runs it stopped waiting
// for unfinished, not stuck or lost, and exits with its own code: they
// used to be reported stuck, a fault of loopgate's, as after --timeout.
func TestAnInterruptedBenchCallsItsRunsUnfinished(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut bytes.Buffer
	go func() {
		// Both runs park (nobody approves), or go on: either way they
		// have not ended.
		time.Sleep(2 * time.Second)
		cancel()
	}()
	code := Main(ctx, []string{"bench", "--nats", srv.url, "--runs", "2", "--approver", "", "--prefix", "interrupted", "--json"}, nil, &out, &errOut)
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, report %v\n%s\n%s", code, err, out.String(), errOut.String())
	}
	if code != exitUnfinished || !rep.Interrupted || len(rep.Unfinished) != 2 || len(rep.Stuck)+len(rep.Lost) != 0 ||
		!strings.Contains(rep.Unfinished[0], "(task interrupted-") {
		t.Errorf("interrupted bench: exit %d (want %d), interrupted %v, unfinished %q, stuck %q, lost %q",
			code, exitUnfinished, rep.Interrupted, rep.Unfinished, rep.Stuck, rep.Lost)
	}
}

func TestBenchRejectsBadFlagsByName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "--runs 0"},
		{[]string{"--concurrency", "0"}, "--concurrency 0"},
		{[]string{"--timeout", "0s"}, "--timeout 0s"},
		{[]string{"--progress", "-1s"}, "--progress -1s"},
		{[]string{"--raw", "--raw-for", "0s"}, "--raw-for 0s"},
		{[]string{"--tenant", "a.b"}, `--tenant "a.b"`},
		{[]string{"--prefix", "x.y"}, `--prefix "x.y"`},
		{[]string{"--key", "/nonexistent/seed.nk"}, "--key: key stat /nonexistent/seed.nk"},
	} {
		code, _, errOut := bench(t, "nats://127.0.0.1:1", tc.args...)
		if code != exitError || !strings.Contains(errOut, tc.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want 1 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// bench's rates are of the runs that ended: a run still going when the
// bench stops (stuck, parked) is listed, and its events and tool steps are
// not counted in events/s, whose window does not hold all of them (they
// used to be, and lifted the rate of a failed bench).
func TestBenchRatesCountOnlyTheRunsThatEnded(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../events/testdata/happy_run.json")
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	tenant := evs[0].Tenant
	done := &loadRun{taskID: "a", runID: evs[0].RunID, check: trail.New(tenant, evs[0].RunID), submitted: t0, ended: t0.Add(time.Second), executed: 5}
	stuck := &loadRun{taskID: "b", runID: "stuck-run", check: trail.New(tenant, "stuck-run"), submitted: t0, executed: 2}
	for i, e := range evs {
		done.check.Add(trail.Stored{Event: e, StreamSeq: uint64(100 + i), Subject: e.Subject(), MsgID: e.MsgID()})
		if i < 20 {
			e.RunID = "stuck-run"
			stuck.check.Add(trail.Stored{Event: e, StreamSeq: uint64(200 + i), Subject: e.Subject(), MsgID: e.MsgID()})
		}
	}
	l := &load{runs: map[string]*loadRun{done.runID: done, stuck.runID: stuck}, order: []*loadRun{done, stuck}, began: t0, last: t0.Add(time.Second)}
	var rep benchReport
	rep.fill(l)
	if rep.Ended != 1 || len(rep.Stuck) != 1 || rep.Events != len(evs) || rep.ToolSteps != 5 || rep.EventsPS != float64(len(evs)) || rep.StepsPS != 5 {
		t.Fatalf("ended %d, stuck %q, events %d (%.0f/s), tool steps %d (%.0f/s); want the ended run's %d events and 5 steps in 1 s, the other listed stuck",
			rep.Ended, rep.Stuck, rep.Events, rep.EventsPS, rep.ToolSteps, rep.StepsPS, len(evs))
	}
}
