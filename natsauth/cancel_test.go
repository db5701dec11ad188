package natsauth_test

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

func cancelMessage(t *testing.T, runID string) []byte {
	t.Helper()
	b, err := json.Marshal(events.CancelMessage{RunID: runID, RequestedBy: events.Requester{ID: "dev@cityops"}, Reason: "natsauth"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Upstream publishes a cancel of its tenant's parked run; the worker, as
// the worker user, takes it from the cancels consumer and finishes the run
// cancelled. The approver may publish its tenant's cancels too; no role
// may publish another tenant's, and the auditor, the worker and the tool
// services publish none.
func TestCancelsArePublishedByUpstreamAndApproversAndHandledByTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := startPool(t, b, false)
	up, appr, aud := b.as(t, roleUpstream), b.as(t, roleApprover), b.as(t, roleAuditor)
	ctx := t.Context()

	runID := submit(t, up, "happy")
	until(t, aud, runID, func(e events.Event) bool { return e.Type == events.TypeParked })
	ack, err := up.js.Publish(ctx, events.CancelSubject(tenant, runID), cancelMessage(t, runID), jetstream.WithMsgID(nats.NewInbox()))
	if err != nil {
		t.Fatalf("publish a cancel as upstream: %v", err)
	}
	if ack.Stream != journal.StreamCancels {
		t.Errorf("cancel ack %+v, want one from %s", ack, journal.StreamCancels)
	}
	end := until(t, aud, runID, func(e events.Event) bool { return e.Type == events.TypeFinished })
	var d events.FinishedData
	if err := end.Decode(&d); err != nil || d.Reason != events.ReasonCancelled || d.Detail != "cancelled by dev@cityops: natsauth" {
		t.Errorf("finished %+v (%v), want cancelled by dev@cityops: natsauth", d, err)
	}

	// The approver's cancel of the finished run is stored and recorded as
	// ignored.
	ack, err = appr.js.Publish(ctx, events.CancelSubject(tenant, runID), cancelMessage(t, runID), jetstream.WithMsgID(nats.NewInbox()))
	if err != nil {
		t.Fatalf("publish a cancel as approver: %v", err)
	}
	until(t, appr, runID, func(e events.Event) bool {
		var r events.CancelRejectedData
		return e.Type == events.TypeCancelRejected && e.Decode(&r) == nil && r.CancelSeq == ack.Sequence && r.Class == events.CancelFinished
	})
	for _, c := range []*client{w, up, appr, aud} {
		c.noViolations(t)
	}

	for _, role := range []string{roleUpstream, roleApprover} {
		c := b.as(t, role)
		subject := events.CancelSubject(otherTenant, runID)
		c.deniedPublish(t, subject, c.publish(subject))
	}
	for _, role := range []string{roleAuditor, roleWorker, roleTools} {
		c := b.as(t, role)
		subject := events.CancelSubject(tenant, runID)
		c.deniedPublish(t, subject, c.publish(subject))
	}
}
