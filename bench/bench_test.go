package bench_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// concurrencies are the numbers of runs written at once: one writer, and
// 64 writers each appending to its own run.
var concurrencies = []int{1, 64}

// batchSizes are the events per AppendBatch: a step's executed, observed
// and the next proposed, say; and a larger group for the trend.
var batchSizes = []int{3, 10}

// BenchmarkConditionalAppend is the physical limit on the embedded server:
// conditional appends (journal.Append of one ~300-byte event, with
// Nats-Expected-Last-Subject-Sequence on the run's subject filter and
// Nats-Msg-Id <run_id>/<seq>), each writer on its own run, one op per
// append. appends/s = events/s.
func BenchmarkConditionalAppend(b *testing.B) {
	forEachSync(b, func(b *testing.B, env *natstest.Env) {
		for _, conc := range concurrencies {
			b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
				benchAppends(b, env.Journal, conc, 1)
			})
		}
	})
}

// BenchmarkConditionalAppendBatch is BenchmarkConditionalAppend with the
// events grouped: one op is one journal.AppendBatch of size events (one
// atomic batch, one round trip, conditional on the run's last sequence).
// Its events/s against BenchmarkConditionalAppend's is the gain (or the
// cost) of batching on a single server.
func BenchmarkConditionalAppendBatch(b *testing.B) {
	forEachSync(b, func(b *testing.B, env *natstest.Env) {
		for _, size := range batchSizes {
			for _, conc := range concurrencies {
				b.Run(fmt.Sprintf("batch=%d/conc=%d", size, conc), func(b *testing.B) {
					benchAppends(b, env.Journal, conc, size)
				})
			}
		}
	})
}

// BenchmarkReplicatedAppend is both of the above on a stream with three
// replicas (three servers in this process, see startCluster): batch=1 is
// journal.Append of one event, larger batches are AppendBatch. There the
// server stages a batch in memory and proposes it as one, where a single
// server stages it on disk.
func BenchmarkReplicatedAppend(b *testing.B) {
	forEachSyncR3(b, func(b *testing.B, j *journal.Journal) {
		for _, size := range append([]int{1}, batchSizes...) {
			for _, conc := range concurrencies {
				b.Run(fmt.Sprintf("batch=%d/conc=%d", size, conc), func(b *testing.B) {
					benchAppends(b, j, conc, size)
				})
			}
		}
	})
}

// benchAppends performs b.N appends of size events each (Append for one,
// AppendBatch for more) spread over conc writers, each on its own run, and
// reports events/s and appends/s (round trips). ns/op is per append.
func benchAppends(b *testing.B, j *journal.Journal, conc, size int) {
	runs := make([]*simRun, conc)
	for w := range runs {
		runs[w] = newRun()
	}
	elapsed := spread(b, conc, b.N, func(ctx context.Context, w int) error {
		if size == 1 {
			return runs[w].appendOne(ctx, j)
		}
		return runs[w].appendBatch(ctx, j, size)
	})
	reportRates(b, elapsed, map[string]int{"events/s": b.N * size, "appends/s": b.N})
}
