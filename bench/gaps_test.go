package bench_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/nats-io/nats.go/jetstream"
)

var printGaps = flag.Bool("lg.gaps", false, "BenchmarkLoopgate: print, for each happy-path line, where a run's wall-clock time goes (the time between consecutive events, by transition)")

// reportGaps prints where the wall-clock time of the measured runs went:
// for each transition between consecutive events of a run (parked →
// approved, say), how often it happened and its mean time, and that time
// summed per run. The times are the events' own (set by the pool that
// appended them, one clock per process). It reads the events stored after
// stream sequence from, and counts the runs whose trail it holds from
// started to finished.
func reportGaps(ctx context.Context, b *testing.B, js jetstream.JetStream, name string, from uint64) {
	b.Helper()
	stream, err := js.Stream(ctx, journal.StreamEvents)
	if err != nil {
		b.Fatal(err)
	}
	last := stream.CachedInfo().State.LastSeq
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from + 1})
	if err != nil {
		b.Fatal(err)
	}
	byRun := map[string][]events.Event{}
	for seq := from; seq < last; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				b.Fatal(err)
			}
			seq = meta.Sequence.Stream
			var e events.Event
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				b.Fatal(err)
			}
			if e.Seq == 1 && e.Type == events.TypeStarted || len(byRun[e.RunID]) > 0 {
				byRun[e.RunID] = append(byRun[e.RunID], e)
			}
		}
		if err := batch.Error(); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			b.Fatalf("gaps: no events after stream seq %d, want up to %d", seq, last)
		}
	}
	type gap struct {
		n   int
		sum time.Duration
	}
	gaps := map[string]*gap{}
	var runs int
	var total time.Duration
	for _, run := range byRun {
		if run[len(run)-1].Type != events.TypeFinished {
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
