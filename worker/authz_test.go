package worker_test

// Authorization and tenant isolation: approvals that must not decide, and
// what a decision leaves where (found by a review, session 30).

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/tools"
)

// The self-approval rule compared the approver id (a key of
// policy.approvers) with the task's principal id byte for byte. The
// principal id is whatever the upstream gateway wrote: the same person
// spelled "Dev@CityOps" or "dev@cityops " was not "dev@cityops", and
// dev@cityops (operator and supervisor in the example) approved the write
// of his own run with his own signed key. Ids are now compared trimmed,
// in NFKC form and case-folded.
func TestSelfApprovalIsNotEvadedByAnotherSpellingOfThePrincipal(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	if !b.cfg.Policy.RequireSignatures || b.cfg.Policy.AllowSelfApproval {
		t.Fatalf("the example config should require signatures and forbid self-approval: %+v", b.cfg.Policy)
	}
	dev := exampleKey(t, "dev@cityops")
	for i, spelling := range []string{"Dev@CityOps", "dev@cityops ", "DEV@CITYOPS"} {
		tk := task("self-spelling-"+string(rune('a'+i)), "one-draft")
		tk.Principal.ID = spelling
		runID := b.submit(tk)
		b.waitType(runID, events.TypeParked, 1)
		q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
		seq := b.publishMessage(signedApproval(t, runID, "s1c1", q, "dev@cityops", dev, time.Now()), runID, "s1c1")
		if class, detail := b.outcomeOf(runID, seq); class != approvals.RejectSelf {
			t.Errorf("principal %q, approved by dev@cityops: %s (%s), want %s", spelling, class, detail, approvals.RejectSelf)
		}
	}
}

// A signature binds run, call, arguments and decision, not the round. The
// copy check used to look only for messages that *decided* an earlier
// round. A second signed retry sent for round 1 of a needs_human question
// (two supervisors, or one clicking twice) is rejected not_pending,
// because the first decided; the very same bytes published again once
// round 2 waited (within approval_max_age) decided round 2, a question no
// human had seen, and the write ran a third time. Now a copy of any
// handled message decides nothing.
func TestASignedAnswerRejectedInOneRoundCannotDecideTheNext(t *testing.T) {
	t.Parallel()
	b, runs, runID, sign := signedUnknownWrite(t, "round-replay-1")
	first := sign(approvals.Retry, "checked: no ticket exists")
	second := sign(approvals.Retry, "checked: no ticket exists (from the other console)")
	if c, d := b.outcomeOf(runID, b.publishMessage(first, runID, "s1c1")); c != "approved" {
		t.Fatalf("the human's retry of round 1: %s %s", c, d)
	}
	if c, d := b.outcomeOf(runID, b.publishMessage(second, runID, "s1c1")); c != approvals.RejectNotPending {
		t.Fatalf("the second answer to round 1: %s %s, want %s", c, d, approvals.RejectNotPending)
	}
	b.waitType(runID, events.TypeParked, 2) // round 2 asked: no human has seen it
	c, d := b.outcomeOf(runID, b.publishMessage(second, runID, "s1c1"))
	if c == "approved" {
		b.waitType(runID, events.TypeParked, 3)
		t.Fatalf("a copy of a signed answer sent for round 1 decided round 2 (%s); the write ran %d times, want 2 before a human answers round 2", d, runs.Load())
	}
	if c != approvals.RejectStale || !strings.Contains(d, "handled already") {
		t.Fatalf("the copy in round 2: %s %s; want it rejected as %s", c, d, approvals.RejectStale)
	}
}

// The README's redaction: sensitive values are replaced "in every event
// before it is stored, in approval entries, ...". A denial's reason was
// redacted in the approved event, but the decided entry in
// loopgate_approvals (readable by the approver role, whose keys do not
// name the tenant) kept it as the approver typed it.
func TestADecisionReasonIsRedactedInTheApprovalEntry(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "review-reason-redaction")
	const email = "jane.roe@example.com"
	m := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", exampleKey(t, "supervisor@cityops"), time.Now())
	m.Decision, m.Reason = approvals.Deny, "resident "+email+" asked us not to escalate"
	if err := approvals.Sign(&m, exampleKey(t, "supervisor@cityops"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if c, d := b.outcomeOf(runID, b.publishMessage(m, runID, "s1c1")); c != "approved" {
		t.Fatalf("the denial: %s %s", c, d)
	}
	evs := b.waitEnd(runID)
	if ev := last[events.ApprovedData](t, evs, events.TypeApproved); strings.Contains(ev.Reason, email) {
		t.Fatalf("the approved event holds the e-mail address: %q", ev.Reason)
	}
	if e := pendingEntry(t, b, runID, "s1c1"); strings.Contains(e.Reason, email) {
		t.Errorf("the decided approval entry holds the reason unredacted: %q (the approved event has it redacted)", e.Reason)
	}
}

// The resource check's answer must be {found, tenant} (README: "an answer
// that is not {found, tenant} is quoted" and the run stops). An answer
// that named the owning tenant but omitted found, or was null or {},
// decoded to Found false without error, and a resource the resolver said
// belonged to another tenant was taken for one nobody owns: the call ran.
func TestAResolverAnswerWithoutFoundDoesNotAllowTheCall(t *testing.T) {
	t.Parallel()
	for _, answer := range []any{map[string]any{"tenant": "elsewhere"}, nil} {
		b := resolverRun(t, func(context.Context, tools.Call) (any, error) { return answer, nil })
		evs := b.waitEnd(b.submit(task("review-res-nofound", "res-agent")))
		if ex := all(evs, events.TypeExecuted); len(ex) > 0 {
			fin := last[events.FinishedData](t, evs, events.TypeFinished)
			t.Errorf("resolver answered %v: the call ran (%d executed events), finished %s (%s); want it denied (resource) or the run stopped with an error naming the answer",
				answer, len(ex), fin.Reason, fin.Detail)
		}
	}
}

// A valid signed approval of a cityops run's call,
// published on another tenant's approvals subject, decides nothing: the
// run is read in the subject's tenant, where it does not exist. The run's
// entry stays pending and only an answer on its own subject decides it.
func TestAnApprovalOnAnotherTenantsSubjectDecidesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "review-cross-tenant")
	sup := exampleKey(t, "supervisor@cityops")
	payload, err := json.Marshal(signedApproval(t, runID, "s1c1", q, "supervisor@cityops", sup, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.env.JS.Publish(t.Context(), events.ApprovalSubject("othertenant", runID, "s1c1"), payload); err != nil {
		t.Fatal(err)
	}
	// Same run id token, same lane: decided after the one above.
	seq := b.publishMessage(signedApproval(t, runID, "s1c1", q, "intern@cityops", exampleKey(t, "intern@cityops"), time.Now()), runID, "s1c1")
	if c, d := b.outcomeOf(runID, seq); c != approvals.RejectNotAllowed {
		t.Fatalf("the intern's approval: %s %s", c, d)
	}
	if e := pendingEntry(t, b, runID, "s1c1"); !e.Pending() {
		t.Fatalf("an approval on another tenant's subject decided the entry: %+v", e)
	}
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(all(evs, events.TypeApproved)); n != 0 {
		t.Fatalf("%d approved events after an approval on another tenant's subject", n)
	}
	if c, d := b.outcomeOf(runID, b.publishMessage(signedApproval(t, runID, "s1c1", q, "supervisor@cityops", sup, time.Now()), runID, "s1c1")); c != "approved" {
		t.Fatalf("the approval on the run's own subject: %s %s", c, d)
	}
	b.waitEnd(runID)
}

// A signed message recorded as undecided (no worker could handle it in
// all its deliveries) was never judged: the README's remedy is to publish
// it again, and the very same bytes must then decide. The copy check
// skips it, where it refuses a copy of any message that was judged.
func TestASignedMessageRecordedUndecidedMayBeSentAgain(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: time.Second}
	o.retry = 20 * time.Millisecond
	o.crash = func(point string) {
		if point == "before:decision" && failing.Load() {
			panic("the handler fails on every delivery")
		}
	}
	b := setup(t, o)
	requireSignatures(b, true)
	runID, q := draftRun(t, b, "undecided-again-1")
	msg := approvals.Message{RunID: runID, CallID: "s1c1", ArgsHash: q.ArgsHash, Decision: approvals.Approve,
		Approver: approvals.Approver{ID: "supervisor@cityops"}, Reason: "ok"}
	if err := approvals.Sign(&msg, exampleKey(t, "supervisor@cityops"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if c, d := b.outcomeOf(runID, b.publishMessage(msg, runID, "s1c1")); c != approvals.RejectUndecided {
		t.Fatalf("the first copy: %s %s; want %s", c, d, approvals.RejectUndecided)
	}
	failing.Store(false)
	if c, d := b.outcomeOf(runID, b.publishMessage(msg, runID, "s1c1")); c != "approved" {
		t.Fatalf("the same message sent again: %s %s; want it to decide", c, d)
	}
	assertTrail(t, b.waitEnd(runID), concat([]string{"started", "proposed", "validated:ok(draft_escalation)",
		"approval_requested(draft_escalation)", "parked", "approval_rejected:undecided(draft_escalation)", "approved:approve(draft_escalation)",
		"executing(draft_escalation)", "executed:ok(draft_escalation)", "observed(draft_escalation)"}, []string{"proposed:final", "finished:done"}))
}
