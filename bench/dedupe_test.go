package bench_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/loopgate/loopgate/journal"
)

var windowAppends = flag.Int("lg.window-appends", 0, "BenchmarkDuplicateWindow: conditional appends per duplicate window measured (0: skip it); 3000000 takes one to two minutes each")

// BenchmarkDuplicateWindow measures what LOOPGATE_EVENTS's Nats-Msg-Id
// window costs under a sustained load at 2m: 64 writers append
// -lg.window-appends events through journal.Append, with the window
// JetStream defaults to (2m) and with loopgate's (10s). The server keeps
// every id of the window in memory; the CPU an append costs is reported
// for each quarter of the appends, and the heap in use after them. Not in
// make bench (it takes minutes): go test -run '^$' -bench DuplicateWindow
// -benchtime 1x -lg.window-appends 3000000 ./bench.
func BenchmarkDuplicateWindow(b *testing.B) {
	if *windowAppends <= 0 {
		b.Skip("set -lg.window-appends")
	}
	const conc = 64
	for _, window := range []time.Duration{2 * time.Minute, 10 * time.Second} {
		b.Run("window="+window.String(), func(b *testing.B) {
			env := startServer(b, "2m")
			st, err := env.JS.Stream(b.Context(), journal.StreamEvents)
			if err != nil {
				b.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			cfg.Duplicates = window
			if _, err := env.JS.UpdateStream(b.Context(), cfg); err != nil {
				b.Fatal(err)
			}
			runs := make([]*simRun, conc)
			for w := range runs {
				runs[w] = newRun()
			}
			quarter := b.N * *windowAppends / 4
			var (
				elapsed time.Duration
				cpu     [4]float64
			)
			for q := range cpu {
				cpu0 := processCPU()
				elapsed += spread(b, conc, quarter, func(ctx context.Context, w int) error {
					return runs[w].appendOne(ctx, env.Journal)
				})
				cpu[q] = cpuPer(processCPU()-cpu0, quarter)
			}
			// After the last spread: each resets the timer, and with it
			// the metrics reported so far.
			for q, c := range cpu {
				b.ReportMetric(c, fmt.Sprintf("cpu-us/append-q%d", q+1))
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(rate(4*quarter, elapsed), "appends/s")
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		})
	}
}
