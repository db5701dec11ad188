package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A full store is an outage, not a fault of the run: JetStream refuses
// every write until an operator makes room. The run must neither spend its
// deliveries on it (and be stopped as a poison message, whose stop could
// not be recorded either, leaving it stuck) nor lose the result its worker
// holds. Its worker keeps the message and the result and tries again; once
// there is room, the run goes on with its trail as if nothing happened,
// its active-time budget untouched by the wait.
func TestARunWaitsOutAFullStore(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	m := fakeTool("slow_read", tools.Read, false)
	b := setup(t, options{
		maxFileStore: 8 << 20,
		tools:        []tools.Manifest{m}, roles: writerRoles("slow_read"),
		builtins: tools.Builtins{"slow_read": func(ctx context.Context, c tools.Call) (any, error) {
			close(entered)
			<-release
			return map[string]int{"n": 1}, nil
		}},
		agents:  map[string]config.Profile{"slow": profile("slow_read")},
		scripts: map[string]model.Model{"slow": scripted(t, `{"tool_calls":[{"tool":"slow_read","args":{}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{MaxDeliver: 2},
		retry:   20 * time.Millisecond,
		workers: 1,
	})
	// The outage outlasts the run's active-time budget: the time waited is
	// JetStream's, not the run's, and must not end it.
	tk := task("full-store-1", "slow")
	tk.Limits = &events.Limits{MaxActive: events.Duration(2500 * time.Millisecond)}
	store := fillStore(t, b.env.JS, 4) // room for the run's first events
	runID := b.submit(tk)
	<-entered
	err := store.top()
	close(release)
	if err != nil {
		t.Fatal(err)
	}

	// Refused: the executed event cannot be stored. Far more retry delays
	// than MaxDeliver allows deliveries go by (20 ms doubling: 5.1 s by
	// the 9th try), the message held.
	waitLogged(t, b, "JetStream cannot store the run's events", 9)
	assertHeld(t, b, journal.StreamWork, journal.ConsumerWorkers, "during the outage")

	store.purge(t)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, okStep("slow_read"), []string{"proposed:final", "finished:done"}))
}

// The same outage at a write's idempotency claim, a KV write the run
// cannot go on without: the worker keeps the message and tries the run
// again from its events until there is room, then the write runs once.
func TestAWriteWaitsOutAFullStoreAtItsClaim(t *testing.T) {
	t.Parallel()
	var (
		runs     atomic.Int32
		once     sync.Once
		store    *storeFiller
		toppedUp = make(chan error, 1)
	)
	m, fns := ungated("create_ticket", &runs, nil)
	m.Timeout = events.Duration(500 * time.Millisecond) // a short lease to wait out after the outage
	b := setup(t, options{
		maxFileStore: 8 << 20,
		tools:        []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":7}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{MaxDeliver: 2},
		retry:   20 * time.Millisecond,
		crash: func(point string) {
			if point == "after:executing" {
				once.Do(func() { toppedUp <- store.top() })
			}
		},
		workers: 1,
	})
	store = fillStore(t, b.env.JS, 4)
	runID := b.submit(task("full-store-2", "ticketer"))
	if err := <-toppedUp; err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "keeping its message and trying again", 5)
	assertHeld(t, b, journal.StreamWork, journal.ConsumerWorkers, "during the outage")
	if n := runs.Load(); n != 0 {
		t.Fatalf("the write ran %d times without its claim", n)
	}
	store.purge(t)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, lostThenOKStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	if n := runs.Load(); n != 1 {
		t.Errorf("the write ran %d times, want once", n)
	}
}

// storeFiller fills the server's JetStream store with a stream of its own.
type storeFiller struct {
	js    jetstream.JetStream
	chunk []byte
}

// fillStore publishes 256 KiB chunks to a stream of its own until the
// server refuses one for want of room, then deletes the last free chunks:
// the store is left with about free × 256 KiB of room.
func fillStore(t *testing.T, js jetstream.JetStream, free int) *storeFiller {
	t.Helper()
	ctx := t.Context()
	f := &storeFiller{js: js, chunk: []byte(strings.Repeat("x", 256<<10))}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for {
		ack, err := f.publish(ctx)
		if full(err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if seqs = append(seqs, ack.Sequence); len(seqs) > 1000 {
			t.Fatal("the store never filled up")
		}
	}
	st, err := js.Stream(ctx, "FILLER")
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range seqs[max(len(seqs)-free, 0):] {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *storeFiller) publish(ctx context.Context) (*jetstream.PubAck, error) {
	return f.js.Publish(ctx, "filler", f.chunk)
}

// full reports whether err is the server refusing a write for want of room.
func full(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10023
}

// top fills the room left. It returns an error rather than failing the
// test: it may run in a worker's goroutine.
func (f *storeFiller) top() error {
	for range 100 {
		_, err := f.publish(context.Background())
		if full(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("top the store up: %w", err)
		}
	}
	return errors.New("the store never filled up")
}

// purge deletes the stream: room again.
func (f *storeFiller) purge(t *testing.T) {
	t.Helper()
	if err := f.js.DeleteStream(context.Background(), "FILLER"); err != nil {
		t.Fatalf("make room: %v", err)
	}
}

// assertHeld checks that the consumer holds its one message, never
// redelivered: a worker keeping it through an outage (when).
func assertHeld(t *testing.T, b *bundle, stream, consumer, when string) {
	t.Helper()
	cons, err := b.env.JS.Consumer(t.Context(), stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 || info.NumAckPending != 1 {
		t.Errorf("%s: %d redelivered, %d unacknowledged; want the one message held, never redelivered", when, info.NumRedelivered, info.NumAckPending)
	}
}

// waitLogged waits until the pool's log holds s at least n times.
func waitLogged(t *testing.T, b *bundle, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(b.logs.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q %d times:\n%s", s, n, b.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The same outage when an approval's decision is written: the approvals
// handler keeps the approval message (heartbeat and all) instead of
// spending its deliveries and recording it undecided; once there is room
// the decision is written and the run goes on, approved.
func TestAnApprovalWaitsOutAFullStore(t *testing.T) {
	t.Parallel()
	var (
		once     sync.Once
		store    *storeFiller
		toppedUp = make(chan error, 1)
	)
	o := oneDraft(t, "drafted")
	o.maxFileStore = 8 << 20
	o.layout = journal.Layout{MaxDeliver: 2}
	o.retry = 20 * time.Millisecond
	o.crash = func(point string) {
		if point == "before:decision" {
			once.Do(func() { toppedUp <- store.top() })
		}
	}
	b := setup(t, o)
	store = fillStore(t, b.env.JS, 4)
	runID, q := draftRun(t, b, "full-store-3")
	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	if err := <-toppedUp; err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "JetStream cannot store or read an approval's decision", 5)
	if st := pendingEntry(t, b, runID, "s1c1"); !st.Pending() {
		t.Fatalf("the entry was decided during the outage: %+v", st)
	}
	store.purge(t)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	if d := last[events.ApprovedData](t, evs, events.TypeApproved); d.ApprovalSeq != seq {
		t.Errorf("approved by approval message %d, want %d", d.ApprovalSeq, seq)
	}
}

// Once an approval message has decided its entry, a failure to record the
// decision in the run, whatever it is, holds the message until it can be
// recorded: if the message ran out of deliveries, the entry would say
// approved, the run would stay parked, and nothing would be left pending
// for an approver to answer. Here the events stream refuses every append
// (a message limit reached, with discard new: not an outage JetStream
// names) from the moment the entry is decided.
func TestADecisionIsHeldUntilTheRunRecordsIt(t *testing.T) {
	t.Parallel()
	var (
		once    sync.Once
		limited = make(chan error, 1)
	)
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: time.Second}
	o.retry = 20 * time.Millisecond
	var b *bundle
	o.crash = func(point string) {
		if point == "before:approved" {
			once.Do(func() { limited <- limitEvents(b, true) })
		}
	}
	b = setup(t, o)
	runID, q := draftRun(t, b, "decided-held-1")
	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	if err := <-limited; err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "JetStream cannot store or read an approval's decision", 5)
	assertHeld(t, b, journal.StreamApprovals, journal.ConsumerApprovals, "while the run cannot record it")
	if err := limitEvents(b, false); err != nil {
		t.Fatal(err)
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	if d := last[events.ApprovedData](t, evs, events.TypeApproved); d.ApprovalSeq != seq {
		t.Errorf("approved by approval message %d, want %d", d.ApprovalSeq, seq)
	}
}

// limitEvents makes the events stream refuse every new message (on) or
// lifts that (off), through its message limit with discard new.
func limitEvents(b *bundle, on bool) error {
	return updateEvents(func(cfg *jetstream.StreamConfig, st jetstream.StreamState) {
		cfg.Discard, cfg.MaxMsgs = jetstream.DiscardOld, -1
		if on {
			cfg.Discard, cfg.MaxMsgs = jetstream.DiscardNew, int64(st.Msgs)
		}
	}, b)
}

// updateEvents changes the events stream's config with change, given its
// current config and state.
func updateEvents(change func(*jetstream.StreamConfig, jetstream.StreamState), b *bundle) error {
	ctx := context.Background()
	st, err := b.env.JS.Stream(ctx, journal.StreamEvents)
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	change(&cfg, st.CachedInfo().State)
	_, err = b.env.JS.UpdateStream(ctx, cfg)
	return err
}

// A stream that stops answering (a single nats-server whose disk filled up
// marks the stream it could not write and answers no publish to it until
// it is restarted) is an outage too: appends time out rather than being
// refused. The run's worker keeps the message and tries the append again
// (its Nats-Msg-Id makes that safe) instead of spending deliveries, which
// would end in a poison-message stop that could not be recorded either.
// Here the events stream stops acknowledging from the moment the read's
// executed event is appended.
func TestARunWaitsOutAStreamThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	var (
		once   sync.Once
		silent = make(chan error, 1)
	)
	m := fakeTool("quick_read", tools.Read, false)
	var b *bundle
	b = setup(t, options{
		tools: []tools.Manifest{m}, roles: writerRoles("quick_read"),
		builtins: tools.Builtins{"quick_read": func(ctx context.Context, c tools.Call) (any, error) {
			return map[string]int{"n": 1}, nil
		}},
		agents:     map[string]config.Profile{"reader": profile("quick_read")},
		scripts:    map[string]model.Model{"reader": scripted(t, `{"tool_calls":[{"tool":"quick_read","args":{}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:     journal.Layout{MaxDeliver: 2, AckWait: time.Second},
		retry:      20 * time.Millisecond,
		apiTimeout: time.Second, // each unanswered append waits this long
		crash: func(point string) {
			if point == "before:executed" {
				once.Do(func() { silent <- ackEvents(b, false) })
			}
		},
		workers: 1,
	})
	runID := b.submit(task("silent-1", "reader"))
	if err := <-silent; err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "JetStream cannot store the run's events", 2)
	assertHeld(t, b, journal.StreamWork, journal.ConsumerWorkers, "while the stream does not answer")
	if err := ackEvents(b, true); err != nil {
		t.Fatal(err)
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, okStep("quick_read"), []string{"proposed:final", "finished:done"}))
}

// ackEvents turns the events stream's acknowledgements on or off.
func ackEvents(b *bundle, on bool) error {
	return updateEvents(func(cfg *jetstream.StreamConfig, _ jetstream.StreamState) { cfg.NoAck = !on }, b)
}

// Held runs do not each wait out their own backoff once JetStream takes
// writes again: the first to get through tells the others (recovery).
// Run A is held from early on, its tries 4 s apart by the time the store
// is emptied; run B is held only just before, its next try within half a
// second. Once B's write goes through, A tries at once: it finishes
// within a second or so of the purge, where alone it would wait its 4 s.
func TestAHeldRunGoesOnWhenAnotherGetsThrough(t *testing.T) {
	t.Parallel()
	entered, release, decideB := make(chan struct{}), make(chan struct{}), make(chan struct{})
	m := fakeTool("slow_read", tools.Read, false)
	quick := scripted(t, `{"final_answer":{"summary":"ok"}}`)
	b := setup(t, options{
		maxFileStore: 8 << 20,
		tools:        []tools.Manifest{m}, roles: writerRoles("slow_read"),
		builtins: tools.Builtins{"slow_read": func(ctx context.Context, c tools.Call) (any, error) {
			close(entered)
			<-release
			return map[string]int{"n": 1}, nil
		}},
		agents: map[string]config.Profile{"slow": profile("slow_read"), "quick": profile("slow_read")},
		scripts: map[string]model.Model{
			"slow": scripted(t, `{"tool_calls":[{"tool":"slow_read","args":{}}]}`, `{"final_answer":{"summary":"ok"}}`),
			"quick": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
				<-decideB // B's decision comes once the store is full and A held
				return quick.Propose(ctx, req)
			}),
		},
		layout:  journal.Layout{MaxDeliver: 2},
		retry:   250 * time.Millisecond,
		workers: 2,
	})
	store := fillStore(t, b.env.JS, 8) // room for both runs' first events
	a := b.submit(task("held-a", "slow"))
	bID := b.submit(task("held-b", "quick"))
	<-entered
	b.waitType(bID, events.TypeStarted, 1)
	err := store.top()
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	// A's tries: at once, then 0.25, 0.5, 1 and 2 s apart; the next, 4 s.
	const refused = "JetStream cannot store the run's events"
	waitLogged(t, b, refused, 5)
	close(decideB) // B's proposed is refused: B is held too, 0.25 s to its next try
	waitLoggedFor(t, b, refused, bID)

	store.purge(t)
	purged := time.Now()
	evsB := b.waitEnd(bID)
	assertTrail(t, evsB, []string{"started", "proposed:final", "finished:done"})
	evsA := b.waitEnd(a)
	assertTrail(t, evsA, concat([]string{"started"}, okStep("slow_read"), []string{"proposed:final", "finished:done"}))
	after := evsA[len(evsA)-1].Time.Sub(purged)
	t.Logf("run A finished %s after the purge", after)
	if after > 2500*time.Millisecond {
		t.Errorf("run A finished %s after the store had room again, want well under its 4 s backoff: it was not told", after)
	}
}

// waitLoggedFor waits for a log line holding s and runID.
func waitLoggedFor(t *testing.T, b *bundle, s, runID string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for line := range strings.Lines(b.logs.String()) {
			if strings.Contains(line, s) && strings.Contains(line, runID) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q of run %s:\n%s", s, runID, b.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A stall in the delivery of approval messages (a process stopped and
// resumed, a connection moved to another server) loses none of them.
// With jetstream's Messages iterator, whose channel holds as many
// messages as the pool has workers, the pull's heartbeats filled it while
// the first approval's delivery was held, and the two approvals that came
// next were dropped as a slow consumer: back only after AckWait (5 s
// here), a delivery spent. Delivered by a handler (Consume), they wait in
// the client's pending list and are decided as soon as the stall ends.
func TestApprovalsThatCameDuringAStallAreNotDropped(t *testing.T) {
	t.Parallel()
	stall := make(chan struct{})
	var once sync.Once
	o := oneDraft(t, "drafted")
	o.workers = 2
	o.crash = func(point string) {
		if point == "deliver:approval" {
			once.Do(func() { <-stall })
		}
	}
	b := setup(t, o)
	runs := make([]string, 3)
	hashes := make([]string, 3)
	for i := range runs {
		id, q := draftRun(t, b, fmt.Sprintf("stall-%d", i+1))
		runs[i], hashes[i] = id, q.ArgsHash
	}
	b.publishApproval(runs[0], "s1c1", hashes[0], "approve", "supervisor@cityops", "ok")
	time.Sleep(3 * time.Second) // its delivery is held; the pull's heartbeats pile up
	for i := 1; i < len(runs); i++ {
		b.publishApproval(runs[i], "s1c1", hashes[i], "approve", "supervisor@cityops", "ok")
	}
	time.Sleep(500 * time.Millisecond) // they reach the client during the stall
	released := time.Now()
	close(stall)
	for _, runID := range runs {
		evs := b.waitEnd(runID)
		assertTrail(t, evs, oneDraftApproved())
		approved := evs[slices.IndexFunc(evs, func(e events.Event) bool { return e.Type == events.TypeApproved })]
		if after := approved.Time.Sub(released); after > 3*time.Second {
			t.Errorf("run %s was approved %s after the stall ended: its approval message was dropped and came back after AckWait", runID, after)
		}
	}
}
