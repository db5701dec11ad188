package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/idempotency"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// The write path: approvals bound to exact arguments, parked runs,
// idempotent side effects and unknown outcomes.

// draftRun submits a one-draft run of the CityOps tools (draft SR-10421,
// then a final answer) and waits until it is parked on the draft.
func draftRun(t *testing.T, b *bundle, id string) (runID string, q events.ApprovalRequestedData) {
	t.Helper()
	runID = b.submit(task(id, "one-draft"))
	b.waitType(runID, events.TypeParked, 1)
	e := b.waitType(runID, events.TypeApprovalRequested, 1)
	if err := e.Decode(&q); err != nil {
		t.Fatal(err)
	}
	return runID, q
}

// oneDraft is a profile that proposes one draft, then answers.
func oneDraft(t *testing.T, final string) options {
	return options{
		agents: map[string]config.Profile{"one-draft": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"one-draft": scripted(t,
			`{"tool_calls":[{"tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}}]}`,
			`{"final_answer":{"summary":"`+final+`"}}`)},
	}
}

// oneDraftApproved is the trail of a oneDraft run whose draft was approved.
func oneDraftApproved() []string {
	return concat([]string{"started"}, gatedStep("draft_escalation"), []string{"proposed:final", "finished:done"})
}

func pendingEntry(t *testing.T, b *bundle, runID, callID string) approvals.Entry {
	t.Helper()
	kv, err := b.env.JS.KeyValue(t.Context(), "loopgate_approvals")
	if err != nil {
		t.Fatal(err)
	}
	e, _, err := approvals.NewStore(kv, nil).Get(t.Context(), runID, callID)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestApprovedWriteRunsExactlyTheApprovedActionOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "approve-1")

	// Parked: a pending entry bound to the exact arguments, and no side effect.
	e := pendingEntry(t, b, runID, "s1c1")
	if !e.Pending() || e.ArgsHash != q.ArgsHash || e.Tool != "draft_escalation" || e.Principal != "dev@cityops" {
		t.Fatalf("entry = %+v, want pending for the exact call", e)
	}
	if !strings.Contains(string(q.Args), "SR-10421") || q.OperationID != events.OperationID(runID, "s1c1") || !q.ExpiresAt.After(time.Now()) {
		t.Fatalf("the approval preview is not the exact action: %+v", q)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Fatalf("a draft was written before approval: %v", files)
	}

	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "looks right")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	ok := last[events.ApprovedData](t, evs, events.TypeApproved)
	if ok.Approver != "supervisor@cityops" || ok.ArgsHash != q.ArgsHash || ok.Reason != "looks right" {
		t.Errorf("approved event = %+v", ok)
	}
	// The model was asked twice in all: never again after the approval.
	if n := len(all(evs, events.TypeProposed)); n != 2 {
		t.Errorf("model asked %d times, want 2", n)
	}
	files := outboxFiles(t, b.outbox)
	if len(files) != 1 || files[0] != "escalation-"+q.OperationID+".txt" {
		t.Errorf("outbox = %v, want exactly the approved draft", files)
	}
	if e := pendingEntry(t, b, runID, "s1c1"); e.State != "approved" || e.DecidedBy != "supervisor@cityops" {
		t.Errorf("entry after approval = %+v", e)
	}
}

func TestDenialReachesTheModelAsData(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "the supervisor said no; nothing was drafted"))
	runID, q := draftRun(t, b, "deny-1")
	b.publishApproval(runID, "s1c1", q.ArgsHash, "deny", "supervisor@cityops", "already escalated by phone")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
		"approved:deny(draft_escalation)", "observed(draft_escalation)", "proposed:final", "finished:done",
	})
	obs := string(dataOf(t, all(evs, events.TypeObserved)[0]))
	if !strings.Contains(obs, "DENIED by supervisor@cityops: already escalated by phone. Propose an alternative.") {
		t.Errorf("denial observation = %s", obs)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Errorf("a denied draft was written: %v", files)
	}
}

func TestDenialStopsTheRunWhenTheToolSaysSo(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	m := fakeTool("wire_money", tools.Write, false)
	m.OnDeny = tools.OnDenyStop
	b := setup(t, options{
		tools:    []tools.Manifest{m},
		builtins: tools.Builtins{"wire_money": func(context.Context, tools.Call) (any, error) { ran.Add(1); return "sent", nil }},
		roles:    writerRoles("wire_money"),
		agents:   map[string]config.Profile{"payer": profile("wire_money")},
		scripts:  map[string]model.Model{"payer": scripted(t, `{"tool_calls":[{"tool":"wire_money","args":{"n":100}}]}`, `{"final_answer":{"summary":"never"}}`)},
	})
	runID := b.submit(task("stop-1", "payer"))
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	b.waitType(runID, events.TypeParked, 1)
	b.publishApproval(runID, "s1c1", q.ArgsHash, "deny", "supervisor@cityops", "no")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(wire_money)", "approval_requested(wire_money)", "parked",
		"approved:deny(wire_money)", "finished:cancelled",
	})
	if ran.Load() != 0 {
		t.Error("a denied call ran")
	}
}

// writerRoles lets operators call tool and supervisors approve it, keeping
// the CityOps grants.
func writerRoles(tool string) map[string]config.Role {
	return map[string]config.Role{
		"operator":   {Call: []string{"lookup_complaints", "slow_lookup", "get_procedure", "draft_escalation", tool}},
		"supervisor": {Approve: []string{"draft_escalation", tool}},
	}
}

func TestApprovalsThatMustNotReleaseAWriteAreRejectedAndAudited(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "reject-1")
	stale := "sha256:" + strings.Repeat("0", 64)
	// Each message is validly signed by its approver's own key (the
	// example requires signatures), so what is rejected is what it says.
	attempts := []struct {
		hash, decision, approver string
		wantClass                string
	}{
		{stale, "approve", "supervisor@cityops", approvals.RejectHashMismatch},
		{q.ArgsHash, "approve", "intern@cityops", approvals.RejectNotAllowed},
		{q.ArgsHash, "approve", "dev@cityops", approvals.RejectSelf}, // operator and supervisor, but dev asked for this run
		// Signed with a key the policy does not know: a message is
		// authenticated before its approver is looked up, and an approver
		// missing from the policy has no key to verify against. With
		// signatures required this is bad_signature; unknown_approver is
		// reached only when they are not (signature_test.go).
		{q.ArgsHash, "approve", "mallory@elsewhere", approvals.RejectBadSignature},
		{q.ArgsHash, "retry", "supervisor@cityops", approvals.RejectWrongKind},
	}
	for i, a := range attempts {
		b.publishApproval(runID, "s1c1", a.hash, a.decision, a.approver, "")
		e := b.waitType(runID, events.TypeApprovalRejected, i+1)
		var d events.ApprovalRejectedData
		_ = e.Decode(&d)
		if d.Class != a.wantClass || d.Approver != a.approver {
			t.Errorf("%s with %s: rejected as %q (%s), want %q", a.approver, a.hash[:12], d.Class, d.Detail, a.wantClass)
		}
	}
	// A message that is not an approval at all is audited too.
	if _, err := b.env.JS.Publish(t.Context(), events.ApprovalSubject("cityops", runID, "s1c1"), []byte(`{"run_id":"`+runID+`","decision":"approve","approver":{"id":"supervisor@cityops","roles":["admin"]}}`)); err != nil {
		t.Fatal(err)
	}
	e := b.waitType(runID, events.TypeApprovalRejected, len(attempts)+1)
	var d events.ApprovalRejectedData
	_ = e.Decode(&d)
	if d.Class != approvals.RejectInvalid || len(d.Errors) == 0 {
		t.Errorf("a malformed approval was rejected as %+v", d)
	}
	// Nothing changed: still pending, nothing written.
	if e := pendingEntry(t, b, runID, "s1c1"); !e.Pending() {
		t.Fatalf("entry decided by a rejected message: %+v", e)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Fatalf("written without a valid approval: %v", files)
	}
	// The valid approval still works.
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "")
	if fin := last[events.FinishedData](t, b.waitEnd(runID), events.TypeFinished); fin.Reason != events.ReasonDone {
		t.Fatalf("run ended %s", fin.Reason)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Fatalf("outbox = %v, want one draft", files)
	}
}

func TestRacingApprovalsOneWinsAndReplaysAreNoOps(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "race-1")
	var wg sync.WaitGroup
	for _, d := range []string{"approve", "deny", "approve", "deny"} {
		wg.Go(func() { b.publishApproval(runID, "s1c1", q.ArgsHash, d, "supervisor@cityops", d) })
	}
	wg.Wait()
	evs := b.waitEnd(runID)
	// Replay the winning message after the run ended: a no-op on record.
	won := last[events.ApprovedData](t, evs, events.TypeApproved)
	b.publishApproval(runID, "s1c1", q.ArgsHash, won.Decision, "supervisor@cityops", "replayed")
	b.waitType(runID, events.TypeApprovalRejected, 4)
	evs, _, _ = b.env.Journal.Load(t.Context(), "cityops", runID)
	if n := len(all(evs, events.TypeApproved)); n != 1 {
		t.Fatalf("%d approved events, want exactly one winner", n)
	}
	for _, e := range all(evs, events.TypeApprovalRejected) {
		var d events.ApprovalRejectedData
		_ = e.Decode(&d)
		if d.Class != approvals.RejectNotPending {
			t.Errorf("a losing or replayed approval was rejected as %q", d.Class)
		}
	}
	want := 0
	if won.Decision == "approve" {
		want = 1
	}
	if files := outboxFiles(t, b.outbox); len(files) != want {
		t.Errorf("%s won, outbox has %d drafts, want %d", won.Decision, len(files), want)
	}
}

// expiringWrite is a bundle whose "expiring" agent proposes one write,
// slow_approver, whose question expires 1 s after it is asked, then
// answers; ran counts the write's runs.
func expiringWrite(t *testing.T) (b *bundle, ran *atomic.Int32) {
	t.Helper()
	m := fakeTool("slow_approver", tools.Write, false)
	m.ApprovalTTL = events.Duration(time.Second)
	ran = new(atomic.Int32)
	return setup(t, options{
		tools:    []tools.Manifest{m},
		builtins: tools.Builtins{"slow_approver": func(context.Context, tools.Call) (any, error) { ran.Add(1); return "ok", nil }},
		roles:    writerRoles("slow_approver"),
		agents:   map[string]config.Profile{"expiring": profile("slow_approver")},
		scripts:  map[string]model.Model{"expiring": scripted(t, `{"tool_calls":[{"tool":"slow_approver","args":{"n":1}}]}`, `{"final_answer":{"summary":"nobody answered"}}`)},
	}), ran
}

func TestPendingApprovalExpiresAndIsTreatedAsADenial(t *testing.T) {
	t.Parallel()
	b, ran := expiringWrite(t)
	runID := b.submit(task("expire-1", "expiring"))
	evs := b.waitEnd(runID) // woken by the scheduled message, no test action
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(slow_approver)", "approval_requested(slow_approver)", "parked",
		"approved:expired(slow_approver)", "observed(slow_approver)", "proposed:final", "finished:done",
	})
	if obs := string(dataOf(t, all(evs, events.TypeObserved)[0])); !strings.Contains(obs, "EXPIRED") {
		t.Errorf("expiry observation = %s", obs)
	}
	if e := pendingEntry(t, b, runID, "s1c1"); e.State != "expired" {
		t.Errorf("entry = %+v, want expired", e)
	}
	// A late approval changes nothing, and says it came too late.
	q := last[events.ApprovalRequestedData](t, evs, events.TypeApprovalRequested)
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "late")
	if d := last[events.ApprovalRejectedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRejected, 1)}, events.TypeApprovalRejected); d.Class != approvals.RejectExpired {
		t.Errorf("late approval rejected as %q", d.Class)
	}
	if ran.Load() != 0 {
		t.Error("an expired call ran")
	}
}

// An approval stored before its question expired decides it, even when
// the question's expiry comes before any handler decides the message: here
// the handler dies on it and its redelivery waits out AckWait, long after
// the expiry. The expiry decides it first, as its handler would have.
func TestAnApprovalStoredInTimeIsNotBeatenByTheExpiry(t *testing.T) {
	t.Parallel()
	m := fakeTool("timely", tools.Write, false)
	m.ApprovalTTL = events.Duration(2 * time.Second)
	var ran, died atomic.Int32
	b := setup(t, options{
		tools:    []tools.Manifest{m},
		builtins: tools.Builtins{"timely": func(context.Context, tools.Call) (any, error) { ran.Add(1); return "ok", nil }},
		roles:    writerRoles("timely"),
		agents:   map[string]config.Profile{"timely": profile("timely")},
		scripts:  map[string]model.Model{"timely": scripted(t, `{"tool_calls":[{"tool":"timely","args":{"n":1}}]}`, `{"final_answer":{"summary":"approved in time"}}`)},
		// The handler's message comes back only after the expiry.
		layout: journal.Layout{AckWait: 20 * time.Second},
		crash: func(point string) {
			if point == "before:decision" && died.Add(1) == 1 {
				runtime.Goexit() // this handler is gone, its message unsettled
			}
		},
	})
	runID := b.submit(task("in-time-1", "timely"))
	b.waitType(runID, events.TypeParked, 1)
	q := b.waitType(runID, events.TypeApprovalRequested, 1)
	var req events.ApprovalRequestedData
	if err := q.Decode(&req); err != nil {
		t.Fatal(err)
	}
	seq := b.publishApproval(runID, q.CallID, req.ArgsHash, "approve", "supervisor@cityops", "in time")

	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(timely)", "approval_requested(timely)", "parked",
		"approved:approve(timely)", "executing(timely)", "executed:ok(timely)", "observed(timely)", "proposed:final", "finished:done",
	})
	if d := last[events.ApprovedData](t, evs, events.TypeApproved); d.ApprovalSeq != seq {
		t.Errorf("approved by message %d, want %d", d.ApprovalSeq, seq)
	}
	if died.Load() == 0 {
		t.Error("the handler did not die on the message: the test did not test the expiry")
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("the approved write ran %d times, want once", n)
	}
}

// idemStore opens the idempotency bucket of the bundle's server.
func idemStore(t *testing.T, b *bundle) *idempotency.Store {
	t.Helper()
	kv, err := b.env.JS.KeyValue(t.Context(), "loopgate_idempotency")
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.NewStore(kv)
}

// ungated is a write tool without approval, counting its runs.
func ungated(name string, runs *atomic.Int32, fn tools.Func) (tools.Manifest, tools.Builtins) {
	m := fakeTool(name, tools.Write, false)
	m.Approval = tools.ApprovalNone
	return m, tools.Builtins{name: func(ctx context.Context, c tools.Call) (any, error) {
		runs.Add(1)
		if fn != nil {
			return fn(ctx, c)
		}
		return map[string]string{"ticket": "T-" + c.OperationID[:8]}, nil
	}}
}

func TestARecordedOperationIsNotExecutedAgain(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := ungated("create_ticket", &runs, nil)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":7}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	// An earlier execution of this very operation completed (as after a
	// crash between the tool's side effect and the executed event).
	runID := events.RunID("cityops", "recorded-1")
	op := events.OperationID(runID, "s1c1")
	_, hash, _ := tools.CanonicalHash([]byte(`{"n":7}`))
	store := idemStore(t, b)
	if _, _, _, err := store.Claim(t.Context(), idempotency.Record{OperationID: op, ArgsHash: hash, RunID: runID, CallID: "s1c1", Tool: "create_ticket", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	rec, rev, _ := store.Get(t.Context(), op)
	rec.State, rec.Result = idempotency.Completed, json.RawMessage(`{"ticket":"T-first"}`)
	if _, err := store.Set(t.Context(), rec, rev); err != nil {
		t.Fatal(err)
	}

	evs := b.waitEnd(b.submit(task("recorded-1", "ticketer")))
	assertTrail(t, evs, concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	if runs.Load() != 0 {
		t.Fatalf("the tool ran %d times for a completed operation", runs.Load())
	}
	x := last[events.ExecutedData](t, evs, events.TypeExecuted)
	if string(x.Result) != `{"ticket":"T-first"}` || !strings.Contains(x.Message, "recorded result") {
		t.Errorf("executed = %+v, want the recorded result", x)
	}
}

func TestTheSameOperationWithOtherArgumentsIsAConflict(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := ungated("create_ticket", &runs, nil)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":7}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	runID := events.RunID("cityops", "conflict-1")
	op := events.OperationID(runID, "s1c1")
	_, other, _ := tools.CanonicalHash([]byte(`{"n":8}`))
	if _, _, _, err := idemStore(t, b).Claim(t.Context(), idempotency.Record{OperationID: op, ArgsHash: other, RunID: runID, CallID: "s1c1", Tool: "create_ticket"}); err != nil {
		t.Fatal(err)
	}
	evs := b.waitEnd(b.submit(task("conflict-1", "ticketer")))
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(create_ticket)", "executing(create_ticket)", "executed:conflict(create_ticket)", "observed(create_ticket)",
		"proposed:final", "finished:done",
	})
	if runs.Load() != 0 {
		t.Fatal("a conflicting operation executed")
	}
}

// hangsOnce blocks its first call until ctx is done (the deadline), then
// answers at once.
func hangsOnce(calls *atomic.Int32) tools.Func {
	return func(ctx context.Context, c tools.Call) (any, error) {
		if calls.Load() == 1 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return map[string]string{"ticket": "T-" + c.OperationID[:8]}, nil
	}
}

func timingOut(name string, runs *atomic.Int32) (tools.Manifest, tools.Builtins) {
	m, fns := ungated(name, runs, hangsOnce(runs))
	m.Timeout = events.Duration(300 * time.Millisecond)
	return m, fns
}

// timedOutThenRetriedByAHuman is the trail of a one-call run whose write
// (not idempotent, no reconcile tool) timed out, was asked to a human,
// retried on their answer and succeeded, before the final answer.
func timedOutThenRetriedByAHuman(tool string) []string {
	return []string{
		"started", "proposed", "validated:ok(" + tool + ")",
		"executing(" + tool + ")", "executed:timeout(" + tool + ")",
		"approval_requested(" + tool + ")", "parked", "approved:retry(" + tool + ")",
		"executing(" + tool + ")", "executed:ok(" + tool + ")", "observed(" + tool + ")",
		"proposed:final", "finished:done",
	}
}

func TestATimedOutWriteIsNeverRetriedBlindly(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := timingOut("create_ticket", &runs)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	runID := b.submit(task("timeout-1", "ticketer"))
	// Not idempotent, no reconcile tool: a human decides.
	b.waitType(runID, events.TypeParked, 1)
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	if q.Kind != "needs_human" || runs.Load() != 1 {
		t.Fatalf("after a timeout: question %q, %d runs; want needs_human after one run", q.Kind, runs.Load())
	}
	b.publishApproval(runID, "s1c1", q.ArgsHash, "retry", "supervisor@cityops", "checked: no ticket exists")
	assertTrail(t, b.waitEnd(runID), timedOutThenRetriedByAHuman("create_ticket"))
	if runs.Load() != 2 {
		t.Errorf("tool ran %d times, want 2 (once, then once more on a human's retry)", runs.Load())
	}
}

func TestAnUnknownOutcomeMarkedDoneIsNotRunAgain(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := timingOut("create_ticket", &runs)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	runID := b.submit(task("markdone-1", "ticketer"))
	b.waitType(runID, events.TypeParked, 1)
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	b.publishApproval(runID, "s1c1", q.ArgsHash, "mark_done", "supervisor@cityops", "ticket T-1 exists")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(create_ticket)",
		"executing(create_ticket)", "executed:timeout(create_ticket)",
		"approval_requested(create_ticket)", "parked", "approved:mark_done(create_ticket)", "observed(create_ticket)",
		"proposed:final", "finished:done",
	})
	if runs.Load() != 1 {
		t.Errorf("tool ran %d times after mark_done, want 1", runs.Load())
	}
}

func TestATimedOutWriteIsReconciled(t *testing.T) {
	t.Parallel()
	var runs, checks atomic.Int32
	m, fns := timingOut("create_ticket", &runs)
	m.Reconcile = "ticket_status"
	m.MaxEffectDelay = events.Duration(100 * time.Millisecond) // ticket_status cannot fence
	status := fakeTool("ticket_status", tools.Read, false)
	fns["ticket_status"] = func(ctx context.Context, c tools.Call) (any, error) {
		checks.Add(1)
		return map[string]any{"applied": true, "result": map[string]string{"ticket": "T-late"}}, nil
	}
	b := setup(t, options{
		tools: []tools.Manifest{m, status}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	evs := b.waitEnd(b.submit(task("reconcile-1", "ticketer")))
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(create_ticket)",
		"executing(create_ticket)", "executed:timeout(create_ticket)",
		"reconciled(create_ticket)", "observed(create_ticket)",
		"proposed:final", "finished:done",
	})
	if runs.Load() != 1 || checks.Load() != 1 {
		t.Errorf("tool ran %d times, reconcile %d: want 1 and 1", runs.Load(), checks.Load())
	}
	if obs := string(dataOf(t, all(evs, events.TypeObserved)[0])); !strings.Contains(obs, "T-late") || !strings.Contains(obs, `"status":"ok"`) {
		t.Errorf("observation after reconcile = %s", obs)
	}
}

func TestAnIdempotentToolIsRetriedAfterATimeout(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := timingOut("create_ticket", &runs)
	m.Idempotent = true
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	evs := b.waitEnd(b.submit(task("idem-1", "ticketer")))
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(create_ticket)",
		"executing(create_ticket)", "executed:timeout(create_ticket)",
		"executing(create_ticket)", "executed:ok(create_ticket)", "observed(create_ticket)",
		"proposed:final", "finished:done",
	})
	ex := all(evs, events.TypeExecuting)
	var a, c events.ExecutingData
	_ = ex[0].Decode(&a)
	_ = ex[1].Decode(&c)
	if a.OperationID != c.OperationID {
		t.Errorf("a retry changed the operation id: %s, %s", a.OperationID, c.OperationID)
	}
}

// TestAnInterruptedWriteIsNotRunAgain simulates a worker that died between
// the write-ahead executing event and the end of the call: the trail ends
// at executing and the operation is in flight. A wake-up must not re-run it.
func TestAnInterruptedWriteIsNotRunAgain(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m, fns := ungated("create_ticket", &runs, nil)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	tk := task("crash-1", "ticketer")
	runID := events.RunID("cityops", tk.TaskID)
	canonical, hash, _ := tools.CanonicalHash([]byte(`{"n":1}`))
	op := events.OperationID(runID, "s1c1")
	limits := withDefaults(events.Limits{})
	trailOf := []struct {
		typ  events.Type
		step int
		call string
		data any
	}{
		{events.TypeStarted, 0, "", events.StartedData{Task: tk, Profile: "ticketer", Model: "scripted", Limits: limits, Tools: []string{"create_ticket"}}},
		{events.TypeProposed, 1, "", events.ProposedData{Decision: &events.Decision{ToolCalls: []events.ToolCall{{ID: "s1c1", Tool: "create_ticket", Args: canonical}}}}},
		{events.TypeValidated, 1, "s1c1", events.ValidatedData{Status: events.ValidOK, Args: canonical, ArgsHash: hash, Permission: "write"}},
		{events.TypeExecuting, 1, "s1c1", events.ExecutingData{OperationID: op, Attempt: 1, Deadline: time.Now().Add(time.Second), ArgsHash: hash}},
	}
	var last uint64
	for i, s := range trailOf {
		raw, _ := json.Marshal(s.data)
		tool := ""
		if s.call != "" {
			tool = "create_ticket"
		}
		var err error
		last, err = b.env.Journal.Append(t.Context(), last, events.Event{
			EventID: events.UUIDv7.NewEventID(), RunID: runID, Tenant: "cityops", Seq: uint64(i + 1), Type: s.typ,
			Time: time.Now().UTC(), Step: s.step, CallID: s.call, Tool: tool, Data: raw,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, err := idemStore(t, b).Claim(t.Context(), idempotency.Record{OperationID: op, ArgsHash: hash, RunID: runID, CallID: "s1c1", Tool: "create_ticket", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	// The task is redelivered (here: published again), as after the crash.
	b.submit(tk)
	b.waitType(runID, events.TypeParked, 1)
	e := b.waitType(runID, events.TypeApprovalRequested, 1)
	var q events.ApprovalRequestedData
	_ = e.Decode(&q)
	if q.Kind != "needs_human" {
		t.Fatalf("question kind %q, want needs_human", q.Kind)
	}
	evs, _, _ := b.env.Journal.Load(t.Context(), "cityops", runID)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(create_ticket)", "executing(create_ticket)",
		"executed:unknown(create_ticket)", "approval_requested(create_ticket)", "parked",
	})
	if runs.Load() != 0 {
		t.Fatal("an interrupted write was run again blindly")
	}
	b.publishApproval(runID, "s1c1", q.ArgsHash, "abandon", "supervisor@cityops", "will check by hand")
	evs = b.waitEnd(runID)
	if obs := string(dataOf(t, all(evs, events.TypeObserved)[0])); !strings.Contains(obs, "ABANDONED by supervisor@cityops") {
		t.Errorf("abandon observation = %s", obs)
	}
	if runs.Load() != 0 {
		t.Fatal("an abandoned write ran")
	}
}

func TestParkedRunsSurviveAServerRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "restart-1")
	b.restart()
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "")
	if fin := last[events.FinishedData](t, b.waitEnd(runID), events.TypeFinished); fin.Reason != events.ReasonDone {
		t.Fatalf("run ended %s after restart", fin.Reason)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Fatalf("outbox = %v", files)
	}
}

var _ = errors.Is
var _ = fmt.Sprint
var _ jetstream.Msg
