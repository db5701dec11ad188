package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// jrnlCall is one append a stress writer made and what it was told.
type jrnlCall struct {
	j      int
	last   uint64
	evs    []events.Event
	atomic bool
	seq    uint64
	err    error
}

// Writers on three journals (one plain, two with group commit, as three
// processes), racing on a few runs with Append and AppendBatch, some with
// stale expectations, some retried as after a lost ack. Every success must
// be stored where it said, every failure must have stored nothing past
// the seq it returned, the trails must be gapless, and each journal's
// (cached) Load must equal a cold one.
func TestRacingWritersOnGroupAndPlainJournalsKeepTheirWord(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	js := []*journal.Journal{env.Journal, groupJournal(t, env, 2), groupJournal(t, env, 2)}
	cold, err := journal.New(t.Context(), env.JS, journal.WithRunCache(0))
	if err != nil {
		t.Fatal(err)
	}
	const runs, writers, rounds = 4, 12, 40
	var (
		mu    sync.Mutex
		calls []*jrnlCall
		wg    sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			ji := w % len(js)
			j := js[ji]
			var stale uint64
			for range rounds {
				run := fmt.Sprintf("stress-%d", rng.IntN(runs))
				have, last, err := j.Load(context.Background(), "acme", run)
				if err != nil {
					t.Error(err)
					return
				}
				if len(have) > 60 {
					continue
				}
				next := uint64(len(have)) + 1
				if rng.IntN(5) == 0 {
					last = stale // an old view
				}
				stale = last
				k := uint64(1 + rng.IntN(3))
				c := &jrnlCall{j: ji, last: last, evs: trail("acme", run, next, next+k-1), atomic: rng.IntN(2) == 0}
				do := func() (uint64, error) {
					if c.atomic {
						return j.AppendBatch(context.Background(), c.last, c.evs...)
					}
					return j.Append(context.Background(), c.last, c.evs...)
				}
				c.seq, c.err = do()
				if c.err == nil && rng.IntN(3) == 0 {
					// A retry as after a lost ack: the same outcome.
					seq, err := do()
					if err != nil || seq != c.seq {
						t.Errorf("retry of %s %d..%d = %d, %v; first said %d", run, next, next+k-1, seq, err, c.seq)
					}
				}
				if c.err != nil && !errors.Is(c.err, journal.ErrConflict) {
					t.Errorf("append: %v", c.err)
				}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	stored := map[string]uint64{} // event id -> stream seq
	for r := range runs {
		run := fmt.Sprintf("stress-%d", r)
		evs, last, err := cold.Load(t.Context(), "acme", run)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("run %s: event %d has seq %d", run, i, e.Seq)
			}
			if _, dup := stored[e.EventID]; dup {
				t.Fatalf("run %s: event %s stored twice", run, e.EventID)
			}
		}
		filter := events.RunFilter("acme", run)
		after := uint64(0)
		for range evs {
			seq, _, err := streamSeqAfter(t, env, filter, after)
			if err != nil {
				t.Fatal(err)
			}
			after = seq
		}
		if after != last {
			t.Fatalf("run %s: last %d, walked to %d", run, last, after)
		}
		// Map event ids to their stream seqs.
		after = 0
		for _, e := range evs {
			seq, id, err := streamSeqAfter(t, env, filter, after)
			if err != nil {
				t.Fatal(err)
			}
			if id != e.EventID {
				t.Fatalf("run %s: walk found %s, Load %s", run, id, e.EventID)
			}
			stored[e.EventID] = seq
			after = seq
		}
		for i, j := range js {
			got, glast, err := j.Load(t.Context(), "acme", run)
			if err != nil {
				t.Fatal(err)
			}
			if glast != last || len(got) != len(evs) {
				t.Fatalf("journal %d: Load(%s) = %d events to %d, cold %d to %d", i, run, len(got), glast, len(evs), last)
			}
			for k := range got {
				if got[k].EventID != evs[k].EventID {
					t.Fatalf("journal %d: Load(%s) event %d = %s, cold %s", i, run, k, got[k].EventID, evs[k].EventID)
				}
			}
		}
	}
	for _, c := range calls {
		lastEv := c.evs[len(c.evs)-1]
		if c.err == nil {
			for _, e := range c.evs {
				if _, ok := stored[e.EventID]; !ok {
					t.Errorf("journal %d said %s/%d stored at %d (atomic %v), it is not", c.j, e.RunID, e.Seq, c.seq, c.atomic)
				}
			}
			if got := stored[lastEv.EventID]; got != c.seq {
				t.Errorf("journal %d said %s/%d stored at %d, it is at %d", c.j, lastEv.RunID, lastEv.Seq, c.seq, got)
			}
			continue
		}
		for _, e := range c.evs {
			if seq, ok := stored[e.EventID]; ok && seq > c.seq {
				t.Errorf("journal %d failed %s/%d (atomic %v, returned %d: %v), yet it is stored at %d", c.j, e.RunID, e.Seq, c.atomic, c.seq, c.err, seq)
			}
		}
	}
}

// streamSeqAfter returns the stream seq and event id of the first event
// on filter after stream seq after.
func streamSeqAfter(t *testing.T, env *natstest.Env, filter string, after uint64) (uint64, string, error) {
	t.Helper()
	st, err := env.JS.Stream(t.Context(), journal.StreamEvents)
	if err != nil {
		return 0, "", err
	}
	m, err := st.GetMsg(t.Context(), after+1, jetstream.WithGetMsgSubject(filter))
	if err != nil {
		return 0, "", err
	}
	var e struct {
		EventID string `json:"event_id"`
	}
	err = json.Unmarshal(m.Data, &e)
	return m.Sequence, e.EventID, err
}
