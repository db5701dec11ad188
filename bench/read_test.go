package bench_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// BenchmarkLoadAfterLaterEvents reads one 37-event run, the size of the
// CityOps happy path, with a journal that has not cached it (a process
// that did not write it), after `later` events of other runs were stored
// behind it: what an approval wake-up, an expiry after the run's end or an
// audit costs long after the run. later=200000 has about 110,000 subjects
// in the stream, past the 64K from where nats-server no longer uses its
// per-subject index to skip blocks for a wildcard filter. A read that asks
// for more messages than the run has costs time in proportion to later.
func BenchmarkLoadAfterLaterEvents(b *testing.B) {
	env := natstest.StartWith(b, natstest.Options{SyncInterval: "2m"})
	ctx := b.Context()
	run := newRun()
	if err := run.appendTyped(ctx, env.Journal, 37); err != nil {
		b.Fatal(err)
	}
	cold, err := journal.New(ctx, env.JS, journal.WithRunCache(0))
	if err != nil {
		b.Fatal(err)
	}
	stored := 0
	for _, later := range []int{0, 20_000, 200_000} {
		if err := appendOtherRuns(ctx, env.Journal, later-stored); err != nil {
			b.Fatal(err)
		}
		stored = later
		b.Run(fmt.Sprintf("later=%d", later), func(b *testing.B) {
			for b.Loop() {
				evs, _, err := cold.Load(ctx, run.tenant, run.id)
				if err != nil || len(evs) != 37 {
					b.Fatalf("Load = %d events, %v; want 37", len(evs), err)
				}
			}
		})
	}
}

// typedEvents are the types appendTyped cycles through: five subjects a
// run, as a real run has several.
var typedEvents = []events.Type{events.TypeProposed, events.TypeValidated, events.TypeExecuting, events.TypeExecuted, events.TypeObserved}

// appendTyped appends the run's next n events one by one, their types
// cycling through typedEvents.
func (r *simRun) appendTyped(ctx context.Context, j *journal.Journal, n int) error {
	for range n {
		evs := r.next(1)
		evs[0].Type = typedEvents[int(evs[0].Seq)%len(typedEvents)]
		last, err := j.Append(ctx, r.last, evs...)
		if err != nil {
			return err
		}
		r.last = last
	}
	return nil
}

// appendOtherRuns stores about n events of fresh 10-event runs, 64 runs
// at a time.
func appendOtherRuns(ctx context.Context, j *journal.Journal, n int) error {
	const conc, perRun = 64, 10
	for done := 0; done < n; done += conc * perRun {
		errs := make(chan error, conc)
		for range conc {
			go func() { errs <- newRun().appendTyped(ctx, j, perRun) }()
		}
		for range conc {
			if err := <-errs; err != nil {
				return err
			}
		}
	}
	return nil
}
