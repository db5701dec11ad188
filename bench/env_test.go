package bench_test

// Helpers shared by the benchmarks of this package: a server per fsync
// setting, simulated runs producing realistic events, spreading a fixed
// amount of work over concurrent writers, and reporting rates.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/internal/wait"
	"github.com/loopgate/loopgate/journal"
)

// syncSettings are the embedded server's fsync settings every benchmark
// runs under: "always" (loopgate's default: fsync before each ack) and
// "2m" (JetStream's default: fsync every two minutes).
var syncSettings = []string{"always", "2m"}

// forEachSync runs fn as the sub-benchmark sync=<setting> for each of
// syncSettings, with a fresh embedded server (file store in a temp dir,
// loopgate's layout ensured, in-process connection) started with that
// setting and shared by fn's own sub-benchmarks.
func forEachSync(b *testing.B, fn func(b *testing.B, env *natstest.Env)) {
	for _, s := range syncSettings {
		b.Run("sync="+s, func(b *testing.B) {
			fn(b, startServer(b, s))
		})
	}
}

// startServer starts an embedded server with the given fsync setting
// ("always" or a duration), quiet below errors.
func startServer(b *testing.B, syncInterval string) *natstest.Env {
	b.Helper()
	return natstest.StartWith(b, natstest.Options{SyncInterval: syncInterval})
}

// eventBytes is the size of the JSON envelope of the events simRun makes:
// a typical small observation.
const eventBytes = 300

// simRun is one simulated run: its events all have one type, so the run
// is one subject, and each is about eventBytes of JSON. last is the
// stream seq of its last event, for the next conditional append.
type simRun struct {
	tenant, id string
	seq, last  uint64
	pad        string
}

// newRun makes a run with a fresh id in tenant "bench".
func newRun() *simRun {
	r := &simRun{tenant: "bench", id: uuid.NewString()}
	e := r.event(0, "")
	data, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	r.pad = strings.Repeat("x", max(eventBytes-len(data), 0))
	return r
}

// next returns the run's next n events (seqs following the last ones
// returned).
func (r *simRun) next(n int) []events.Event {
	evs := make([]events.Event, n)
	for i := range evs {
		r.seq++
		evs[i] = r.event(r.seq, r.pad)
	}
	return evs
}

func (r *simRun) event(seq uint64, pad string) events.Event {
	return events.Event{
		EventID: events.UUIDv7.NewEventID(),
		RunID:   r.id,
		Tenant:  r.tenant,
		Seq:     seq,
		Type:    events.TypeObserved,
		Time:    time.Now().UTC(),
		Step:    int(seq/4 + 1),
		CallID:  "s1c1",
		Tool:    "lookup_complaints",
		Data:    json.RawMessage(fmt.Sprintf(`{"observation":%q,"bytes":%d,"truncated":false}`, pad, len(pad))),
	}
}

// appendOne appends the run's next event with journal.Append.
func (r *simRun) appendOne(ctx context.Context, j *journal.Journal) error {
	last, err := j.Append(ctx, r.last, r.next(1)...)
	r.last = last
	return err
}

// appendRaw appends the run's next event as issue 4 defines a raw
// conditional append: one publish on the run's one subject carrying that
// subject's expected last sequence, nothing else (no Nats-Msg-Id, no
// expected stream, no expectation against the run's wildcard), the event
// encoded as the journal stores it. It asks again while a replicated
// stream answers 10164 without a number, as journal.Append and loopgate
// bench --raw do. The raw lines used to append with journal.Append,
// whose wildcard expectation and headers cost the server 10-17 % more at
// 2m: every x raw was that much too kind.
func (r *simRun) appendRaw(ctx context.Context, js jetstream.JetStream) error {
	e := r.next(1)[0]
	payload, err := e.Encode()
	if err != nil {
		return err
	}
	subject := e.Subject()
	for try := 1; ; try++ {
		ack, err := js.Publish(ctx, subject, payload, jetstream.WithExpectLastSequencePerSubject(r.last))
		if err == nil {
			r.last = ack.Sequence
			return nil
		}
		var apiErr *jetstream.APIError
		if try >= 4 || !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			return err
		}
		if werr := wait.For(ctx, time.Duration(try)*time.Millisecond); werr != nil {
			return err
		}
	}
}

// appendBatch appends the run's next n events with journal.AppendBatch.
func (r *simRun) appendBatch(ctx context.Context, j *journal.Journal, n int) error {
	last, err := j.AppendBatch(ctx, r.last, r.next(n)...)
	r.last = last
	return err
}

// spread performs ops operations with conc goroutines, goroutine w
// calling op(ctx, w) for its share (ops/conc, the first ops%conc one
// more), and returns the wall-clock time from the start of the first to
// the end of the last, with b's timer running only then. It fails b on
// the first error, after every goroutine has stopped.
func spread(b *testing.B, conc, ops int, op func(ctx context.Context, worker int) error) time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := make(chan struct{})
	for w := range conc {
		share := ops / conc
		if w < ops%conc {
			share++
		}
		wg.Go(func() {
			<-start
			for range share {
				if err := op(ctx, w); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("writer %d: %w", w, err); cancel() })
					return
				}
			}
		})
	}
	// ResetTimer does not start a stopped timer (a warm-up spread stops
	// it): start it, or b.N would be scaled on a timer that never ran.
	b.ResetTimer()
	b.StartTimer()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return elapsed
}

// processCPU is the CPU time this process has used, user and system, all
// goroutines (the embedded server's too).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rate is count per second over elapsed.
func rate(count int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(count) / elapsed.Seconds()
}

// reportRates reports, for each unit, its count per second over elapsed
// (units such as "events/s", "appends/s").
func reportRates(b *testing.B, elapsed time.Duration, counts map[string]int) {
	b.Helper()
	for unit, n := range counts {
		b.ReportMetric(rate(n, elapsed), unit)
	}
}
