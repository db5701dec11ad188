package journal_test

import (
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// LOOPGATE_EVENTS remembers a Nats-Msg-Id only briefly (its ids cost the
// server memory and CPU per message). A stored event published again after
// the stream forgot its id must still be stored once: the expected last
// sequence refuses it, and Append and AppendBatch find the events are
// theirs, on one server and on three. The window is shortened here to
// JetStream's least, 100ms, and waited out for real.
func TestARetryAfterTheDuplicateWindowIsStoredOnce(t *testing.T) {
	t.Parallel()
	for _, where := range natstest.Topologies {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			js := natstest.StartTopology(t, where)
			ctx := t.Context()
			st, err := js.Stream(ctx, journal.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			if w := st.CachedInfo().Config.Duplicates; w > 30*time.Second {
				t.Errorf("LOOPGATE_EVENTS remembers ids for %s, want a short window", w)
			}
			cfg := st.CachedInfo().Config
			cfg.Duplicates = 100 * time.Millisecond
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			j, err := journal.New(ctx, js)
			if err != nil {
				t.Fatal(err)
			}
			count := func() uint64 {
				t.Helper()
				st, err := js.Stream(ctx, journal.StreamEvents)
				if err != nil {
					t.Fatal(err)
				}
				return st.CachedInfo().State.Msgs
			}

			one := trail("acme", "run-1", 1, 3)
			last := mustAppend(t, j, 0, one...)
			s1 := mustAppend(t, j, 0, ev("acme", "run-2", 1, events.TypeStarted))
			batch := trail("acme", "run-2", 2, 4)
			blast := mustAppendBatch(t, j, s1, batch...)
			stored := count()
			time.Sleep(time.Second) // the ids are forgotten

			if got, err := j.Append(ctx, 0, one...); err != nil || got != last {
				t.Fatalf("Append again = %d, %v; want %d, nil", got, err, last)
			}
			if got, err := j.AppendBatch(ctx, s1, batch...); err != nil || got != blast {
				t.Fatalf("AppendBatch again = %d, %v; want %d, nil", got, err, blast)
			}
			if n := count(); n != stored {
				t.Errorf("the stream holds %d messages, want %d: a retry was stored twice", n, stored)
			}
			wantRun(t, j, "acme", "run-1", one, last)
		})
	}
}
