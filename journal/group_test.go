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
	"github.com/loopgate/loopgate/journal"
)

// groupJournal is a second journal on env's server with group commit,
// batching from min waiting appends.
func groupJournal(t *testing.T, env *natstest.Env, min int) *journal.Journal {
	t.Helper()
	j, err := journal.New(t.Context(), env.JS, journal.WithGroupCommit(min))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// groupAppend is one append a test queues in a held group.
type groupAppend struct {
	last   uint64
	evs    []events.Event
	atomic bool // AppendBatch

	seq uint64
	err error
}

// flyTogether queues every append in j's group, waits until all are
// queued, releases the group and waits for every outcome.
func flyTogether(t *testing.T, j *journal.Journal, appends []*groupAppend) {
	t.Helper()
	queued, release := journal.HoldGroup(j)
	var wg sync.WaitGroup
	for _, a := range appends {
		wg.Go(func() {
			if a.atomic {
				a.seq, a.err = j.AppendBatch(context.Background(), a.last, a.evs...)
			} else {
				a.seq, a.err = j.Append(context.Background(), a.last, a.evs...)
			}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < len(appends); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d appends queued", queued(), len(appends))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
}

// newRuns makes n appends, each of events 1..size of a new run
// <prefix>-<i>.
func newRuns(prefix string, n int, size uint64) []*groupAppend {
	var appends []*groupAppend
	for i := range n {
		appends = append(appends, &groupAppend{evs: trail("acme", fmt.Sprintf("%s-%d", prefix, i), 1, size)})
	}
	return appends
}

// wantLanded checks that every append of a new run succeeded and that the
// run holds exactly its events, ending at the seq it returned.
func wantLanded(t *testing.T, j *journal.Journal, appends []*groupAppend) {
	t.Helper()
	for _, a := range appends {
		if a.err != nil {
			t.Fatalf("append of %s: %v", a.evs[0].RunID, a.err)
		}
		wantRun(t, j, "acme", a.evs[0].RunID, a.evs, a.seq)
	}
}

func TestGroupCommitStoresWaitingRunsInOneBatch(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := groupJournal(t, env, 4)
	// A run with history, extended by a step of three events all or none.
	old := trail("acme", "old", 1, 2)
	oldLast := mustAppend(t, env.Journal, 0, old...)
	appends := newRuns("run", 8, 1)
	step := trail("acme", "old", 3, 5)
	appends = append(appends, &groupAppend{last: oldLast, evs: step, atomic: true})
	n0, _ := streamMsgs(t, env)

	flyTogether(t, j, appends)

	for _, a := range appends {
		if a.err != nil {
			t.Fatalf("append of %s: %v", a.evs[0].RunID, a.err)
		}
	}
	if st := j.GroupStats(); st.Batches != 1 || st.Events != 11 || st.MaxShare != 9 || st.Alone != 0 || st.Refused != 0 {
		t.Fatalf("group stats = %+v, want one batch of 11 events from 9 appends", st)
	}
	n, lastSeq := streamMsgs(t, env)
	if n != n0+11 {
		t.Fatalf("stream holds %d messages, want %d", n, n0+11)
	}
	// Each append got the stream seq of its own last event, and the batch
	// ends at the stream's last message.
	st, err := env.JS.Stream(t.Context(), journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var batchID string
	var top uint64
	for _, a := range appends {
		run := a.evs[0].RunID
		want := a.evs
		if run == "old" {
			want = append(append([]events.Event{}, old...), step...)
		}
		wantRun(t, j, "acme", run, want, a.seq)
		msg, err := st.GetMsg(t.Context(), a.seq)
		if err != nil {
			t.Fatal(err)
		}
		id := msg.Header.Get("Nats-Batch-Id")
		if id == "" || (batchID != "" && id != batchID) {
			t.Errorf("event at %d (run %s) has batch id %q, others %q: want one batch", a.seq, run, id, batchID)
		}
		batchID = id
		top = max(top, a.seq)
	}
	if top != lastSeq {
		t.Errorf("highest seq returned %d, stream's last %d", top, lastSeq)
	}
}

func TestGroupCommitAStaleRunFailsAloneAndTheOthersLand(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := groupJournal(t, env, 2)
	s1 := mustAppend(t, env.Journal, 0, ev("acme", "moved", 1, events.TypeStarted))
	s2 := mustAppend(t, env.Journal, s1, ev("acme", "moved", 2, events.TypeProposed))
	before, _, err := env.Journal.Load(t.Context(), "acme", "moved")
	if err != nil {
		t.Fatal(err)
	}
	appends := newRuns("run", 5, 1)
	// A writer that still believes "moved" ends at s1.
	stale := &groupAppend{last: s1, evs: trail("acme", "moved", 2, 3), atomic: true}
	appends = append(appends, stale)
	n0, _ := streamMsgs(t, env)

	flyTogether(t, j, appends)

	var ce *journal.ConflictError
	if !errors.As(stale.err, &ce) || ce.RunID != "moved" || ce.Expected != s1 || stale.seq != s1 {
		t.Fatalf("stale append = %d, %v; want a conflict after %d", stale.seq, stale.err, s1)
	}
	wantLanded(t, j, appends[:5])
	if st := j.GroupStats(); st.Refused != 1 || st.Batches != 0 || st.Alone != 6 {
		t.Fatalf("group stats = %+v, want the batch refused and its 6 appends made alone", st)
	}
	if n, _ := streamMsgs(t, env); n != n0+5 {
		t.Errorf("stream holds %d messages, want %d", n, n0+5)
	}
	wantRun(t, j, "acme", "moved", before, s2)
}

func TestGroupCommitRetriedAppendsAreStoredOnce(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := groupJournal(t, env, 2)
	first := newRuns("run", 4, 2)
	for i, a := range first {
		a.atomic = i%2 == 0
	}
	flyTogether(t, j, first)
	n0, _ := streamMsgs(t, env)

	// The same appends again, as after lost acks, with one new run: the
	// batch is refused for its duplicate Nats-Msg-Ids, and each append on
	// its own finds its events already stored.
	var again []*groupAppend
	for _, a := range first {
		if a.err != nil {
			t.Fatal(a.err)
		}
		again = append(again, &groupAppend{evs: a.evs, atomic: a.atomic})
	}
	fresh := &groupAppend{evs: trail("acme", "fresh", 1, 1)}
	again = append(again, fresh)
	flyTogether(t, j, again)

	for i, a := range again[:4] {
		if a.err != nil || a.seq != first[i].seq {
			t.Fatalf("retry of %s = %d, %v; want %d", a.evs[0].RunID, a.seq, a.err, first[i].seq)
		}
		wantRun(t, j, "acme", a.evs[0].RunID, a.evs, a.seq)
	}
	if fresh.err != nil {
		t.Fatal(fresh.err)
	}
	if n, _ := streamMsgs(t, env); n != n0+1 {
		t.Errorf("stream holds %d messages, want %d: a retry was stored twice", n, n0+1)
	}
	if st := j.GroupStats(); st.Batches != 1 || st.Refused != 1 {
		t.Errorf("group stats = %+v, want the first flight stored and the retry refused", st)
	}
}

func TestGroupCommitNeverBatchesTwoWritersOfOneRun(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := groupJournal(t, env, 2)
	started := ev("acme", "contested", 1, events.TypeStarted)
	last := mustAppend(t, env.Journal, 0, started)
	// Two writers that loaded the same state, each with its own seq 2, and
	// three other runs. In one batch both expectations would hold (the
	// server checks each against the stream before the batch); the group
	// must put the second writer in a later flight, where it loses.
	a := &groupAppend{last: last, evs: []events.Event{ev("acme", "contested", 2, events.TypeProposed)}}
	b := &groupAppend{last: last, evs: []events.Event{ev("acme", "contested", 2, events.TypeFinished)}}
	others := newRuns("run", 3, 1)
	flyTogether(t, j, append([]*groupAppend{a, b}, others...))
	wantLanded(t, j, others)

	winner, loser := a, b
	if a.err != nil {
		winner, loser = b, a
	}
	if winner.err != nil || !errors.Is(loser.err, journal.ErrConflict) {
		t.Fatalf("writers = %v and %v; want one success and one conflict", a.err, b.err)
	}
	wantRun(t, j, "acme", "contested", []events.Event{started, winner.evs[0]}, winner.seq)
	if st := j.GroupStats(); st.Batches != 1 || st.MaxShare != 4 {
		t.Errorf("group stats = %+v, want one batch of the four runs", st)
	}
}

func TestGroupCommitBelowTheMinimumAppendsAlone(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := groupJournal(t, env, 8)
	appends := newRuns("run", 3, 2)
	flyTogether(t, j, appends)
	wantLanded(t, j, appends)
	if st := j.GroupStats(); st.Batches != 0 || st.Alone != 3 {
		t.Fatalf("group stats = %+v, want 3 appends alone and no batch", st)
	}
}

func TestGroupCommitCancelledWhileQueuedStoresNothing(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	j := groupJournal(t, env, 2)
	queued, release := journal.HoldGroup(j)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := j.Append(ctx, 0, ev("acme", "gone", 1, events.TypeStarted))
		done <- err
	}()
	for queued() < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled append = %v, want context.Canceled", err)
	}
	if n := queued(); n != 0 {
		t.Fatalf("%d appends still queued", n)
	}
	release()
	if _, ok, err := j.Last(t.Context(), "acme", "gone"); err != nil || ok {
		t.Fatalf("Last of the cancelled run = %v, %v; want nothing stored", ok, err)
	}
}

func TestGroupCommitAsksLessOfAServerThatTakesSmallerBatches(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{BatchMaxMsgs: 4})
	j := groupJournal(t, env, 2)
	round := func(name string, n int) {
		appends := newRuns(name, n, 1)
		flyTogether(t, j, appends)
		wantLanded(t, j, appends)
	}
	// Ten waiting appends: the server refuses the batch of ten; they are
	// appended one by one, and the group learns to ask for less.
	round("first", 10)
	if st := j.GroupStats(); st.Refused != 1 || st.Alone != 10 {
		t.Fatalf("group stats = %+v, want one batch refused and ten appends alone", st)
	}
	// Next time the flights are small enough.
	round("second", 10)
	if st := j.GroupStats(); st.Refused != 1 || st.Batches == 0 || st.MaxShare != 4 {
		t.Fatalf("group stats = %+v, want batches of at most 4 and no more refusals", st)
	}
}
