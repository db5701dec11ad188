package journal_test

import (
	"fmt"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
)

// BenchmarkAppend appends one event per op to a run, chaining the
// expectation, with each fsync policy.
func BenchmarkAppend(b *testing.B) {
	for _, sync := range []string{"always", "2m"} {
		b.Run("sync="+sync, func(b *testing.B) {
			env := natstest.StartWith(b, natstest.Options{SyncInterval: sync})
			var last uint64
			seq := uint64(0)
			for b.Loop() {
				seq++
				var err error
				last, err = env.Journal.Append(b.Context(), last, ev("acme", "bench", seq, events.TypeObserved))
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoad loads a run of n events among other runs' events.
func BenchmarkLoad(b *testing.B) {
	for _, n := range []uint64{0, 1, 10, 100} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			env := natstest.StartWith(b, natstest.Options{SyncInterval: "2m"})
			if n > 0 {
				mustAppend(b, env.Journal, 0, trail("acme", "run", 1, n)...)
			}
			mustAppend(b, env.Journal, 0, trail("acme", "noise", 1, 100)...)
			for b.Loop() {
				evs, _, err := env.Journal.Load(b.Context(), "acme", "run")
				if err != nil || uint64(len(evs)) != n {
					b.Fatalf("Load = %d events, %v", len(evs), err)
				}
			}
		})
	}
}
