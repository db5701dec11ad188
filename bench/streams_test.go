package bench_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/natstest"
)

// BenchmarkStreamsSideBySide measures what one server stores when its
// writes are spread over several streams: 64 writers publish ~300-byte
// messages, each to its own subject, the subjects spread evenly over 1, 2,
// 4 or 8 file streams. With sync always a stream fsyncs its writes one
// after another, while the disk takes fsyncs of different files side by
// side: on the 2-vCPU VM of docs/benchmarks.md one stream stored about
// 4,200 messages/s, two 6,800 and four 7,700 together. It is why a run's
// writes to several streams (the buckets, the work stream, the events)
// are not bounded by one stream's fsync rate, and why group commit helps
// the events stream most: it carries most of a run's writes.
func BenchmarkStreamsSideBySide(b *testing.B) {
	forEachSync(b, func(b *testing.B, env *natstest.Env) {
		for _, streams := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("streams=%d/conc=64", streams), func(b *testing.B) {
				prefix := fmt.Sprintf("SIDE_%d_%d", streams, b.N)
				for i := range streams {
					name := fmt.Sprintf("%s_%d", prefix, i)
					if _, err := env.JS.CreateOrUpdateStream(b.Context(), jetstream.StreamConfig{
						Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage,
					}); err != nil {
						b.Fatal(err)
					}
				}
				payload := make([]byte, eventBytes)
				const conc = 64
				elapsed := spread(b, conc, b.N, func(ctx context.Context, w int) error {
					_, err := env.JS.Publish(ctx, fmt.Sprintf("%s_%d.w%d", prefix, w%streams, w), payload)
					return err
				})
				reportRates(b, elapsed, map[string]int{"msgs/s": b.N})
			})
		}
	})
}
