package journal_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// countReads counts what the journal asks the server while reading: every
// message-get request on the events stream and every consumer created on
// it (a core subscription sees the requests as the server does).
type readCounter struct{ gets, consumers *nats.Subscription }

func countReads(t *testing.T, nc *nats.Conn) *readCounter {
	t.Helper()
	gets, err := nc.SubscribeSync("$JS.API.STREAM.MSG.GET." + journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	consumers, err := nc.SubscribeSync("$JS.API.CONSUMER.CREATE." + journal.StreamEvents + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gets.Unsubscribe(); _ = consumers.Unsubscribe() })
	return &readCounter{gets: gets, consumers: consumers}
}

// take returns the requests seen since the last take. After the flush the
// server has sent them all, and the client queued them in the
// subscriptions (synchronous ones: a callback could still be running).
func (c *readCounter) take(t *testing.T, nc *nats.Conn) (gets, consumers int64) {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	drain := func(sub *nats.Subscription) int64 {
		n, _, err := sub.Pending()
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := sub.NextMsg(time.Second); err != nil {
				t.Fatal(err)
			}
		}
		return int64(n)
	}
	return drain(c.gets), drain(c.consumers)
}

func openJournal(t *testing.T, env *natstest.Env, opts ...journal.Option) *journal.Journal {
	t.Helper()
	j, err := journal.New(t.Context(), env.JS, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// A run this journal wrote last is read with one request (its last
// event), and what it returns is exactly what a journal without a cache
// reads from the stream.
func TestLoadOfARunJustWrittenCostsOneRequest(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	j := openJournal(t, env)
	cold := openJournal(t, env, journal.WithRunCache(0))

	evs := trail("acme", "cached", 1, 6)
	last := mustAppend(t, j, 0, evs[:1]...)
	last = mustAppend(t, j, last, evs[1:4]...)
	last, err := j.AppendBatch(ctx, last, evs[4:]...)
	if err != nil {
		t.Fatal(err)
	}

	reads := countReads(t, env.Conn)
	got, gotLast, err := j.Load(ctx, "acme", "cached")
	if err != nil {
		t.Fatal(err)
	}
	if gets, cons := reads.take(t, env.Conn); gets != 1 || cons != 0 {
		t.Errorf("Load of a run just written: %d message-gets, %d consumers; want 1, 0", gets, cons)
	}
	want, wantLast, err := cold.Load(ctx, "acme", "cached")
	if err != nil {
		t.Fatal(err)
	}
	if gets, _ := reads.take(t, env.Conn); gets != 6 {
		t.Errorf("Load without a cache: %d message-gets, want 6 (the last event, then one per event before it)", gets)
	}
	if gotLast != last || wantLast != last {
		t.Errorf("last stream seq: cached %d, cold %d, appended %d", gotLast, wantLast, last)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cached Load differs from the stream:\n got %+v\nwant %+v", got, want)
	}

	// What Load returns is the caller's: changing it does not change the
	// cache.
	got[0].Type, got = events.TypeFinished, append(got[:2], got[3:]...)
	wantRun(t, j, "acme", "cached", evs, last)

	// Appends after a read from the cache extend what it decoded; the
	// next read is again one request and again equals the stream.
	more := trail("acme", "cached", 7, 8)
	last = mustAppend(t, j, last, more...)
	reads.take(t, env.Conn)
	got, _, err = j.Load(ctx, "acme", "cached")
	if err != nil {
		t.Fatal(err)
	}
	if gets, cons := reads.take(t, env.Conn); gets != 1 || cons != 0 {
		t.Errorf("Load after more appends: %d message-gets, %d consumers; want 1, 0", gets, cons)
	}
	want, _, err = cold.Load(ctx, "acme", "cached")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 || !reflect.DeepEqual(got, want) {
		t.Errorf("cached Load after more appends differs from the stream:\n got %+v\nwant %+v", got, want)
	}
}

// Another writer's events after the cached ones are read from the stream:
// a short tail with a get per event, a long one with a consumer.
func TestLoadReadsWhatAnotherWriterAppended(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	a, b := openJournal(t, env), openJournal(t, env)

	evs := trail("acme", "shared", 1, 60)
	last := mustAppend(t, a, 0, evs[:3]...)
	last = mustAppend(t, b, last, evs[3:5]...) // short tail for a
	reads := countReads(t, env.Conn)
	wantRun(t, a, "acme", "shared", evs[:5], last)
	if gets, cons := reads.take(t, env.Conn); gets != 2 || cons != 0 {
		t.Errorf("short tail of 2: %d gets, %d consumers; want 2 (last, one more), 0", gets, cons)
	}

	last = mustAppend(t, b, last, evs[5:]...) // long tail for a
	wantRun(t, a, "acme", "shared", evs, last)
	if gets, cons := reads.take(t, env.Conn); gets != 1 || cons != 1 {
		t.Errorf("long tail of 55: %d gets, %d consumers; want 1 (last), 1", gets, cons)
	}

	// a's append after its stale view conflicts, and the run is read
	// again in full, not served from what a knew.
	stale := ev("acme", "shared", 6, events.TypeProposed)
	if _, err := a.Append(ctx, last-1, stale); err == nil {
		t.Fatal("append on a stale last seq succeeded")
	}
	wantRun(t, a, "acme", "shared", evs, last)
}

// A finished run is not kept, and the cache stays within its budget.
func TestRunCacheKeepsWithinItsBudget(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	// Each event costs about 300 bytes: a 2 KB budget holds one run of 5.
	j := openJournal(t, env, journal.WithRunCache(2<<10))
	reads := countReads(t, env.Conn)

	runs := []string{"r1", "r2"}
	lasts := map[string]uint64{}
	for _, r := range runs {
		lasts[r] = mustAppend(t, j, 0, trail("acme", r, 1, 5)...)
	}
	reads.take(t, env.Conn)
	if _, _, err := j.Load(ctx, "acme", "r2"); err != nil {
		t.Fatal(err)
	}
	if gets, _ := reads.take(t, env.Conn); gets != 1 {
		t.Errorf("most recent run: %d gets, want 1 (cached)", gets)
	}
	if _, _, err := j.Load(ctx, "acme", "r1"); err != nil {
		t.Fatal(err)
	}
	if gets, _ := reads.take(t, env.Conn); gets != 5 {
		t.Errorf("run pushed out of the cache: %d gets, want 5 (read again)", gets)
	}

	fin := ev("acme", "r1", 6, events.TypeFinished)
	mustAppend(t, j, lasts["r1"], fin)
	reads.take(t, env.Conn)
	if _, _, err := j.Load(ctx, "acme", "r1"); err != nil {
		t.Fatal(err)
	}
	if gets, _ := reads.take(t, env.Conn); gets != 6 {
		t.Errorf("finished run: %d gets, want 6 (not cached)", gets)
	}
}
