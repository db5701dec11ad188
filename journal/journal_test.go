package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var eventIDs atomic.Int64

// ev makes the seq-th event of a run, with a unique event id.
func ev(tenant, runID string, seq uint64, typ events.Type) events.Event {
	return events.Event{
		EventID: fmt.Sprintf("ev-%d", eventIDs.Add(1)),
		RunID:   runID,
		Tenant:  tenant,
		Seq:     seq,
		Type:    typ,
		Time:    time.Date(2026, 1, 2, 3, 4, 5, int(seq), time.UTC),
		Step:    int(seq),
		Data:    json.RawMessage(fmt.Sprintf(`{"n":%d}`, seq)),
	}
}

// trail makes events from..to of a run.
func trail(tenant, runID string, from, to uint64) []events.Event {
	var out []events.Event
	for s := from; s <= to; s++ {
		typ := events.TypeProposed
		if s == 1 {
			typ = events.TypeStarted
		}
		out = append(out, ev(tenant, runID, s, typ))
	}
	return out
}

func mustAppend(t testing.TB, j *journal.Journal, last uint64, evs ...events.Event) uint64 {
	t.Helper()
	seq, err := j.Append(context.Background(), last, evs...)
	if err != nil {
		t.Fatalf("Append(%d, %d events): %v", last, len(evs), err)
	}
	return seq
}

// wantRun checks that Load returns exactly want, in order, and lastSeq.
func wantRun(t *testing.T, j *journal.Journal, tenant, runID string, want []events.Event, wantLast uint64) {
	t.Helper()
	got, last, err := j.Load(t.Context(), tenant, runID)
	if err != nil {
		t.Fatalf("Load(%s/%s): %v", tenant, runID, err)
	}
	if last != wantLast {
		t.Errorf("Load(%s/%s) last stream seq = %d, want %d", tenant, runID, last, wantLast)
	}
	if len(got) != len(want) {
		t.Fatalf("Load(%s/%s) = %d events, want %d", tenant, runID, len(got), len(want))
	}
	for i := range want {
		if got[i].EventID != want[i].EventID || got[i].Seq != uint64(i+1) || !got[i].Time.Equal(want[i].Time) ||
			string(got[i].Data) != string(want[i].Data) || got[i].Type != want[i].Type {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestEnsureIsIdempotentAndRestartKeepsEvents(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	layout := journal.Layout{AckWait: 5 * time.Second}
	for range 2 {
		if err := journal.Ensure(ctx, env.JS, layout); err != nil {
			t.Fatalf("Ensure again: %v", err)
		}
	}

	// The events stream's ids only answer a quick retry (its appends are
	// conditional); the others' dedupe is their only guard of a retried
	// publish (a task, a wake-up, an approval).
	for name, want := range map[string]struct {
		retention jetstream.RetentionPolicy
		window    time.Duration
	}{
		journal.StreamWork:      {jetstream.WorkQueuePolicy, 2 * time.Minute},
		journal.StreamEvents:    {jetstream.LimitsPolicy, 10 * time.Second},
		journal.StreamApprovals: {jetstream.LimitsPolicy, 2 * time.Minute},
	} {
		st, err := env.JS.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		cfg := st.CachedInfo().Config
		if cfg.Retention != want.retention || cfg.Storage != jetstream.FileStorage || cfg.Duplicates != want.window || cfg.MaxAge != 0 {
			t.Errorf("stream %s: retention %v storage %v duplicates %v max age %v", name, cfg.Retention, cfg.Storage, cfg.Duplicates, cfg.MaxAge)
		}
	}
	for _, b := range []string{journal.BucketApprovals, journal.BucketIdempotency, journal.BucketRuns} {
		kv, err := env.JS.KeyValue(ctx, b)
		if err != nil {
			t.Fatalf("bucket %s: %v", b, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if gotTTL := st.LimitMarkerTTL() > 0; gotTTL != (b == journal.BucketIdempotency) {
			t.Errorf("bucket %s: LimitMarkerTTL %v", b, st.LimitMarkerTTL())
		}
	}
	cons, err := env.JS.Consumer(ctx, journal.StreamWork, journal.ConsumerWorkers)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	cc := cons.CachedInfo().Config
	wantBackOff := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second}
	if cc.AckPolicy != jetstream.AckExplicitPolicy || cc.AckWait != 5*time.Second || cc.MaxDeliver != 5 ||
		cc.MaxAckPending != 1024 || fmt.Sprint(cc.BackOff) != fmt.Sprint(wantBackOff) || cc.Durable != journal.ConsumerWorkers {
		t.Errorf("consumer config: %+v", cc)
	}

	// Changing a knob updates in place.
	if err := journal.Ensure(ctx, env.JS, journal.Layout{AckWait: 2 * time.Second, MaxDeliver: 3, MaxAckPending: 8}); err != nil {
		t.Fatalf("Ensure with new layout: %v", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxDeliver != 3 || info.Config.MaxAckPending != 8 || fmt.Sprint(info.Config.BackOff) != "[2s 4s]" {
		t.Errorf("updated consumer config: %+v", info.Config)
	}

	want := trail("acme", "run-1", 1, 3)
	last := mustAppend(t, env.Journal, 0, want...)
	env.Restart(t)
	if err := journal.Ensure(ctx, env.JS, layout); err != nil {
		t.Fatalf("Ensure after restart: %v", err)
	}
	wantRun(t, env.Journal, "acme", "run-1", want, last)
}

func TestEnsureRejectsBadLayoutNamingTheField(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	for _, tc := range []struct {
		given journal.Layout
		want  string
	}{
		{journal.Layout{Replicas: -1}, "Layout.Replicas"},
		{journal.Layout{AckWait: time.Millisecond}, "Layout.AckWait"},
		{journal.Layout{MaxDeliver: -2}, "Layout.MaxDeliver"},
		{journal.Layout{MaxAckPending: -1}, "Layout.MaxAckPending"},
		{journal.Layout{EventsMaxAge: time.Second}, "Layout.EventsMaxAge"},
	} {
		err := journal.Ensure(t.Context(), env.JS, tc.given)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ensure(%+v) = %v, want an error naming %s", tc.given, err, tc.want)
		}
	}
	// A Replicas the single server cannot honour fails naming the stream.
	err := journal.Ensure(t.Context(), env.JS, journal.Layout{Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), journal.StreamWork) {
		t.Errorf("Ensure with 3 replicas on one server = %v, want an error naming %s", err, journal.StreamWork)
	}
}

func TestAppendChainsAndLoadReturnsTheRunInOrder(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := env.Journal
	want := trail("acme", "run-1", 1, 9)

	last := uint64(0)
	for _, e := range want[:3] { // one at a time
		last = mustAppend(t, j, last, e)
	}
	last = mustAppend(t, j, last, want[3:]...) // then as a group
	wantRun(t, j, "acme", "run-1", want, last)

	// An empty append changes nothing.
	if got := mustAppend(t, j, last); got != last {
		t.Errorf("empty Append = %d, want %d", got, last)
	}
}

func TestLoadOfARunWithOneEventAndOfAnUnknownRun(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	got, last, err := env.Journal.Load(t.Context(), "acme", "nobody")
	if err != nil || last != 0 || len(got) != 0 {
		t.Fatalf("Load of unknown run = %v, %d, %v; want nothing, 0, nil", got, last, err)
	}
	first := ev("acme", "run-1", 1, events.TypeStarted)
	seq := mustAppend(t, env.Journal, 0, first)
	wantRun(t, env.Journal, "acme", "run-1", []events.Event{first}, seq)
}

func TestLoadReadsALongRunAcrossPulls(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	want := trail("acme", "long", 1, 700)
	other := trail("acme", "other", 1, 7)
	var last, otherLast uint64
	for i := range 7 {
		last = mustAppend(t, env.Journal, last, want[i*100:(i+1)*100]...)
		otherLast = mustAppend(t, env.Journal, otherLast, other[i]) // interleaved
	}
	wantRun(t, env.Journal, "acme", "long", want, last)
	wantRun(t, env.Journal, "acme", "other", other, otherLast)
}

func TestRacingAppendersExactlyOneWins(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := env.Journal
	last := mustAppend(t, j, 0, ev("acme", "run-1", 1, events.TypeStarted))

	const writers = 8
	var (
		wg     sync.WaitGroup
		wins   atomic.Int32
		errsMu sync.Mutex
		errs   []error
	)
	start := make(chan struct{})
	for range writers {
		wg.Go(func() {
			// Every writer loaded the same state and appends its own seq 2.
			e := ev("acme", "run-1", 2, events.TypeProposed)
			<-start
			_, err := j.Append(context.Background(), last, e, ev("acme", "run-1", 3, events.TypeValidated))
			if err == nil {
				wins.Add(1)
				return
			}
			errsMu.Lock()
			errs = append(errs, err)
			errsMu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d writers won, want exactly 1", wins.Load())
	}
	for _, err := range errs {
		var ce *journal.ConflictError
		if !errors.Is(err, journal.ErrConflict) || !errors.As(err, &ce) {
			t.Fatalf("loser got %v, want ErrConflict", err)
		}
		if ce.Tenant != "acme" || ce.RunID != "run-1" || ce.Seq != 2 || ce.Expected != last {
			t.Errorf("conflict fields: %+v", ce)
		}
	}
	t.Logf("a loser's error: %v", errs[0])

	got, _, err := j.Load(t.Context(), "acme", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Seq != 2 || got[2].Seq != 3 {
		t.Fatalf("after the race the run has %d events: %+v", len(got), got)
	}
}

func TestAppendAfterAnotherWriterIsAConflict(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := env.Journal
	s1 := mustAppend(t, j, 0, ev("acme", "run-1", 1, events.TypeStarted))
	mustAppend(t, j, s1, ev("acme", "run-1", 2, events.TypeProposed))

	// A stale writer still believes the run ends at s1 and appends seq 2.
	_, err := j.Append(t.Context(), s1, ev("acme", "run-1", 2, events.TypeFinished))
	if !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("stale append = %v, want ErrConflict", err)
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Errorf("R1 conflict cause = %v, want JetStream error 10071", err)
	}
	// A writer that thinks the run is new conflicts too.
	if _, err := j.Append(t.Context(), 0, ev("acme", "run-1", 1, events.TypeStarted)); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("append to a run believed empty = %v, want ErrConflict", err)
	}
}

func TestRetriedAppendIsStoredOnce(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := env.Journal
	ctx := t.Context()
	want := trail("acme", "run-1", 1, 3)
	last := mustAppend(t, j, 0, want...)

	// The whole append again, as after a lost ack: same events, same
	// expectation. The server answers "wrong last sequence"; the journal
	// finds the events are ours.
	if got, err := j.Append(ctx, 0, want...); err != nil || got != last {
		t.Fatalf("retried Append = %d, %v; want %d, nil", got, err, last)
	}
	// Only the tail again, expecting the event before it: the same.
	if got, err := j.Append(ctx, last-1, want[2]); err != nil || got != last {
		t.Fatalf("retried tail = %d, %v; want %d, nil", got, err, last)
	}
	// The last event again, expecting itself: the expectation holds and the
	// stream reports a duplicate Nats-Msg-Id, which is ours.
	if got, err := j.Append(ctx, last, want[2]); err != nil || got != last {
		t.Fatalf("duplicate of the last event = %d, %v; want %d, nil", got, err, last)
	}
	wantRun(t, j, "acme", "run-1", want, last)

	// The same run seq with other content is another writer's event.
	forged := want[2]
	forged.EventID = "someone-else"
	if _, err := j.Append(ctx, last, forged); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("same seq, other content = %v, want ErrConflict", err)
	}
	if _, err := j.Append(ctx, 0, forged); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("same seq, other content, stale expectation = %v, want ErrConflict", err)
	}

	// A bare republish of an event's Nats-Msg-Id is deduplicated by the
	// stream itself.
	data, _ := json.Marshal(want[0])
	ack, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: want[0].Subject(), Data: data}, jetstream.WithMsgID(want[0].MsgID()))
	if err != nil || !ack.Duplicate {
		t.Fatalf("republish = %+v, %v; want a duplicate ack", ack, err)
	}
	wantRun(t, j, "acme", "run-1", want, last)
}

func TestRunsDoNotMix(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := env.Journal
	a := trail("acme", "run-a", 1, 4)
	b := trail("acme", "run-b", 1, 4)
	c := trail("globex", "run-c", 1, 4)
	var la, lb, lc uint64
	for i := range 4 {
		la = mustAppend(t, j, la, a[i])
		lb = mustAppend(t, j, lb, b[i])
		lc = mustAppend(t, j, lc, c[i])
	}
	wantRun(t, j, "acme", "run-a", a, la)
	wantRun(t, j, "acme", "run-b", b, lb)
	wantRun(t, j, "globex", "run-c", c, lc)

	for _, tc := range []struct {
		filter string
		want   []string // run ids, in stream order
	}{
		{events.AnyTenantRunFilter("run-c"), []string{"run-c", "run-c", "run-c", "run-c"}},
		{events.EventsPrefix + ".acme.*.proposed", []string{"run-a", "run-b", "run-a", "run-b", "run-a", "run-b"}},
	} {
		got, err := j.Replay(t.Context(), tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, e.RunID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(tc.want) {
			t.Errorf("Replay(%s) = runs %v, want %v", tc.filter, ids, tc.want)
		}
	}
}

// TestReplayAfterReturnsOnlyLaterEvents: ReplayAfter returns, in stream
// order and for every run on the filter, the events stored after the given
// stream seq, and nothing after the last one.
func TestReplayAfterReturnsOnlyLaterEvents(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := env.Journal
	a, b := trail("acme", "run-a", 1, 3), trail("acme", "run-b", 1, 2)
	lastA := mustAppend(t, j, 0, a[:2]...)
	lastB := mustAppend(t, j, 0, b[0])
	mustAppend(t, j, lastA, a[2])
	last := mustAppend(t, j, lastB, b[1])
	all := events.EventsPrefix + ".>"
	for _, c := range []struct {
		after uint64
		want  []events.Event
	}{
		{0, []events.Event{a[0], a[1], b[0], a[2], b[1]}},
		{lastA, []events.Event{b[0], a[2], b[1]}},
		{last - 1, []events.Event{b[1]}},
		{last, nil},
	} {
		got, err := j.ReplayAfter(t.Context(), all, c.after)
		if err != nil {
			t.Fatalf("ReplayAfter(%d): %v", c.after, err)
		}
		if mustJSON(t, got) != mustJSON(t, c.want) {
			t.Errorf("ReplayAfter(%d) =\n%s\nwant\n%s", c.after, mustJSON(t, got), mustJSON(t, c.want))
		}
	}
}

func TestReplayOfNothingIsEmpty(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	got, err := env.Journal.Replay(t.Context(), events.EventsPrefix+".>")
	if err != nil || len(got) != 0 {
		t.Fatalf("Replay of an empty stream = %v, %v", got, err)
	}
}

func TestLastMessageBySubjectHonoursWildcards(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	last := mustAppend(t, env.Journal, 0, trail("acme", "run-1", 1, 3)...)
	mustAppend(t, env.Journal, 0, ev("acme", "run-2", 1, events.TypeStarted))

	st, err := env.JS.Stream(ctx, journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, events.RunFilter("acme", "run-1"))
	if err != nil {
		t.Fatalf("GetLastMsgForSubject with a wildcard: %v", err)
	}
	if m.Sequence != last {
		t.Errorf("last message of run-1 by wildcard = seq %d, want %d", m.Sequence, last)
	}
	if _, err := st.GetLastMsgForSubject(ctx, events.RunFilter("acme", "run-3")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("last message of an unknown run = %v, want ErrMsgNotFound", err)
	}
}

func TestUndecodableEventIsAnErrorNamingItsStreamSeq(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	mustAppend(t, env.Journal, 0, trail("acme", "run-1", 1, 2)...)

	for _, tc := range []struct {
		name string
		data string
	}{
		{"not json", "{nope"},
		{"envelope of another run", mustJSON(t, ev("acme", "run-9", 3, events.TypeObserved))},
	} {
		ack, err := env.JS.Publish(ctx, events.EventSubject("acme", "run-1", events.TypeObserved), []byte(tc.data))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = env.Journal.Load(ctx, "acme", "run-1")
		var de *journal.DecodeError
		if !errors.As(err, &de) || de.StreamSeq != ack.Sequence {
			t.Fatalf("%s: Load = %v, want a DecodeError at stream seq %d", tc.name, err, ack.Sequence)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("stream seq %d", ack.Sequence)) {
			t.Errorf("%s: error %q does not name the stream seq", tc.name, err)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWatchDeliversExistingThenLiveEvents(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := env.Journal
	want := trail("acme", "run-1", 1, 4)
	last := mustAppend(t, j, 0, want[:2]...)
	mustAppend(t, j, 0, ev("acme", "run-other", 1, events.TypeStarted))

	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan events.Event)
	done := make(chan error, 1)
	go func() {
		defer close(done)
		for e, err := range j.Watch(ctx, events.RunFilter("acme", "run-1")) {
			if err != nil {
				done <- err
				return
			}
			got <- e
		}
	}()
	next := func(wantEv events.Event) {
		t.Helper()
		select {
		case e := <-got:
			if e.EventID != wantEv.EventID {
				t.Fatalf("watched %s seq %d, want seq %d", e.EventID, e.Seq, wantEv.Seq)
			}
		case err := <-done:
			t.Fatalf("watch ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event seq %d within 10s", wantEv.Seq)
		}
	}
	next(want[0])
	next(want[1])
	mustAppend(t, j, last, want[2:]...)
	next(want[2])
	next(want[3])

	cancel()
	select {
	case err, ok := <-done:
		if ok && err != nil {
			t.Fatalf("watch ended with %v after cancel, want a clean end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end after cancel")
	}
}

// A watch goes on when its consumer goes away under it (the server that
// held it died: here it is deleted, twice), with the events after the last
// one it yielded, each once and in order.
func TestWatchGoesOnWhenItsConsumerGoesAway(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := env.Journal
	want := trail("acme", "run-1", 1, 6)
	last := mustAppend(t, j, 0, want[:2]...)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := env.JS.Stream(ctx, journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for e, err := range j.Watch(ctx, events.RunFilter("acme", "run-1")) {
		if err != nil {
			t.Fatal(err)
		}
		if e.EventID != want[n].EventID {
			t.Fatalf("watched event seq %d as #%d, want seq %d: each event once, in order", e.Seq, n+1, want[n].Seq)
		}
		if n++; n == len(want) {
			break
		}
		if n%2 == 1 {
			continue
		}
		// After each second event: the consumer goes, and two more come.
		deleted := 0
		for name := range st.ConsumerNames(ctx).Name() {
			// A consumer the watch retired earlier may be listed and
			// then deleted by the watch itself before this gets to it.
			err := st.DeleteConsumer(ctx, name)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			deleted++
		}
		if deleted == 0 {
			t.Fatal("no consumer to delete")
		}
		last = mustAppend(t, j, last, want[n:n+2]...)
	}
	if n != len(want) {
		t.Fatalf("watched %d events of %d before %v", n, len(want), ctx.Err())
	}
}

// A watch that cannot begin (here the stream is gone) says so, as its last
// and only yield, rather than ending as if nothing was there.
func TestWatchSaysWhyItCannotBegin(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := env.JS.DeleteStream(ctx, journal.StreamEvents); err != nil {
		t.Fatal(err)
	}
	var errs []error
	for _, err := range env.Journal.Watch(ctx, events.RunFilter("acme", "run-1")) {
		if err == nil {
			t.Fatal("an event from a stream that is gone")
		}
		errs = append(errs, err)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "journal: watch") {
		t.Fatalf("watch of a stream that is gone yielded %v, want one error naming the watch", errs)
	}
}

func TestWatchStopsWhenTheLoopBreaks(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	mustAppend(t, env.Journal, 0, trail("acme", "run-1", 1, 3)...)
	n := 0
	for _, err := range env.Journal.Watch(t.Context(), events.RunFilter("acme", "run-1")) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 {
			break
		}
	}
	// The watch's consumer is gone.
	st, err := env.JS.Stream(t.Context(), journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().State.Consumers; c != 0 {
		t.Errorf("%d consumers left on %s after the watch", c, journal.StreamEvents)
	}
}

func TestAppendRejectsEventsItCannotName(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	for name, evs := range map[string][]events.Event{
		"two runs":       {ev("acme", "run-1", 1, events.TypeStarted), ev("acme", "run-2", 1, events.TypeStarted)},
		"dotted tenant":  {ev("ac.me", "run-1", 1, events.TypeStarted)},
		"wildcard run":   {ev("acme", "*", 1, events.TypeStarted)},
		"type with dots": {ev("acme", "run-1", 1, "a.b")},
	} {
		if _, err := env.Journal.Append(ctx, 0, evs...); err == nil || errors.Is(err, journal.ErrConflict) {
			t.Errorf("%s: Append = %v, want a validation error", name, err)
		}
	}
	if _, _, err := env.Journal.Load(ctx, "acme", "run.1"); err == nil {
		t.Error("Load of a dotted run id succeeded")
	}
}

func TestPutRunKeepsTheNewestRecord(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	kv, err := env.JS.KeyValue(ctx, journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	get := func() journal.RunRecord {
		t.Helper()
		e, err := kv.Get(ctx, "acme.run-1")
		if err != nil {
			t.Fatal(err)
		}
		var r journal.RunRecord
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	rec := journal.RunRecord{RunID: "run-1", Tenant: "acme", TaskID: "t1", Agent: "a", Status: "running", LastSeq: 5,
		Updated: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, step := range []struct {
		seq    uint64
		status string
		want   uint64
	}{{5, "running", 5}, {3, "stale", 5}, {9, "finished", 9}, {9, "finished", 9}} {
		rec.LastSeq, rec.Status = step.seq, step.status
		if err := env.Journal.PutRun(ctx, rec); err != nil {
			t.Fatalf("PutRun(seq %d): %v", step.seq, err)
		}
		if got := get(); got.LastSeq != step.want {
			t.Errorf("after PutRun(seq %d) the record has seq %d, want %d", step.seq, got.LastSeq, step.want)
		}
	}
	e, _ := kv.Get(ctx, "acme.run-1")
	var raw map[string]any
	_ = json.Unmarshal(e.Value(), &raw)
	for _, k := range []string{"run_id", "tenant", "task_id", "agent", "status", "last_seq", "updated"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("record JSON lacks %q: %s", k, e.Value())
		}
	}
}

func TestNewWithoutTheLayoutFails(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	if err := env.JS.DeleteStream(t.Context(), journal.StreamEvents); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.New(t.Context(), env.JS); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("New without the events stream = %v, want ErrStreamNotFound", err)
	}
}

// MaxDataBytes follows the server's max_payload and leaves room for the
// largest envelope and headers: data of that size is stored, one by one
// and in an atomic batch; data past max_payload is refused.
func TestMaxDataBytesFitsTheServersMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	env := natstest.StartWith(t, natstest.Options{MaxPayload: maxPayload, SyncInterval: "2m"})
	j := env.Journal
	limit := j.MaxDataBytes()
	if limit <= 0 || limit >= maxPayload || limit < maxPayload-8<<10 {
		t.Fatalf("MaxDataBytes = %d for a max_payload of %d", limit, maxPayload)
	}
	big := func(seq uint64, n int) events.Event {
		e := ev(strings.Repeat("t", 64), "run-"+strings.Repeat("r", 60), seq, events.TypeExecuted)
		e.EventID = "ev-" + strings.Repeat("e", 60)
		e.CallID = "s999c999"
		e.Tool = strings.Repeat("x", 128) // the longest a decision may name
		e.Data = json.RawMessage(`"` + strings.Repeat("d", n-2) + `"`)
		return e
	}
	last := mustAppend(t, j, 0, big(1, limit))
	mustAppendBatch(t, j, last, big(2, limit), big(3, limit))
	over := big(1, maxPayload+1)
	over.RunID = "run-over"
	if _, err := j.Append(t.Context(), 0, over); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("an event over max_payload: err = %v, want %v", err, nats.ErrMaxPayload)
	}
}

// An event on a run's subject with a seq no loopgate wrote (2^64-1) is
// read as it is, for Fold to refuse: Load neither panics nor loses the
// events before it.
func TestLoadOfAnAbsurdSeqReadsTheRunAsItIs(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	mustAppend(t, env.Journal, 0, trail("acme", "run-1", 1, 2)...)
	if _, err := env.JS.Publish(ctx, events.EventSubject("acme", "run-1", events.TypeObserved),
		[]byte(mustJSON(t, ev("acme", "run-1", math.MaxUint64, events.TypeObserved)))); err != nil {
		t.Fatal(err)
	}
	evs, _, err := env.Journal.Load(ctx, "acme", "run-1")
	if err != nil || len(evs) != 3 || evs[0].Seq != 1 || evs[1].Seq != 2 || evs[2].Seq != math.MaxUint64 {
		t.Fatalf("Load = %d events (%v), want the three stored", len(evs), err)
	}
}
