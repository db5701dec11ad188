package worker_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// Signed approvals: the worker verifies each approval's nkey signature
// against the approver's public key in the policy, refuses unsigned ones
// when the policy requires signatures, and refuses signatures made too
// long before the message arrived (replays).

// exampleConfigFile is the CityOps example's config as an operator runs
// it. It requires signed approvals.
var exampleConfigFile = filepath.Join("..", "examples", "cityops", "loopgate.yaml")

// requireSignatures restarts the bundle's workers with
// policy.require_signatures set to required (the CityOps example sets it).
// The harness's publishApproval and autoApprove sign exactly when it is set.
func requireSignatures(b *bundle, required bool) {
	b.stopPool()
	b.cfg.Policy.RequireSignatures = required
	b.startPool()
}

// signedApproval is an approval by approver of the pending question q of
// call callID, signed with kp as of at; kp nil leaves it unsigned.
func signedApproval(t *testing.T, runID, callID string, q events.ApprovalRequestedData, approver string, kp nkeys.KeyPair, at time.Time) approvals.Message {
	t.Helper()
	m := approvals.Message{RunID: runID, CallID: callID, ArgsHash: q.ArgsHash, Decision: approvals.Approve,
		Approver: approvals.Approver{ID: approver}, Reason: "ok, escalate"}
	if kp != nil {
		if err := approvals.Sign(&m, kp, at); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// publishMessage publishes an approval message on its call's subject and
// returns its LOOPGATE_APPROVALS sequence.
func (b *bundle) publishMessage(m any, runID, callID string) uint64 {
	b.t.Helper()
	payload, err := json.Marshal(m)
	if err != nil {
		b.t.Fatal(err)
	}
	ack, err := b.env.JS.Publish(b.t.Context(), events.ApprovalSubject("cityops", runID, callID), payload)
	if err != nil {
		b.t.Fatalf("publish approval: %v", err)
	}
	return ack.Sequence
}

// outcomeOf waits for what the workers made of approval message seq: the
// class of its approval_rejected event, or "approved".
func (b *bundle) outcomeOf(runID string, seq uint64) (class, detail string) {
	b.t.Helper()
	var rej events.ApprovalRejectedData
	var app events.ApprovedData
	e := b.waitFor(runID, "decision on approvals seq", func(e events.Event) bool {
		switch e.Type {
		case events.TypeApprovalRejected:
			rej = events.ApprovalRejectedData{}
			return e.Decode(&rej) == nil && rej.ApprovalSeq == seq
		case events.TypeApproved:
			app = events.ApprovedData{}
			return e.Decode(&app) == nil && app.ApprovalSeq == seq
		}
		return false
	})
	if e.Type == events.TypeApproved {
		return "approved", app.Approver
	}
	return rej.Class, rej.Detail
}

// The example config, read from its file, requires signatures: an unsigned
// approval by a configured approver who may approve the tool is refused
// (unsigned) and the write does not run.
func TestTheExampleConfigRefusesAnUnsignedApprovalAndTheWriteDoesNotRun(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.configFile = exampleConfigFile
	b := setup(t, o)
	if !b.cfg.Policy.RequireSignatures {
		t.Fatalf("%s does not require signatures: an unsigned approval would release a write", exampleConfigFile)
	}
	if a, ok := b.cfg.Policy.Approvers["supervisor@cityops"]; !ok || a.PublicKey == "" {
		t.Fatalf("supervisor@cityops is not a configured approver with a key: %+v", a)
	}
	runID, q := draftRun(t, b, "unsigned-1")

	unsigned := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", nil, time.Now())
	seq := b.publishMessage(unsigned, runID, "s1c1")
	if class, detail := b.outcomeOf(runID, seq); class != approvals.RejectUnsigned {
		t.Fatalf("unsigned approval by supervisor@cityops: %s (%s), want %s", class, detail, approvals.RejectUnsigned)
	}
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
		"approval_rejected:unsigned(draft_escalation)"})
	if rej := last[events.ApprovalRejectedData](t, evs, events.TypeApprovalRejected); rej.ApprovalSeq != seq || rej.Approver != "supervisor@cityops" {
		t.Fatalf("approval_rejected = %+v, want the unsigned message (seq %d)", rej, seq)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Fatalf("an unsigned approval released the write: %v", files)
	}
	if e := pendingEntry(t, b, runID, "s1c1"); !e.Pending() {
		t.Fatalf("entry = %+v, want still pending", e)
	}

	// The same approval signed with the supervisor's key releases it.
	seq = b.publishMessage(signedApproval(t, runID, "s1c1", q, "supervisor@cityops", exampleKey(t, "supervisor@cityops"), time.Now()), runID, "s1c1")
	if class, detail := b.outcomeOf(runID, seq); class != "approved" {
		t.Fatalf("the signed approval: %s (%s)", class, detail)
	}
	b.waitEnd(runID)
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Fatalf("outbox = %v, want the one approved draft", files)
	}
}

func TestOnlyAValidSignedApprovalReleasesAWriteWhenSignaturesAreRequired(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.configFile = exampleConfigFile // it requires signatures
	b := setup(t, o)
	runID, q := draftRun(t, b, "signed-1")
	supervisor, intern := exampleKey(t, "supervisor@cityops"), exampleKey(t, "intern@cityops")
	now := time.Now()

	forged := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", intern, now)
	tampered := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", supervisor, now)
	tampered.Decision = approvals.Deny // signed as an approval, sent as a denial
	lifted := signedApproval(t, runID, "s1c1", events.ApprovalRequestedData{ArgsHash: "sha256:" + strings.Repeat("0", 64)}, "supervisor@cityops", supervisor, now)
	lifted.ArgsHash = q.ArgsHash // a signature from another question's approval
	halfSigned := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", supervisor, now)
	halfSigned.SignedAt = ""

	attempts := []struct {
		name string
		msg  any
		want string
	}{
		{"unsigned", signedApproval(t, runID, "s1c1", q, "supervisor@cityops", nil, now), approvals.RejectUnsigned},
		{"signed with another approver's key", forged, approvals.RejectBadSignature},
		{"decision changed after signing", tampered, approvals.RejectBadSignature},
		{"signature lifted from another hash", lifted, approvals.RejectBadSignature},
		{"signed ten minutes ago: a replay", signedApproval(t, runID, "s1c1", q, "supervisor@cityops", supervisor, now.Add(-10*time.Minute)), approvals.RejectStale},
		{"signed ten minutes ahead", signedApproval(t, runID, "s1c1", q, "supervisor@cityops", supervisor, now.Add(10*time.Minute)), approvals.RejectStale},
		{"signed by an approver without the role", signedApproval(t, runID, "s1c1", q, "intern@cityops", intern, now), approvals.RejectNotAllowed},
		// Authenticated before anything the message claims is judged: an
		// approver the policy does not name has no key to verify against,
		// so this is bad_signature, never unknown_approver.
		{"signed by an approver not in the policy", signedApproval(t, runID, "s1c1", q, "mallory@elsewhere", approverKey(t, "mallory@elsewhere"), now), approvals.RejectBadSignature},
		{"unsigned, by an approver not in the policy", signedApproval(t, runID, "s1c1", q, "mallory@elsewhere", nil, now), approvals.RejectUnsigned},
		{"signed by the run's own principal", signedApproval(t, runID, "s1c1", q, "dev@cityops", exampleKey(t, "dev@cityops"), now), approvals.RejectSelf},
		{"signature without signed_at", halfSigned, approvals.RejectInvalid},
	}
	for _, a := range attempts {
		seq := b.publishMessage(a.msg, runID, "s1c1")
		if class, detail := b.outcomeOf(runID, seq); class != a.want {
			t.Errorf("%s: %s (%s), want %s", a.name, class, detail, a.want)
		}
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Fatalf("a rejected approval released the write: %v", files)
	}
	if e := pendingEntry(t, b, runID, "s1c1"); !e.Pending() {
		t.Fatalf("entry = %+v, want still pending", e)
	}

	valid := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", supervisor, time.Now())
	seq := b.publishMessage(valid, runID, "s1c1")
	if class, detail := b.outcomeOf(runID, seq); class != "approved" {
		t.Fatalf("the valid signed approval: %s (%s)", class, detail)
	}
	b.waitEnd(runID)

	// The same signed message again decides nothing: a duplicate is a no-op.
	if class, _ := b.outcomeOf(runID, b.publishMessage(valid, runID, "s1c1")); class != approvals.RejectNotPending {
		t.Fatalf("the duplicate: %s, want %s", class, approvals.RejectNotPending)
	}
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	rejected := make([]string, 0, len(attempts))
	for _, a := range attempts {
		rejected = append(rejected, "approval_rejected:"+a.want+"(draft_escalation)")
	}
	assertTrail(t, evs, concat(
		[]string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked"},
		rejected,
		[]string{"approved:approve(draft_escalation)", "executing(draft_escalation)", "executed:ok(draft_escalation)", "observed(draft_escalation)",
			"proposed:final", "finished:done", "approval_rejected:not_pending"},
	))
	if ok := last[events.ApprovedData](t, evs, events.TypeApproved); ok.ApprovalSeq != seq || ok.Approver != "supervisor@cityops" || ok.ArgsHash != q.ArgsHash {
		t.Fatalf("approved event = %+v, want the valid signed message (seq %d)", ok, seq)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Fatalf("outbox = %v, want exactly the one approved draft", files)
	}
	if executing := all(evs, events.TypeExecuting); len(executing) != 1 {
		t.Fatalf("%d executing events, want 1", len(executing))
	}
}

func TestUnsignedApprovalsAreAcceptedWhenNotRequiredButSignaturesAreStillVerified(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	// The CityOps example requires signatures; this test is about a policy
	// that does not.
	requireSignatures(b, false)
	runID, q := draftRun(t, b, "signed-2")
	supervisor := exampleKey(t, "supervisor@cityops")

	// A signature that is present is checked even when none is required:
	// a wrong key or an old signature never passes as "unsigned".
	for _, a := range []struct {
		name string
		msg  approvals.Message
		want string
	}{
		{"wrong key", signedApproval(t, runID, "s1c1", q, "supervisor@cityops", exampleKey(t, "intern@cityops"), time.Now()), approvals.RejectBadSignature},
		{"replayed", signedApproval(t, runID, "s1c1", q, "supervisor@cityops", supervisor, time.Now().Add(-time.Hour)), approvals.RejectStale},
		// Only without required signatures does an approver the policy
		// does not name get as far as unknown_approver (with them, the
		// message is unsigned or its signature cannot be verified).
		{"unsigned, by an approver not in the policy", signedApproval(t, runID, "s1c1", q, "mallory@elsewhere", nil, time.Now()), approvals.RejectUnknown},
	} {
		if class, detail := b.outcomeOf(runID, b.publishMessage(a.msg, runID, "s1c1")); class != a.want {
			t.Errorf("%s: %s (%s), want %s", a.name, class, detail, a.want)
		}
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Fatalf("a rejected approval released the write: %v", files)
	}

	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "unsigned is fine here")
	if class, detail := b.outcomeOf(runID, seq); class != "approved" {
		t.Fatalf("unsigned approval with signatures not required: %s (%s)", class, detail)
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat(
		[]string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
			"approval_rejected:bad_signature(draft_escalation)", "approval_rejected:stale_signature(draft_escalation)", "approval_rejected:unknown_approver(draft_escalation)",
			"approved:approve(draft_escalation)", "executing(draft_escalation)", "executed:ok(draft_escalation)", "observed(draft_escalation)"},
		[]string{"proposed:final", "finished:done"},
	))
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Fatalf("outbox = %v, want the approved draft", files)
	}
}

// signedUnknownWrite parks a run, with signatures required, on the approval
// of a create_ticket write that always times out (so each attempt asks a
// needs_human question next), and returns the bundle, the write's run
// count, the run and a signer of the supervisor's answers to s1c1.
func signedUnknownWrite(t *testing.T, taskID string) (*bundle, *atomic.Int32, string, func(approvals.Decision, string) approvals.Message) {
	t.Helper()
	runs := new(atomic.Int32)
	m, fns := ungated("create_ticket", runs, func(ctx context.Context, c tools.Call) (any, error) {
		<-ctx.Done() // always times out: the outcome is unknown
		return nil, ctx.Err()
	})
	m.Timeout = events.Duration(300 * time.Millisecond)
	b := setup(t, options{
		tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	requireSignatures(b, true)
	runID := b.submit(task(taskID, "ticketer"))
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(runID, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	b.waitType(runID, events.TypeParked, 1)
	sup := exampleKey(t, "supervisor@cityops")
	return b, runs, runID, func(d approvals.Decision, reason string) approvals.Message {
		msg := approvals.Message{RunID: runID, CallID: "s1c1", ArgsHash: q.ArgsHash, Decision: d,
			Approver: approvals.Approver{ID: "supervisor@cityops"}, Reason: reason}
		if err := approvals.Sign(&msg, sup, time.Now()); err != nil {
			t.Fatal(err)
		}
		return msg
	}
}

// A signature binds run, call, arguments and decision, not the round. The
// signed retry that decided round 1 of a needs_human question, published
// again (the same bytes, read from LOOPGATE_APPROVALS) while round 2
// waits, must not answer round 2: the write would run once more with no
// human asked. It is recorded as a stale signature; a human's own answer
// to round 2 still decides it.
func TestASignedDecisionCopiedIntoALaterRoundIsRejected(t *testing.T) {
	t.Parallel()
	b, runs, runID, sign := signedUnknownWrite(t, "signed-replay-1")
	retry := sign(approvals.Retry, "checked: no ticket exists")
	if c, d := b.outcomeOf(runID, b.publishMessage(retry, runID, "s1c1")); c != "approved" {
		t.Fatalf("the human's retry: %s %s", c, d)
	}
	b.waitType(runID, events.TypeParked, 2)
	if c, d := b.outcomeOf(runID, b.publishMessage(retry, runID, "s1c1")); c != approvals.RejectStale || !strings.Contains(d, "handled already") || !strings.Contains(d, "not round 2") {
		t.Fatalf("the copy in round 2: %s %s; want rejected as %s", c, d, approvals.RejectStale)
	}
	if c, d := b.outcomeOf(runID, b.publishMessage(sign(approvals.Abandon, "two unknown outcomes"), runID, "s1c1")); c != "approved" {
		t.Fatalf("the human's answer to round 2: %s %s", c, d)
	}
	b.waitEnd(runID)
	if n := runs.Load(); n != 2 {
		t.Errorf("the write ran %d times, want 2 (once, and once on the one retry)", n)
	}
}
