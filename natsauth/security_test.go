package natsauth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// firstRecord follows filter as c until the first security record of
// approval message seq and returns its data.
func firstRecord(t *testing.T, c *client, filter string, seq uint64) (events.Event, events.SecurityData) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	j, err := journal.New(ctx, c.js)
	if err != nil {
		t.Fatalf("%s: journal: %v", c.user, err)
	}
	for e, err := range j.Watch(ctx, filter) {
		if err != nil {
			t.Fatalf("%s: follow %s: %v", c.user, filter, err)
		}
		var d events.SecurityData
		if e.Decode(&d) == nil && d.ApprovalSeq == seq {
			return e, d
		}
	}
	t.Fatalf("%s: no security record of approvals seq %d on %s: %v", c.user, seq, filter, ctx.Err())
	return events.Event{}, events.SecurityData{}
}

// The least-privilege accounts carry security records end to end: an
// approver's message for a run its tenant does not have is recorded by
// the worker (on loopgate.events.<tenant>.<record_id>.security, which its
// permissions allow), every tenant's records are read by the auditor, and
// the approver reads its own tenant's but not another's, nor every
// tenant's at once.
func TestSecurityRecordsAreWrittenByTheWorkerAndReadByAuditors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := startPool(t, b, false)
	appr, aud := b.as(t, roleApprover), b.as(t, roleAuditor)
	ghost := events.RunID(tenant, "natsauth-no-such-task")
	msg := supervisorApproval(t, ghost, "s1c1", "sha256:"+strings.Repeat("0a", 32), "natsauth")
	ack, err := appr.js.Publish(t.Context(), events.ApprovalSubject(tenant, ghost, "s1c1"), msg, jetstream.WithMsgID(nats.NewInbox()))
	if err != nil {
		t.Fatalf("publish the approval as approver: %v", err)
	}

	e, d := firstRecord(t, aud, events.SecurityFilter(""), ack.Sequence)
	if e.Tenant != tenant || e.RunID != events.SecurityRecordID(tenant, ack.Sequence) || d.Class != events.SecurityUnknownRun ||
		d.ClaimedRunID != ghost || d.Approver != "supervisor@cityops" || d.Signature != events.SignatureVerified {
		t.Errorf("the auditor read %s/%s %+v: want cityops' unknown_run record of the verified approval for %s", e.Tenant, e.RunID, d, ghost)
	}
	if e2, _ := firstRecord(t, appr, events.SecurityFilter(tenant), ack.Sequence); e2.EventID != e.EventID {
		t.Errorf("the approver read record %s, the auditor %s", e2.EventID, e.EventID)
	}

	evs, err := appr.js.Stream(t.Context(), journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	for _, filter := range []string{events.SecurityFilter("harbor"), events.SecurityFilter("")} {
		appr.deniedPublish(t, "$JS.API.CONSUMER.CREATE.LOOPGATE_EVENTS.*."+filter, func(ctx context.Context) error {
			_, err := evs.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
			return err
		})
	}
	for _, c := range []*client{w, aud} {
		c.noViolations(t)
	}
}
