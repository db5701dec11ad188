package bench_test

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// moreConc are concurrencies measured besides concurrencies, on one
// server with one pool (-lg.conc=256,512): how far more runs in flight go.
var moreConc = concList("lg.conc", "BenchmarkLoopgate: more concurrencies (comma-separated) for the raw and one-pool happy-path lines on one server")

var printGaps = flag.Bool("lg.gaps", false, "BenchmarkLoopgate: print, for each happy-path line, where a run's wall-clock time goes (the time between consecutive events, by transition)")

// checkTrails reads the events stored after stream sequence from and
// fails b unless each of the runs measured is there, begun by started,
// gapless (seq 1, 2, …) and ended by finished after exactly perRun events:
// the benchmark counts stored events, so a lost or an extra event must not
// pass as a rate. (Other runs' events after from, such as the last of the
// warm-up's, are not its business.) With -lg.gaps it also prints where
// the runs' wall-clock time went: for each transition between consecutive
// events (parked → approved, say), how often a run makes it, its mean
// time, and that time per run. The times are the events' own (set by the
// pool that appended them, one clock per process; with batched appends,
// the time an event was staged). It returns the measured runs' tool steps
// (their executed events), which the driver does not follow: following
// them would add the benchmark's own deliveries to the measured CPU.
func checkTrails(ctx context.Context, b *testing.B, js jetstream.JetStream, from uint64, measured map[string]bool, perRun int) (steps int) {
	b.Helper()
	byRun := readRuns(ctx, b, js, from)
	for id := range measured {
		run := byRun[id]
		for _, e := range run {
			if e.Type == events.TypeExecuted {
				steps++
			}
		}
		ok := len(run) == perRun && run[0].Type == events.TypeStarted && run[len(run)-1].Type == events.TypeFinished
		for i := range run {
			ok = ok && run[i].Seq == uint64(i+1)
		}
		if !ok {
			trail := make([]string, len(run))
			for i, e := range run {
				trail[i] = fmt.Sprintf("%d:%s", e.Seq, e.Type)
			}
			b.Errorf("run %s: %d events, want %d from started to finished, gapless: %s", id, len(run), perRun, strings.Join(trail, " "))
		}
	}
	if *printGaps {
		printRunGaps(b.Name(), byRun, measured)
	}
	return steps
}

// readRuns returns the events stored after stream sequence from, by run,
// read as loopgate reads runs (journal.ReplayAfter). A cluster's
// JetStream API can be briefly without a responder or a leader after the
// load (a stream leader moving): it tries five times.
func readRuns(ctx context.Context, b *testing.B, js jetstream.JetStream, from uint64) map[string][]events.Event {
	b.Helper()
	j, err := journal.New(ctx, js, journal.WithRunCache(0))
	if err != nil {
		b.Fatal(err)
	}
	for try := 1; try <= 5; try++ {
		var evs []events.Event
		if evs, err = j.ReplayAfter(ctx, events.EventsPrefix+".>", from); err == nil {
			byRun := map[string][]events.Event{}
			for _, e := range evs {
				byRun[e.RunID] = append(byRun[e.RunID], e)
			}
			return byRun
		}
		b.Logf("read the runs' events (try %d): %v", try, err)
		time.Sleep(time.Second)
	}
	b.Fatalf("read the runs' events: %v", err)
	return nil
}

// printRunGaps prints the -lg.gaps table of the measured runs in byRun.
func printRunGaps(name string, byRun map[string][]events.Event, measured map[string]bool) {
	type gap struct {
		n   int
		sum time.Duration
	}
	gaps := map[string]*gap{}
	var runs int
	var total time.Duration
	for id, run := range byRun {
		if !measured[id] || run[len(run)-1].Type != events.TypeFinished {
			continue
		}
		runs++
		total += run[len(run)-1].Time.Sub(run[0].Time)
		for i := 1; i < len(run); i++ {
			k := string(run[i-1].Type) + " → " + string(run[i].Type)
			if gaps[k] == nil {
				gaps[k] = &gap{}
			}
			gaps[k].n++
			gaps[k].sum += run[i].Time.Sub(run[i-1].Time)
		}
	}
	if runs == 0 {
		return
	}
	per := func(d time.Duration, n int) time.Duration { return (d / time.Duration(n)).Round(10 * time.Microsecond) }
	keys := make([]string, 0, len(gaps))
	for k := range gaps {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return gaps[keys[a]].sum > gaps[keys[b]].sum })
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s: %d runs, mean run %v\n", name, runs, per(total, runs))
	fmt.Fprintf(&sb, "  %-42s %8s %10s %10s\n", "transition", "per run", "mean", "run time")
	for _, k := range keys {
		g := gaps[k]
		fmt.Fprintf(&sb, "  %-42s %8.1f %10v %10v\n", k, float64(g.n)/float64(runs), per(g.sum, g.n), per(g.sum, runs))
	}
	fmt.Print(sb.String())
}

// concList defines a flag holding a comma-separated list of positive
// integers.
func concList(name, usage string) *[]int {
	var list []int
	flag.Func(name, usage, func(v string) error {
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("%q: want a positive integer", f)
			}
			list = append(list, n)
		}
		return nil
	})
	return &list
}
