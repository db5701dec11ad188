package worker_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	trailcheck "github.com/loopgate/loopgate/trail"
)

// A parked run can finish with its question unanswered: its wake-up
// failed every delivery (here its agent profile was missing from a bad
// config, as in TestARunWhoseProfileWasRemovedIsStoppedNotStranded) and
// it was stopped as a poison message. Its question is withdrawn, and
// loopgate pending no longer lists it. Once the config is fixed, an
// approver who answers it all the same (from an old listing) must get
// approval_rejected, the one event allowed after finished, not an approved
// event appended after the run's end (a trail trail.Check calls broken, an
// approval of a run that is over).
func TestAnAnswerToAQuestionOfAStoppedRunIsRejected(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: 300 * time.Millisecond}
	o.retry = 20 * time.Millisecond
	b := setup(t, o)
	runID, q := draftRun(t, b, "wake-stopped-1")

	// A bad config deploy: the profile is gone, and a wake-up of the
	// parked run stops it.
	b.stopPool()
	profile := b.cfg.Agents["one-draft"]
	delete(b.cfg.Agents, "one-draft")
	b.startPool()
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	b.waitEnd(runID)
	consumerSettled(t, b, journal.StreamWork, journal.ConsumerWorkers)
	// The question is withdrawn: an approver has nothing left to decide,
	// and loopgate pending no longer lists it (it used to, until it aged
	// out with the question).
	if e := pendingEntry(t, b, runID, "s1c1"); e.State != approvals.StateWithdrawn {
		t.Errorf("entry %+v: want the stopped run's question withdrawn", e)
	}
	if listed := pendingListed(t, b); len(listed) != 0 {
		t.Errorf("loopgate pending lists %d questions of a stopped run: %+v", len(listed), listed)
	}

	// The config is fixed; the approver answers the question as listed before.
	b.stopPool()
	b.cfg.Agents["one-draft"] = profile
	b.startPool()
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "late but fine")
	b.waitFor(runID, "answer after the end", func(e events.Event) bool {
		return e.Type == events.TypeApproved || e.Type == events.TypeApprovalRejected
	})
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	consumerSettled(t, b, journal.StreamWork, journal.ConsumerWorkers)

	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
		"finished:error", "approval_rejected:" + approvals.RejectNotPending + "(draft_escalation)"})
	c := trailcheck.New("cityops", runID)
	for i, e := range evs {
		c.Add(trailcheck.Stored{Event: e, StreamSeq: uint64(i + 1), Subject: events.EventSubject("cityops", runID, e.Type), MsgID: fmt.Sprintf("%s/%d", runID, e.Seq)})
	}
	if v := c.Verdict(); len(v.Problems) > 0 {
		t.Errorf("trail.Check: %+v", v.Problems)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Errorf("drafts written for a stopped run: %v", files)
	}
}

// pendingListed is what loopgate pending lists for the tenant cityops.
func pendingListed(t *testing.T, b *bundle) []approvals.Entry {
	t.Helper()
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	index, err := approvals.OpenIndex(t.Context(), b.env.JS, journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	got, err := approvals.NewStore(kv, index).Pending(t.Context(), "cityops")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A worker writes a question's pending entry just before asking it (see
// TestAnAnswerToAQuestionItsWorkerDiedBeforeAskingIsDecided). A task whose
// workers die there on every delivery is stopped as a poison message with
// its question never asked; the entry they left is withdrawn with the run,
// not listed by loopgate pending until it expires (it used to be: only
// questions the run's events held were withdrawn).
func TestAnUnaskedQuestionOfAStoppedRunIsWithdrawn(t *testing.T) {
	t.Parallel()
	var deaths atomic.Int32
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: 300 * time.Millisecond}
	o.workers = 3 // two die, one is left pulling
	o.crash = func(point string) {
		if point == "before:approval_requested" && deaths.Add(1) <= 2 {
			runtime.Goexit()
		}
	}
	b := setup(t, o)
	runID := b.submit(task("unasked-stopped-1", "one-draft"))
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "finished:error"})
	if n := deaths.Load(); n != 2 {
		t.Errorf("%d workers died before asking, want one per delivery (2)", n)
	}
	// The stop withdraws the entry after its finished event is durable.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e := pendingEntry(t, b, runID, "s1c1")
		if e.State == approvals.StateWithdrawn {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entry %+v: want the unasked question of the stopped run withdrawn", e)
		}
	}
	if listed := pendingListed(t, b); len(listed) != 0 {
		t.Errorf("loopgate pending lists %d questions of a stopped run: %+v", len(listed), listed)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Errorf("drafts written for a stopped run: %v", files)
	}
}
