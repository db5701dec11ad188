package worker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/seal"
	"github.com/loopgate/loopgate/tools"
)

// piiReason is a draft's reason quoting a resident's contact details: the
// redactor replaces both in every stored event.
const (
	piiEmail  = "jane.roe@example.com"
	piiPhone  = "555-867-5309"
	piiReason = "Open 9 days; the resident (" + piiEmail + ", " + piiPhone + ") called twice."
)

// piiDraft is a profile that proposes one draft whose reason holds PII,
// then answers.
func piiDraft(t *testing.T, key *seal.LocalKey) options {
	return options{
		sealKey: key,
		agents: map[string]config.Profile{"pii-draft": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"pii-draft": scripted(t,
			`{"tool_calls":[{"tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"`+piiReason+`"}}]}`,
			`{"final_answer":{"summary":"drafted"}}`)},
	}
}

func testSealKey(t *testing.T) *seal.LocalKey {
	t.Helper()
	k, err := seal.ParseKey([]byte(seal.NewKeyText()))
	if err != nil {
		t.Fatal(err)
	}
	lk, err := seal.NewLocalKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return lk
}

// drafts returns the contents of the outbox's drafts.
func drafts(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, name := range outboxFiles(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// noPIIInClear fails the test if any stored event holds the PII.
func noPIIInClear(t *testing.T, evs []events.Event) {
	t.Helper()
	for _, e := range evs {
		for _, s := range []string{piiEmail, piiPhone} {
			if strings.Contains(string(e.Data), s) {
				t.Errorf("%s event %d holds %q in clear: %s", e.Type, e.Seq, s, e.Data)
			}
		}
	}
}

// An approved write whose arguments hold PII runs with exactly the
// approved arguments: the stored events hold them redacted, and sealed.
// The run is parked between validation and execution, so the worker that
// runs the write reads its arguments from the stream, not from memory.
func TestAnApprovedWriteWhoseArgumentsHoldPIIRunsAsApproved(t *testing.T) {
	t.Parallel()
	b := setup(t, piiDraft(t, testSealKey(t)))
	runID := b.submit(task("sealed-1", "pii-draft"))
	b.autoApprove(runID, "supervisor@cityops", "approve", "")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, gatedStep("draft_escalation"), []string{"proposed:final", "finished:done"}))

	got := drafts(t, b.outbox)
	if len(got) != 1 || !strings.Contains(got[0], piiReason) {
		t.Fatalf("drafts %q: want one, with the approved reason %q", got, piiReason)
	}
	noPIIInClear(t, evs)

	v := last[events.ValidatedData](t, evs, events.TypeValidated)
	want, _ := json.Marshal(map[string]string{"request_id": "SR-10421", "reason": piiReason})
	_, hash, err := tools.CanonicalHash(want)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Redacted || v.Sealed == nil || v.ArgsHash != hash {
		t.Errorf("validated: redacted %v, sealed %v, args_hash %s; want redacted and sealed, hashing the real arguments (%s)", v.Redacted, v.Sealed != nil, v.ArgsHash, hash)
	}
	p := last[events.ProposedData](t, []events.Event{all(evs, events.TypeProposed)[0]}, events.TypeProposed)
	if c := p.Decision.ToolCalls[0]; !c.Redacted || c.Sealed == nil {
		t.Errorf("proposed call: redacted %v, sealed %v; want both", c.Redacted, c.Sealed != nil)
	}
	q := last[events.ApprovalRequestedData](t, evs, events.TypeApprovalRequested)
	if q.ArgsHash != hash {
		t.Errorf("the question binds args_hash %s, want the real arguments' %s", q.ArgsHash, hash)
	}
}

// A run parked on such a write survives the whole process: the server and
// the workers restart, and the new workers run the approved write with
// its real arguments.
func TestAParkedWriteWithPIIRunsAfterARestart(t *testing.T) {
	t.Parallel()
	b := setup(t, piiDraft(t, testSealKey(t)))
	runID := b.submit(task("sealed-restart-1", "pii-draft"))
	b.waitType(runID, events.TypeParked, 1)
	b.restart()
	b.autoApprove(runID, "supervisor@cityops", "approve", "")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, gatedStep("draft_escalation"), []string{"proposed:final", "finished:done"}))
	if got := drafts(t, b.outbox); len(got) != 1 || !strings.Contains(got[0], piiReason) {
		t.Fatalf("drafts %q: want one, with the approved reason", got)
	}
	noPIIInClear(t, evs)
}

// A worker that dies right after the proposal leaves the next one the
// sealed proposed arguments: it validates the real ones, and the write
// runs as approved.
func TestAProposalsSealedArgumentsOutliveItsWorker(t *testing.T) {
	t.Parallel()
	die := dieAt("after:proposed", 1)
	o := piiDraft(t, testSealKey(t))
	o.crash, o.layout, o.workers = die.hook, journal.Layout{AckWait: 500e6}, 2
	b := setup(t, o)
	runID := b.submit(task("sealed-proposal-1", "pii-draft"))
	b.autoApprove(runID, "supervisor@cityops", "approve", "")
	evs := b.waitEnd(runID)
	die.happened(t)
	assertTrail(t, evs, concat([]string{"started"}, gatedStep("draft_escalation"), []string{"proposed:final", "finished:done"}))
	if got := drafts(t, b.outbox); len(got) != 1 || !strings.Contains(got[0], piiReason) {
		t.Fatalf("drafts %q: want one, with the proposed reason", got)
	}
	noPIIInClear(t, evs)
}

// Deleting the tenant's data key while the write waits for its approval
// crypto-shreds its arguments: approved, it ends args_lost, saying why;
// nothing is written, and every event stays readable.
func TestShreddingTheTenantsKeyLosesOnlyTheSealedArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, piiDraft(t, testSealKey(t)))
	runID := b.submit(task("sealed-shred-1", "pii-draft"))
	b.waitType(runID, events.TypeParked, 1)
	if err := b.keyring.Shred(t.Context(), "cityops"); err != nil {
		t.Fatal(err)
	}
	b.autoApprove(runID, "supervisor@cityops", "approve", "")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started",
		"proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked", "approved:approve(draft_escalation)",
		"executed:args_lost(draft_escalation)", "observed(draft_escalation)",
		"proposed:final", "finished:done"})
	if got := drafts(t, b.outbox); len(got) != 0 {
		t.Fatalf("drafts %q: want none", got)
	}
	x := last[events.ExecutedData](t, evs, events.TypeExecuted)
	if x.ErrorClass != "args_lost" || !strings.Contains(x.Message, "crypto-shredded") {
		t.Errorf("executed %+v: want args_lost saying the key was deleted", x)
	}
	for _, e := range evs {
		var v map[string]any
		if err := json.Unmarshal(e.Data, &v); err != nil {
			t.Errorf("%s event %d does not read after shredding: %v", e.Type, e.Seq, err)
		}
	}
	noPIIInClear(t, evs)
}
