package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A decided question leaves nothing behind in the server: it is no longer
// listed (LOOPGATE_PENDING), and its expiry is cancelled, whose schedule
// would otherwise stay, about 500 bytes of heap and a stored message,
// until it fired an approval TTL (24 h by default) later, to find the run
// long past the question.
func TestADecidedQuestionLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "cancel-expiry")
	schedule := journal.SchedulesPrefix + ".cityops." + runID + ".s1c1"
	work, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	m, err := work.GetLastMsgForSubject(t.Context(), schedule)
	if err != nil || m.Header.Get("Nats-Schedule") == "" {
		t.Fatalf("the parked run's expiry schedule: %v %v", m, err)
	}
	index, err := b.env.JS.Stream(t.Context(), journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	listed := events.PendingSubject("cityops", runID, "s1c1")
	if _, err := index.GetLastMsgForSubject(t.Context(), listed); err != nil {
		t.Fatalf("the parked run's question is not listed: %v", err)
	}
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "")
	if fin := last[events.FinishedData](t, b.waitEnd(runID), events.TypeFinished); fin.Reason != events.ReasonDone {
		t.Fatalf("run ended %s", fin.Reason)
	}
	if _, err := index.GetLastMsgForSubject(t.Context(), listed); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the decided question is still listed: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := work.GetLastMsgForSubject(t.Context(), schedule)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break // cancelled, and the cancel aged out
		}
		if time.Now().After(deadline) {
			var headers nats.Header
			if m != nil {
				headers = m.Header
			}
			t.Fatalf("the decided question's expiry schedule is still stored (err %v, headers %v)", err, headers)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A schedule that outlives its run (its cancel was lost: the handler
// died between the decision and the cancel, or the answer came before the
// worker scheduled the expiry) fires after the run's end. Its wake-up reads
// the run's last event, sees the end, and stops there: reading the whole
// run for each would cost, an approval TTL after every busy hour, as much
// as the runs did.
func TestAWakeUpAfterTheRunsEndReadsOnlyItsLastEvent(t *testing.T) {
	t.Parallel()
	m := fakeTool("quick_write", tools.Write, false)
	b := setup(t, options{
		tools:       []tools.Manifest{m},
		builtins:    tools.Builtins{"quick_write": func(context.Context, tools.Call) (any, error) { return "ok", nil }},
		roles:       writerRoles("quick_write"),
		agents:      map[string]config.Profile{"writer": profile("quick_write")},
		scripts:     map[string]model.Model{"writer": scripted(t, `{"tool_calls":[{"tool":"quick_write","args":{"n":1}}]}`, `{"final_answer":{"summary":"written"}}`)},
		coldJournal: true, // a run in the cache is read with one get anyway
	})
	runID := b.submit(task("wake-after-end", "writer"))
	b.autoApprove(runID, "supervisor@cityops", "approve", "")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, gatedStep("quick_write"), []string{"proposed:final", "finished:done"}))

	// The leftover schedule, as the worker writes it, due in a second.
	schedule := journal.SchedulesPrefix + ".cityops." + runID + ".s1c1"
	work, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	leftover := nats.NewMsg(schedule)
	leftover.Header.Set("Nats-Schedule", "@at "+time.Now().UTC().Add(2*time.Second).Truncate(time.Second).Format(time.RFC3339))
	leftover.Header.Set("Nats-Schedule-Target", events.ResumeSubject("cityops", runID))
	gets, err := b.env.Conn.SubscribeSync("$JS.API.STREAM.MSG.GET." + journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	consumers, err := b.env.Conn.SubscribeSync("$JS.API.CONSUMER.CREATE." + journal.StreamEvents + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.env.JS.PublishMsg(t.Context(), leftover); err != nil {
		t.Fatal(err)
	}

	// The schedule fires (it is purged as its wake-up is stored), and the
	// wake-up is delivered and settled.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := work.GetLastMsgForSubject(t.Context(), schedule)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expiry schedule did not fire: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		info, err := work.Consumer(t.Context(), journal.ConsumerWorkers)
		if err != nil {
			t.Fatal(err)
		}
		ci, err := info.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wake-up was not settled: %d pending, %d unacknowledged", ci.NumPending, ci.NumAckPending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := b.env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := gets.Pending(); n != 1 {
		t.Errorf("the wake-up after the end made %d message gets on %s, want 1 (the last event)", n, journal.StreamEvents)
	}
	if n, _, _ := consumers.Pending(); n != 0 {
		t.Errorf("the wake-up after the end made %d consumers on %s, want none", n, journal.StreamEvents)
	}
	after, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil || len(after) != len(evs) {
		t.Errorf("after the wake-up the run has %d events (%v), want the same %d", len(after), err, len(evs))
	}
}

// After the upgrade that added the index of pending questions, a starting
// pool lists the questions asked before it (parked runs an operator must
// still see in loopgate pending).
func TestAStartingPoolListsTheQuestionsAskedBeforeTheIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	// As before the upgrade: no pool, no index. (The setup pool's start
	// used the index: it marked it as used, with nothing to list.)
	b.stopPool()
	if err := b.env.JS.DeleteStream(t.Context(), journal.StreamPending); err != nil {
		t.Fatal(err)
	}
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	asked := approvals.Entry{Kind: approvals.KindApproval, Round: 1, Tenant: "cityops", RunID: events.RunID("cityops", "before-the-index"),
		CallID: "s3c1", Tool: "draft_escalation", ArgsHash: "sha256:00", Principal: "dev@cityops", RequestedAt: at, ExpiresAt: at.Add(time.Hour)}
	if _, err := approvals.NewStore(kv, nil).Request(t.Context(), asked); err != nil { // as before the index
		t.Fatal(err)
	}
	// The upgraded version's layout: the index, new and empty.
	if err := journal.Ensure(t.Context(), b.env.JS, journal.Layout{AckWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	index, err := approvals.OpenIndex(t.Context(), b.env.JS, journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	store := approvals.NewStore(kv, index)
	if got, err := store.Pending(t.Context(), "cityops"); err != nil || len(got) != 0 {
		t.Fatalf("listed before a pool started: %d (%v)", len(got), err)
	}
	upgraded := b.newPool()
	t.Cleanup(func() { _ = upgraded.Stop(context.Background()) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := store.Pending(t.Context(), "cityops")
		if err == nil && len(got) == 1 && got[0].RunID == asked.RunID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the question asked before the index is not listed: %v %v\nlogs:\n%s", got, err, b.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
