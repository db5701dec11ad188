package journal_test

import (
	"encoding/json"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// A run read long after it was written (an approval wake-up hours later, an
// audit) must not make the server look through everything stored since:
// a pull for more messages than the run has does, from the run's last
// event to the end of the stream (and past 64K subjects nats-server cannot
// skip blocks for a wildcard filter), which with 200,000 later events made
// one read of a 37-event run cost 45 ms instead of 0.9. So each read asks
// for exactly the events it lacks; the test counts what the pulls ask for.
func TestReadingAnOldRunAsksForExactlyItsEvents(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	old := trail("acme", "old", 1, 40) // past the message-get tail
	last := mustAppend(t, env.Journal, 0, old...)
	for i := range 5 { // later runs
		var l uint64
		for _, e := range trail("acme", "later-"+string(rune('a'+i)), 1, 3) {
			l = mustAppend(t, env.Journal, l, e)
		}
	}

	pulls, err := env.Conn.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT." + journal.StreamEvents + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	asked := func() (n int) {
		t.Helper()
		for {
			m, err := pulls.NextMsg(0)
			if err != nil {
				return n
			}
			var req struct {
				Batch int `json:"batch"`
			}
			if err := json.Unmarshal(m.Data, &req); err != nil {
				t.Fatalf("pull request %q: %v", m.Data, err)
			}
			n += req.Batch
		}
	}
	flush := func() {
		t.Helper()
		if err := env.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	cold := openJournal(t, env, journal.WithRunCache(0))
	wantRun(t, cold, "acme", "old", old, last)
	flush()
	if n := asked(); n != len(old)-1 {
		t.Errorf("loading a finished %d-event run pulled for %d messages, want %d (the last one comes from a last-by-subject get)", len(old), n, len(old)-1)
	}

	// A parked run decided later: its newest event comes after the others'.
	more := ev("acme", "old", 41, events.TypeApproved)
	last = mustAppend(t, env.Journal, last, more)
	wantRun(t, cold, "acme", "old", append(old, more), last)
	flush()
	if n := asked(); n != len(old) {
		t.Errorf("loading a run whose last event came later pulled for %d messages, want %d", n, len(old))
	}

	got, err := cold.Replay(t.Context(), events.RunFilter("acme", "old"))
	if err != nil || len(got) != len(old)+1 {
		t.Fatalf("Replay = %d events, %v; want %d", len(got), err, len(old)+1)
	}
	flush()
	if n := asked(); n != len(old)+1 {
		t.Errorf("replaying a run pulled for %d messages, want %d", n, len(old)+1)
	}
}
