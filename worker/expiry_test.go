package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
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

// A gated write is approved (round 1), runs, and times out: its outcome is
// unknown, and the run asks round 2 of the same call (needs_human) on the
// same schedule subject. Nobody answers round 2 and it expires. The model
// must hear what an abandoned unknown outcome tells it: the write may have
// taken effect and was not retried. It used to be told "EXPIRED ...
// Propose an alternative." (the wording for a write nobody approved,
// which never ran), an invitation to make the write again under a new call
// id, and so a new operation id that no idempotency record dedupes.
//
// The run reaching its end also shows that round 1's cancel did not take
// round 2's schedule with it (same subject): round 2 expired on time.
func TestAnExpiredUnknownOutcomeIsNotReportedAsANeverRunCall(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m := fakeTool("flaky_write", tools.Write, false)
	m.Timeout = events.Duration(300 * time.Millisecond)
	m.ApprovalTTL = events.Duration(2 * time.Second)
	b := setup(t, options{
		tools: []tools.Manifest{m},
		builtins: tools.Builtins{"flaky_write": func(ctx context.Context, c tools.Call) (any, error) {
			runs.Add(1)
			<-ctx.Done() // times out: the outcome is unknown
			return nil, ctx.Err()
		}},
		roles:   writerRoles("flaky_write"),
		agents:  map[string]config.Profile{"flaky": profile("flaky_write")},
		scripts: map[string]model.Model{"flaky": scripted(t, `{"tool_calls":[{"tool":"flaky_write","args":{"n":1}}]}`, `{"final_answer":{"summary":"gave up"}}`)},
	})
	runID := b.submit(task("expiry-review-unknown-1", "flaky"))
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	b.waitType(runID, events.TypeParked, 1)
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")

	evs := b.waitEnd(runID) // round 2 is woken by its scheduled expiry, no test action
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(flaky_write)",
		"approval_requested(flaky_write)", "parked", "approved:approve(flaky_write)",
		"executing(flaky_write)", "executed:timeout(flaky_write)",
		"approval_requested(flaky_write)", "parked", "approved:expired(flaky_write)",
		"observed(flaky_write)", "proposed:final", "finished:done",
	})
	if d := last[events.ApprovalRequestedData](t, evs, events.TypeApprovalRequested); d.Kind != string(approvals.KindNeedsHuman) || d.Round != 2 {
		t.Fatalf("second question: kind %s round %d, want needs_human round 2", d.Kind, d.Round)
	}
	var obs struct {
		Status, Error, Message string
	}
	if err := json.Unmarshal(last[events.ObservedData](t, evs, events.TypeObserved).Observation, &obs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(obs.Message, "unknown") || strings.Contains(obs.Message, "Propose an alternative") {
		t.Errorf("the model was told %q (error %q) of a write that ran and whose outcome is unknown: "+
			"want it told the outcome is unknown and the call was not retried, as for abandon", obs.Message, obs.Error)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the write ran %d times, want once", n)
	}
}

// A question's expiry that fires while no worker runs is stored as the
// run's wake-up on the work stream and waits there: the first pool to
// start expires the question.
func TestAnExpiryThatFiresWithNoWorkerIsTakenWhenOneStarts(t *testing.T) {
	t.Parallel()
	b, ran := expiringWrite(t)
	runID := b.submit(task("expiry-review-no-worker-1", "expiring"))
	b.waitType(runID, events.TypeParked, 1)
	b.stopPool()

	// The schedule fires into the work stream with nobody to take it.
	work, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	resume := events.ResumeSubject("cityops", runID)
	deadline := time.Now().Add(15 * time.Second)
	for {
		m, err := work.GetLastMsgForSubject(t.Context(), resume)
		if err == nil && m.Header.Get(jetstream.SchedulerHeader) != "" {
			break
		}
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled wake-up stored for the stopped pool: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID); err != nil || evs[len(evs)-1].Type != events.TypeParked {
		t.Fatalf("with no worker the run moved on: %v", err)
	}

	b.startPool()
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(slow_approver)", "approval_requested(slow_approver)", "parked",
		"approved:expired(slow_approver)", "observed(slow_approver)", "proposed:final", "finished:done",
	})
	if ran.Load() != 0 {
		t.Error("an expired call ran")
	}
}

// An earlier question's expiry schedule that outlived its decision (its
// cancel lost) fires while the run is parked on a later question: it
// must not expire the later one, whose expiry is a day away. The run
// stays parked, its later question pending, and goes on at its answer.
func TestAnEarlierQuestionsExpiryDoesNotExpireALaterOne(t *testing.T) {
	t.Parallel()
	draft := `{"tool_calls":[{"tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}}]}`
	b := setup(t, options{
		agents: map[string]config.Profile{"two-drafts": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"two-drafts": scripted(t, draft, draft, `{"final_answer":{"summary":"two drafts"}}`)},
	})
	runID := b.submit(task("expiry-review-later-1", "two-drafts"))
	q1 := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	b.waitType(runID, events.TypeParked, 1)
	b.publishApproval(runID, "s1c1", q1.ArgsHash, "approve", "supervisor@cityops", "first")
	asked := b.waitType(runID, events.TypeApprovalRequested, 2)
	if asked.CallID != "s2c1" {
		t.Fatalf("second question is about %s, want s2c1", asked.CallID)
	}
	q2 := last[events.ApprovalRequestedData](t, []events.Event{asked}, events.TypeApprovalRequested)
	b.waitType(runID, events.TypeParked, 2)

	// s1c1's schedule, as the worker writes it, left behind and due now.
	schedule := journal.SchedulesPrefix + ".cityops." + runID + ".s1c1"
	leftover := nats.NewMsg(schedule)
	leftover.Header.Set("Nats-Schedule", "@at "+time.Now().UTC().Add(time.Second).Truncate(time.Second).Format(time.RFC3339))
	leftover.Header.Set("Nats-Schedule-Target", events.ResumeSubject("cityops", runID))
	if _, err := b.env.JS.PublishMsg(t.Context(), leftover); err != nil {
		t.Fatal(err)
	}
	work, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := work.GetLastMsgForSubject(t.Context(), schedule); errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leftover schedule did not fire")
		}
	}
	consumerSettled(t, b, journal.StreamWork, journal.ConsumerWorkers)
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	if l := evs[len(evs)-1]; l.Type != events.TypeParked {
		t.Fatalf("after the earlier question's expiry the run's last event is %s, want parked", l.Type)
	}
	if e := pendingEntry(t, b, runID, "s2c1"); !e.Pending() {
		t.Fatalf("the later question's entry is %s after the earlier one's expiry fired", e.State)
	}
	// Its own schedule is still there (put back if the wake-up took it).
	if sm, err := work.GetLastMsgForSubject(t.Context(), journal.SchedulesPrefix+".cityops."+runID+".s2c1"); err != nil || sm.Header.Get("Nats-Schedule") == "" {
		t.Fatalf("the later question's expiry schedule: %v", err)
	}
	b.publishApproval(runID, "s2c1", q2.ArgsHash, "approve", "supervisor@cityops", "second")
	assertTrail(t, b.waitEnd(runID), concat([]string{"started"}, gatedStep("draft_escalation"), gatedStep("draft_escalation"), []string{"proposed:final", "finished:done"}))
}

// A decision is judged against the question's expiry by the time the
// approvals stream stored it (a server timestamp): "one that came in time
// decides, however long it waited for a worker". The expiry, too, fires
// by the server's clock (an @at schedule), and so the scheduled wake-up
// decides it. A worker woken for any other reason (a redelivered work
// message whose ack was lost, a lease's end, a handover) used to expire
// the question by its own clock: one 0.5 s ahead (within the README's
// "well under the 2 s grace"), woken 0.45 s before the expiry, expired it
// then, and an approval the server stored after that, still before the
// expiry, was refused as not_pending. Now such a wake-up reschedules the
// expiry and lets go, unless its clock is past the expiry by the grace.
func TestAWorkerAheadDoesNotExpireAQuestionBeforeItsTime(t *testing.T) {
	t.Parallel()
	clock := new(skewed)
	m := fakeTool("timely", tools.Write, false)
	m.ApprovalTTL = events.Duration(5 * time.Second)
	var ran atomic.Int32
	b := setup(t, options{
		tools:    []tools.Manifest{m},
		builtins: tools.Builtins{"timely": func(context.Context, tools.Call) (any, error) { ran.Add(1); return "ok", nil }},
		roles:    writerRoles("timely"),
		agents:   map[string]config.Profile{"timely": profile("timely")},
		scripts:  map[string]model.Model{"timely": scripted(t, `{"tool_calls":[{"tool":"timely","args":{"n":1}}]}`, `{"final_answer":{"summary":"done"}}`)},
		clock:    clock.now,
	})
	runID := b.submit(task("expiry-review-skew-1", "timely"))
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	b.waitType(runID, events.TypeParked, 1)

	time.Sleep(time.Until(q.ExpiresAt.Add(-450 * time.Millisecond)))
	clock.set(500 * time.Millisecond)
	// A wake-up that is not the expiry's (here: as a redelivered message).
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	// Handled (and, when the worker expired the question by its own
	// clock, so decided) before the approval is sent.
	consumerSettled(t, b, journal.StreamWork, journal.ConsumerWorkers)
	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "in time")
	am, err := b.env.JS.Stream(t.Context(), "LOOPGATE_APPROVALS")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := am.GetMsg(t.Context(), seq)
	if err != nil {
		t.Fatal(err)
	}
	if !stored.Time.Before(q.ExpiresAt) {
		t.Skipf("the approval was stored at %s, not before the expiry %s: the machine was too slow for this test", stored.Time, q.ExpiresAt)
	}

	evs := b.waitEnd(runID)
	d := last[events.ApprovedData](t, evs, events.TypeApproved)
	if d.Decision != string(approvals.Approve) || d.ApprovalSeq != seq {
		t.Errorf("the question was decided %s (approval seq %d), want approved by message %d, stored at %s, %s before the expiry at %s\ntrail: %s",
			d.Decision, d.ApprovalSeq, seq, stored.Time.Format(time.RFC3339Nano), q.ExpiresAt.Sub(stored.Time), q.ExpiresAt.Format(time.RFC3339Nano), strings.Join(trail(t, evs), " "))
	}
	if ran.Load() != 1 {
		t.Errorf("the write approved in time ran %d times, want once", ran.Load())
	}
}
