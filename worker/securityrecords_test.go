package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/schemas"
)

// Security records: an approval addressed to a run its subject's tenant
// does not have decides nothing and is recorded as a tenant-level
// security record (events.SecurityData), never dropped with a log line.

// publishOn publishes an approval message on tenant's approvals subject of
// run and call, and returns its LOOPGATE_APPROVALS sequence.
func (b *bundle) publishOn(tenant, runID, callID string, payload []byte) uint64 {
	b.t.Helper()
	ack, err := b.env.JS.Publish(b.t.Context(), events.ApprovalSubject(tenant, runID, callID), payload)
	if err != nil {
		b.t.Fatalf("publish approval: %v", err)
	}
	return ack.Sequence
}

// waitRecord waits for the security record of approval message seq in
// tenant and returns it, checked against the event schema and the security
// record's schema.
func (b *bundle) waitRecord(tenant string, seq uint64) (events.Event, events.SecurityData) {
	b.t.Helper()
	id := events.SecurityRecordID(tenant, seq)
	ctx, cancel := context.WithTimeout(b.t.Context(), 30*time.Second)
	defer cancel()
	for e, err := range b.env.Journal.Watch(ctx, events.RunFilter(tenant, id)) {
		if err != nil {
			b.t.Fatalf("watch security record %s/%s: %v", tenant, id, err)
		}
		checkSecurityRecord(b.t, e)
		var d events.SecurityData
		if err := e.Decode(&d); err != nil {
			b.t.Fatal(err)
		}
		return e, d
	}
	b.t.Fatalf("no security record of approvals seq %d in tenant %s: %v\nlogs:\n%s", seq, tenant, ctx.Err(), b.logs.String())
	return events.Event{}, events.SecurityData{}
}

// checkSecurityRecord asserts a security record's envelope: the only
// event of its pseudo-run, valid against both schemas loopgate ships.
func checkSecurityRecord(t testing.TB, e events.Event) {
	t.Helper()
	var d events.SecurityData
	if err := e.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if e.Type != events.TypeSecurity || e.Seq != 1 || e.RunID != events.SecurityRecordID(e.Tenant, d.ApprovalSeq) || e.CallID != "" || e.Tool != "" || e.Step != 0 {
		t.Fatalf("security record envelope %+v: want type security, seq 1, run id SecurityRecordID(%s, %d), no call, tool or step", e, e.Tenant, d.ApprovalSeq)
	}
	stored, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"event", "security"} {
		s, err := schemas.Compile(name)
		if err != nil {
			t.Fatal(err)
		}
		doc := stored
		if name == "security" {
			doc = e.Data
		}
		if res := s.ValidateJSON(doc); !res.IsValid() {
			t.Fatalf("security record does not match %s.schema.json: %v\n%s", name, schemas.Errors(res), doc)
		}
	}
}

// securityRecords returns every security record in the stream, of every
// tenant.
func (b *bundle) securityRecords() []events.Event {
	b.t.Helper()
	evs, err := b.env.Journal.Replay(b.t.Context(), events.SecurityFilter(""))
	if err != nil {
		b.t.Fatal(err)
	}
	return evs
}

// A correctly signed approval by the run's own tenant's supervisor,
// published on another tenant's subject (harbour), decides nothing: the
// subject's tenant gets an unknown_run record that says no more than for a
// run no tenant has, the run's own tenant an other_tenant record naming
// the subject, the run's trail and entry stay as they were, nothing runs;
// and the same approval on the right subject then decides the call.
func TestAnApprovalOnAnotherTenantsSubjectIsRecordedForBothTenants(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "stranger-1")
	before, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	m := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", exampleKey(t, "supervisor@cityops"), time.Now())
	payload, _ := json.Marshal(m)
	seq := b.publishOn("harbour", runID, "s1c1", payload)

	subject := "loopgate.approvals.harbour." + runID + ".s1c1"
	hEv, h := b.waitRecord("harbour", seq)
	cEv, c := b.waitRecord("cityops", seq)
	want := events.SecurityData{
		Class: events.SecurityUnknownRun, Detail: "tenant harbour has no run " + runID + ": the message decides nothing",
		Subject: subject, ClaimedRunID: runID, ClaimedCallID: "s1c1",
		Approver: "supervisor@cityops", Decision: "approve", ArgsHash: q.ArgsHash, Signature: events.SignatureVerified,
		ApprovalSeq: seq, Received: h.Received,
	}
	if h.Received.IsZero() || !h.Received.Equal(c.Received) {
		t.Errorf("received %s and %s: want the approvals stream's timestamp of the message on both", h.Received, c.Received)
	}
	assertRecord(t, "harbour's", h, want)
	want.Class = events.SecurityOtherTenant
	want.Detail = "an approval for call s1c1 of this tenant's run " + runID + " came on tenant harbour's subject: the message decides nothing, and the run's trail does not hold it"
	assertRecord(t, "cityops'", c, want)
	if hEv.Tenant != "harbour" || cEv.Tenant != "cityops" {
		t.Errorf("records of tenants %s and %s, want harbour and cityops", hEv.Tenant, cEv.Tenant)
	}
	if got := b.securityRecords(); len(got) != 2 {
		t.Errorf("%d security records in the stream, want exactly the two", len(got))
	}

	// Both records are written before the message is settled.
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	after, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(before, after, func(x, y events.Event) bool { return x.EventID == y.EventID }) {
		t.Fatalf("the run's trail changed:\n before %v\n after  %v", trail(t, before), trail(t, after))
	}
	if e := pendingEntry(t, b, runID, "s1c1"); !e.Pending() {
		t.Fatalf("the entry was decided: %+v", e)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Fatalf("the draft ran: outbox %v", files)
	}

	// The workers go on: the same decision on the run's own subject decides it.
	if class, d := b.outcomeOf(runID, b.publishMessage(m, runID, "s1c1")); class != "approved" {
		t.Fatalf("the approval on the run's own subject: %s (%s)", class, d)
	}
	assertTrail(t, b.waitEnd(runID), oneDraftApproved())
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Errorf("outbox %v, want the one approved draft", files)
	}
}

// An approval for a run no tenant has is an unknown_run record of its
// subject's tenant, whatever it holds: signed, or not an approval at all
// (its errors name the fields); one addressed to a security record's own
// id is one too. No event is written under the claimed run id, each
// message is settled, and the workers go on deciding.
func TestAnApprovalForARunThatDoesNotExistIsASecurityRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	ghost := events.RunID("cityops", "never-submitted")
	hash := "sha256:" + strings.Repeat("ab", 32)
	signed := approvalPayload(t, true, ghost, "s1c1", hash, "approve", "supervisor@cityops", "no such run")
	seq := b.publishOn("cityops", ghost, "s1c1", signed)
	_, d := b.waitRecord("cityops", seq)
	assertRecord(t, "a signed approval's", d, events.SecurityData{
		Class: events.SecurityUnknownRun, Detail: "tenant cityops has no run " + ghost + ": the message decides nothing",
		Subject: "loopgate.approvals.cityops." + ghost + ".s1c1", ClaimedRunID: ghost, ClaimedCallID: "s1c1",
		Approver: "supervisor@cityops", Decision: "approve", ArgsHash: hash, Signature: events.SignatureVerified,
		ApprovalSeq: seq, Received: d.Received,
	})

	junk := b.publishOn("cityops", ghost, "s9c9", []byte(`{"run_id":"`+ghost+`","call_id":"s9c9","decision":"approve"}`))
	_, d = b.waitRecord("cityops", junk)
	if d.Class != events.SecurityUnknownRun || d.Signature != events.SignatureUnsigned || d.Approver != "" || d.Decision != "approve" || d.ClaimedCallID != "s9c9" {
		t.Errorf("a message that is no approval: %+v", d)
	}
	if len(d.Errors) == 0 || !strings.Contains(fieldErrorsText(d.Errors), "args_hash") || !strings.Contains(fieldErrorsText(d.Errors), "approver") {
		t.Errorf("errors %v: want the missing args_hash and approver named", d.Errors)
	}

	record := events.SecurityRecordID("cityops", seq)
	atRecord := b.publishOn("cityops", record, "s1c1", approvalPayload(t, true, record, "s1c1", hash, "approve", "supervisor@cityops", ""))
	if _, d = b.waitRecord("cityops", atRecord); d.Class != events.SecurityUnknownRun || d.ClaimedRunID != record {
		t.Errorf("an approval addressed to a security record: %+v", d)
	}
	if got := b.securityRecords(); len(got) != 3 {
		t.Errorf("%d security records, want the three", len(got))
	}
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	if evs, _, err := b.env.Journal.Load(t.Context(), "cityops", ghost); err != nil || len(evs) != 0 {
		t.Errorf("the claimed run has %d events (%v), want none", len(evs), err)
	}

	runID, q := draftRun(t, b, "after-ghosts")
	if class, detail := b.outcomeOf(runID, b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")); class != "approved" {
		t.Fatalf("a valid approval after the refused ones: %s (%s)", class, detail)
	}
	assertTrail(t, b.waitEnd(runID), oneDraftApproved())
	if files := outboxFiles(t, b.outbox); len(files) != 1 {
		t.Errorf("outbox %v, want the one approved draft", files)
	}
}

// A message whose handling dies after its records are stored is decided
// again on its redelivery, which finds the records and writes no second
// ones: each tenant's record of a message is one event, however often the
// message is handled.
func TestASecurityRecordIsWrittenOnceAcrossRedeliveries(t *testing.T) {
	t.Parallel()
	var recorded atomic.Int32
	b := setup(t, options{retry: 50 * time.Millisecond, crash: func(point string) {
		if point == "after:security" && recorded.Add(1) == 1 {
			panic("the handler dies after recording")
		}
	}})
	runID := b.submit(task("stranger-redelivered", "escalation-assistant"))
	b.waitType(runID, events.TypeParked, 1)
	payload := approvalPayload(t, true, runID, "s3c1", "sha256:"+strings.Repeat("cd", 32), "approve", "supervisor@cityops", "")
	seq := b.publishOn("harbour", runID, "s3c1", payload)
	b.waitRecord("harbour", seq)
	b.waitRecord("cityops", seq)
	consumerSettled(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	if n := recorded.Load(); n != 2 {
		t.Fatalf("the message was handled to its records %d times, want 2 (the first handler died)", n)
	}
	var tenants []string
	for _, e := range b.securityRecords() {
		tenants = append(tenants, e.Tenant)
	}
	slices.Sort(tenants)
	if !slices.Equal(tenants, []string{"cityops", "harbour"}) {
		t.Fatalf("security records of tenants %v, want one of cityops and one of harbour", tenants)
	}
}

func assertRecord(t *testing.T, what string, got, want events.SecurityData) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s security record:\n got  %s\n want %s", what, g, w)
	}
}

func fieldErrorsText(errs []events.FieldError) string {
	var parts []string
	for _, e := range errs {
		parts = append(parts, e.Field+": "+e.Message)
	}
	return strings.Join(parts, "; ")
}
