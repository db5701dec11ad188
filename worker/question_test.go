package worker_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A worker writes a question's pending entry just before the question's
// event. One that dies in between leaves an entry that loopgate pending
// lists, for a question the run's events do not hold. An approver who
// answers it before the run's message comes back to a worker must not
// make the trail record an answer to a question never asked (it would no
// longer fold, and the run could neither go on nor be stopped), and the
// answer must not be lost: the approvals handler asks the question from
// the entry, then decides it. (Found by killing worker processes under
// load while an approver answered from loopgate pending.)
func TestAnAnswerToAQuestionItsWorkerDiedBeforeAskingIsDecided(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	// The run's message comes back long after the answer is handled.
	o.layout = journal.Layout{AckWait: 20 * time.Second}
	var died *atomic.Bool
	o.crash, died = dieOnce("before:approval_requested")
	b := setup(t, o)
	runID := b.submit(task("unasked-1", "one-draft"))
	e := waitEntry(t, b, runID, "s1c1")
	// The entry is written just before the hook: wait for the death.
	for deadline := time.Now().Add(10 * time.Second); !died.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker never reached before:approval_requested")
		}
	}
	if !e.Pending() {
		t.Fatalf("entry %+v: want a pending entry left by the worker that died", e)
	}
	b.publishApproval(runID, "s1c1", e.ArgsHash, "approve", "supervisor@cityops", "ok")

	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)",
		"approved:approve(draft_escalation)", "executing(draft_escalation)", "executed:ok(draft_escalation)", "observed(draft_escalation)",
		"proposed:final", "finished:done"})
	q := last[events.ApprovalRequestedData](t, evs, events.TypeApprovalRequested)
	if q.ArgsHash != e.ArgsHash || q.Round != 1 || q.OperationID != e.OperationID || !q.ExpiresAt.Equal(e.ExpiresAt) {
		t.Errorf("question asked from the entry: %+v, want the entry's args hash, round 1, operation id and expiry (%+v)", q, e)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Errorf("drafts %v, want exactly one", files)
	}
}

// An entry for a call the run is not about to ask about (here: a call the
// run never proposed) is not decided: the answer is recorded as
// approval_rejected no_such_request, and the run goes on as before.
func TestAnAnswerToAStrayEntryIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "stray-1")
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	stray := pendingEntry(t, b, runID, "s1c1")
	stray.CallID = "s1c9"
	pkv, err := approvals.OpenIndex(t.Context(), b.env.JS, journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approvals.NewStore(kv, pkv).Request(t.Context(), stray); err != nil {
		t.Fatal(err)
	}
	b.publishApproval(runID, "s1c9", stray.ArgsHash, "approve", "supervisor@cityops", "ok")
	rej := b.waitType(runID, events.TypeApprovalRejected, 1)
	var d events.ApprovalRejectedData
	if err := rej.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if rej.CallID != "s1c9" || d.Class != approvals.RejectNoRequest {
		t.Errorf("answer to the stray entry: %s %+v, want approval_rejected %s for s1c9", rej.CallID, d, approvals.RejectNoRequest)
	}

	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
		"approval_rejected:no_such_request", "approved:approve(draft_escalation)", "executing(draft_escalation)", "executed:ok(draft_escalation)",
		"observed(draft_escalation)", "proposed:final", "finished:done"})
	if _, err := events.Fold(evs); err != nil {
		t.Errorf("the trail does not fold: %v", err)
	}
}

// dieOnce is a crash hook under which the first worker to reach point
// dies (its goroutine ends, its message unsettled), and whether one did.
func dieOnce(point string) (hook func(string), died *atomic.Bool) {
	died = new(atomic.Bool)
	return func(p string) {
		if p == point && died.CompareAndSwap(false, true) {
			runtime.Goexit()
		}
	}, died
}

// waitEntry waits for the call's approvals entry.
func waitEntry(t *testing.T, b *bundle, runID, callID string) approvals.Entry {
	t.Helper()
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	store := approvals.NewStore(kv, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		e, _, err := store.Get(t.Context(), runID, callID)
		if err == nil {
			return e
		}
		if !errors.Is(err, approvals.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("approvals entry %s/%s: %v", runID, callID, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An approval message that no worker can decide in all its deliveries is
// recorded in its run's trail as approval_rejected undecided, not dropped
// in silence once JetStream stops delivering it. Here the question's entry
// is gone from the bucket (deleted, as if lost), so every delivery is
// handed back for later.
func TestAnApprovalNoWorkerCanDecideIsRecordedAsUndecided(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: time.Second}
	o.retry = 20 * time.Millisecond
	b := setup(t, o)
	runID, q := draftRun(t, b, "undecided-1")
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(t.Context(), approvals.Key(runID, "s1c1")); err != nil {
		t.Fatal(err)
	}
	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")

	rej := b.waitType(runID, events.TypeApprovalRejected, 1)
	var d events.ApprovalRejectedData
	if err := rej.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Class != approvals.RejectUndecided || d.ApprovalSeq != seq || d.Approver != "supervisor@cityops" || d.Decision != "approve" || rej.CallID != "s1c1" {
		t.Errorf("recorded %s %+v, want approval_rejected %s of message %d (approve by supervisor@cityops) on s1c1", rej.CallID, d, approvals.RejectUndecided, seq)
	}
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
}

// The worker that takes up a run whose previous worker died between the
// question's entry and its event asks the question the entry holds: the
// event's expiry is the entry's, the one decisions are checked against,
// not a new one from the time it asks again.
func TestAQuestionAskedAgainKeepsItsEntrysExpiry(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{AckWait: time.Second}
	var died *atomic.Bool
	o.crash, died = dieOnce("before:approval_requested")
	b := setup(t, o)
	runID := b.submit(task("asked-again-1", "one-draft"))
	e := waitEntry(t, b, runID, "s1c1")
	// The message comes back after AckWait to the other worker, which
	// asks the question and parks the run.
	b.waitType(runID, events.TypeParked, 1)
	var q events.ApprovalRequestedData
	asked := b.waitType(runID, events.TypeApprovalRequested, 1)
	if err := asked.Decode(&q); err != nil {
		t.Fatal(err)
	}
	if !died.Load() || !q.ExpiresAt.Equal(e.ExpiresAt) || q.ArgsHash != e.ArgsHash {
		t.Errorf("question asked again: expires %s, args hash %s; the entry left: expires %s, args hash %s (worker died: %v)",
			q.ExpiresAt, q.ArgsHash, e.ExpiresAt, e.ArgsHash, died.Load())
	}
	// And the run's expiry wake-up is scheduled for it too.
	work, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := work.GetLastMsgForSubject(t.Context(), journal.SchedulesPrefix+".cityops."+runID+".s1c1")
	if err != nil {
		t.Fatalf("the parked run's expiry schedule: %v", err)
	}
	want := "@at " + e.ExpiresAt.UTC().Add(time.Second-time.Nanosecond).Truncate(time.Second).Format(time.RFC3339)
	if got := sched.Header.Get("Nats-Schedule"); got != want {
		t.Errorf("the expiry is scheduled %q, want the entry's expiry %q", got, want)
	}
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	assertTrail(t, b.waitEnd(runID), oneDraftApproved())
}

// An approval message whose handler dies on every delivery (here: the
// first delivery's lane dies after deciding the entry and before its
// approved event; the second waits in that dead lane) is decided once
// more by every pool when JetStream reports it out of deliveries: the
// decision its first handler made reaches the trail and the run goes on.
func TestAnApprovalWhoseHandlerDiedEachTimeIsDecidedFromTheAdvisory(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: 500 * time.Millisecond}
	o.crash = func(point string) {
		if point == "before:approved" && calls.Add(1) == 1 {
			runtime.Goexit() // this handler is gone, its message unsettled
		}
	}
	b := setup(t, o)
	runID, q := draftRun(t, b, "advisory-1")
	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")

	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	if d := last[events.ApprovedData](t, evs, events.TypeApproved); d.ApprovalSeq != seq {
		t.Errorf("approved by message %d, want %d", d.ApprovalSeq, seq)
	}
	if n := calls.Load(); n < 2 {
		t.Errorf("the approved event was appended after %d tries, want the dead handler's and another", n)
	}
	if !strings.Contains(b.logs.String(), "ran out of deliveries") {
		t.Errorf("not decided from the max-deliveries advisory; logs:\n%s", b.logs.String())
	}
}

// An approval message whose every delivery decides the entry and then
// fails before the approved event (here the append panics) is not recorded
// as undecided once its deliveries run out: the entry holds its decision,
// so the last delivery wakes the run, which records that decision itself
// and goes on.
func TestAnApprovalThatDecidedButNeverRecordedWakesItsRun(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: time.Second}
	o.retry = 20 * time.Millisecond
	o.crash = func(point string) {
		if point == "before:approved" && calls.Add(1) <= 2 {
			panic("approved append fails")
		}
	}
	b := setup(t, o)
	runID, q := draftRun(t, b, "decided-unrecorded-1")
	wakes := wakeUps(t, b, runID)
	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")

	evs := b.waitEnd(runID)
	approvedOnce(t, b, evs, wakes, 1, "the last delivery's one")
	if d := last[events.ApprovedData](t, evs, events.TypeApproved); d.ApprovalSeq != seq || d.Approver != "supervisor@cityops" {
		t.Errorf("approved %+v, want message %d's decision by supervisor@cityops", d, seq)
	}
	if n := len(all(evs, events.TypeApprovalRejected)); n != 0 {
		t.Errorf("%d approval_rejected events, want none: the message did decide", n)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the approved event was tried %d times, want 3 (two deliveries, then the woken run)", n)
	}
	if !strings.Contains(b.logs.String(), "waking the run to record it") {
		t.Errorf("the last delivery did not wake the run; logs:\n%s", b.logs.String())
	}
}

// A decision the approvals entry holds and the run does not (its handler
// decided and then could not record it: a JetStream outage outlasted the
// message's deliveries) is recorded by the run itself at its next wake-up,
// and the run goes on. Before, such a run stayed parked for good: nothing
// pending for an approver to answer, no message left to deliver, and its
// expiry found the entry decided and let go.
func TestADecisionOnlyTheEntryHoldsIsRecordedByTheRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, oneDraft(t, "drafted"))
	runID, _ := draftRun(t, b, "entry-only-1")
	kv, err := b.env.JS.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	store := approvals.NewStore(kv, nil)
	e, rev, err := store.Get(ctx, runID, "s1c1")
	if err != nil {
		t.Fatal(err)
	}
	// Decided as the handler decides, and nothing more: no approved event,
	// no wake-up, no message.
	e.State, e.Decision, e.DecidedBy, e.Reason = "approved", approvals.Approve, "supervisor@cityops", "looks right"
	e.DecidedAt, e.DecisionSeq = time.Now().UTC(), 4242
	if err := store.Decide(ctx, e, rev); err != nil {
		t.Fatal(err)
	}
	// A wake-up: the question's expiry, or any other.
	if _, err := b.env.JS.Publish(ctx, events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	got := last[events.ApprovedData](t, evs, events.TypeApproved)
	want := events.ApprovedData{Kind: "approval", Round: 1, Decision: "approve", Approver: "supervisor@cityops", ArgsHash: e.ArgsHash, Reason: "looks right", ApprovalSeq: 4242}
	if got != want {
		t.Errorf("approved event %+v, want the entry's decision %+v", got, want)
	}
}

// A human's retry decides one round of a needs_human question. Its
// message is held while the run goes on under it; when the retried write's
// outcome is unknown again, the run asks round 2, and here its worker dies
// before acknowledging the message. The redelivered message must not
// answer round 2, which no human has seen: the write would run a third
// time on one decision.
func TestARedeliveredDecisionDoesNotAnswerTheNextRound(t *testing.T) {
	t.Parallel()
	var runs, parks atomic.Int32
	m, fns := ungated("create_ticket", &runs, func(ctx context.Context, c tools.Call) (any, error) {
		if runs.Load() <= 2 {
			<-ctx.Done() // times out: the outcome is unknown
			return nil, ctx.Err()
		}
		return map[string]string{"ticket": "T-1"}, nil
	})
	m.Timeout = events.Duration(300 * time.Millisecond)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{AckWait: 500 * time.Millisecond},
		crash: func(point string) {
			if point == "after:parked" && parks.Add(1) == 2 {
				runtime.Goexit() // the run parked on round 2; its worker is gone, the decision unacknowledged
			}
		},
	})
	runID := b.submit(task("redelivered-retry-1", "ticketer"))
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	b.waitType(runID, events.TypeParked, 1)
	first := b.publishApproval(runID, "s1c1", q.ArgsHash, "retry", "supervisor@cityops", "checked: no ticket exists")
	b.waitType(runID, events.TypeParked, 2)
	// The decision's message comes back and is settled.
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	b.publishApproval(runID, "s1c1", q.ArgsHash, "abandon", "supervisor@cityops", "two unknown outcomes: a human will check")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(create_ticket)",
		"executing(create_ticket)", "executed:timeout(create_ticket)",
		"approval_requested(create_ticket)", "parked", "approved:retry(create_ticket)",
		"executing(create_ticket)", "executed:timeout(create_ticket)",
		"approval_requested(create_ticket)", "parked", "approved:abandon(create_ticket)",
		"observed(create_ticket)", "proposed:final", "finished:done",
	})
	if d := last[events.ApprovedData](t, evs, events.TypeApproved); d.ApprovalSeq == first {
		t.Errorf("round 2 was decided by round 1's message (approval seq %d)", first)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the write ran %d times, want 2 (once, and once on the one retry)", n)
	}
}
