package journal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/internal/wait"
	"github.com/loopgate/loopgate/journal"
)

// On a replicated stream each writer of its own run appends without a
// single refusal: the leader's "subject in process" answer to an append
// that follows the writer's previous one too closely is asked again, not
// reported as a conflict. Two writers racing on one run still see exactly
// one winner per event, and the loser a conflict once the stream has
// decided (an answer "still in process" is asked again, as a worker does).
func TestReplicatedAppends(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t)
	ctx := t.Context()
	j, err := journal.New(ctx, c.JS)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("own runs", func(t *testing.T) {
		const writers, each = 16, 40
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				run := fmt.Sprintf("own-%d", w)
				var last uint64
				for _, e := range trail("acme", run, 1, each) {
					var err error
					if last, err = j.Append(ctx, last, e); err != nil {
						errs <- fmt.Errorf("%s event %d: %w", run, e.Seq, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("one run, two writers", func(t *testing.T) {
		last := mustAppend(t, j, 0, ev("acme", "raced", 1, events.TypeStarted))
		for seq := uint64(2); seq <= 20; seq++ {
			var (
				wg   sync.WaitGroup
				won  = make(chan uint64, 2)
				lost = make(chan error, 2)
			)
			for range 2 {
				wg.Go(func() {
					s, err := appendDecided(ctx, j, last, ev("acme", "raced", seq, events.TypeProposed))
					if err != nil {
						lost <- err
						return
					}
					won <- s
				})
			}
			wg.Wait()
			close(won)
			close(lost)
			if len(won) != 1 {
				t.Fatalf("event %d: %d writers won, want 1", seq, len(won))
			}
			for err := range lost {
				if !errors.Is(err, journal.ErrConflict) {
					t.Fatalf("event %d: the loser got %v, want a conflict", seq, err)
				}
			}
			last = <-won
		}
		evs, _, err := j.Load(ctx, "acme", "raced")
		if err != nil || len(evs) != 20 {
			t.Fatalf("Load = %d events, %v; want 20", len(evs), err)
		}
	})
}

// appendDecided appends e as a worker does: an answer "still in process"
// (the other writer's publish is being proposed and has not committed) is
// neither a win nor a loss, so the same append is asked again until the
// stream decides.
func appendDecided(ctx context.Context, j *journal.Journal, last uint64, e events.Event) (uint64, error) {
	for {
		s, err := j.Append(ctx, last, e)
		if !errors.Is(err, journal.ErrInProcess) {
			return s, err
		}
		if werr := wait.For(ctx, 10*time.Millisecond); werr != nil {
			return 0, fmt.Errorf("%w (after %w)", werr, err)
		}
	}
}

// Group commit on a replicated stream (an operator's --group-commit on
// with --replicas 3): waiting runs share a batch, and a stale share makes
// the batch fall back to single appends with the same outcomes as on one
// server.
func TestGroupCommitOnAReplicatedStream(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t)
	j, err := journal.New(t.Context(), c.JS, journal.WithGroupCommit(2))
	if err != nil {
		t.Fatal(err)
	}
	appends := newRuns("r3", 8, 3)
	for i, a := range appends {
		a.atomic = i%2 == 0
	}
	flyTogether(t, j, appends)
	wantLanded(t, j, appends)
	if st := j.GroupStats(); st.Batches != 1 || st.MaxShare != 8 || st.Refused != 0 {
		t.Fatalf("group stats = %+v, want one batch of the 8 runs", st)
	}

	// Next steps of four runs, one of them from a writer that missed an
	// event: it conflicts, the other three land.
	moved := appends[0].evs[0].RunID
	stale := appends[0].seq
	mustAppend(t, j, stale, ev("acme", moved, 4, events.TypeProposed))
	next := []*groupAppend{{last: stale, evs: trail("acme", moved, 4, 4)}}
	for _, a := range appends[1:4] {
		next = append(next, &groupAppend{last: a.seq, evs: trail("acme", a.evs[0].RunID, 4, 5)})
	}
	flyTogether(t, j, next)
	if !errors.Is(next[0].err, journal.ErrConflict) {
		t.Fatalf("stale share = %v, want a conflict", next[0].err)
	}
	for _, a := range next[1:] {
		if a.err != nil {
			t.Fatalf("append of %s: %v", a.evs[0].RunID, a.err)
		}
	}
	if st := j.GroupStats(); st.Refused != 1 {
		t.Fatalf("group stats = %+v, want the second batch refused", st)
	}
}

// A process started without --replicas in a cluster's pool runs Ensure
// with one replica. It must not lower the replicas of the streams and
// buckets the cluster's processes made at three: the audit log would live
// on one server.
func TestEnsureNeverLowersReplicas(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t)
	ctx := t.Context()
	if err := journal.Ensure(ctx, c.JS, journal.Layout{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{journal.StreamEvents, journal.StreamWork, journal.StreamApprovals,
		"KV_" + journal.BucketIdempotency, "KV_" + journal.BucketApprovals, "KV_" + journal.BucketRuns} {
		st, err := c.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s has %d replicas after Ensure at one, want 3 kept", name, n)
		}
	}
}

// A read right after a server came back, while it catches up, is whole:
// the read's consumer may be put on that server, which has fewer of the
// run's events than the leader says there are, and the read used to come
// back short (a worker found a gap in a healthy run; an audit could show a
// trail without its last events). It is completed from the leader.
func TestAReadOnACatchingUpServerIsWhole(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t)
	ctx := t.Context()
	j, err := journal.New(ctx, c.JS, journal.WithRunCache(0))
	if err != nil {
		t.Fatal(err)
	}
	const runs, each = 40, 120
	c.Shutdown(2)
	var wg sync.WaitGroup
	for r := range runs {
		wg.Go(func() {
			var last uint64
			for _, e := range trail("acme", fmt.Sprintf("behind-%d", r), 1, each) {
				var err error
				if last, err = j.Append(ctx, last, e); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	c.Restart(t, 2)
	for round := range 3 {
		for r := range runs {
			wg.Go(func() {
				run := fmt.Sprintf("behind-%d", r)
				evs, err := j.Replay(ctx, events.RunFilter("acme", run))
				if err != nil || len(evs) != each {
					t.Errorf("round %d: replay %s: %d events (%v), want %d", round, run, len(evs), err, each)
				}
				loaded, _, err := j.Load(ctx, "acme", run)
				if err != nil || len(loaded) != each {
					t.Errorf("round %d: load %s: %d events (%v), want %d", round, run, len(loaded), err, each)
				}
			})
		}
		wg.Wait()
	}
}
