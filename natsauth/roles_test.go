package natsauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

const (
	tenant      = "cityops"
	otherTenant = "harbor"
	callID      = "s1c1"
)

// seeded is what the worker wrote before a role looks: a cityops run with
// three events and a pending question on one of its calls, and a run of
// another tenant.
type seeded struct {
	runID, otherRunID string
	// lastSeq is the stream seq of the cityops run's last event.
	lastSeq uint64
	entry   approvals.Entry
}

func seed(t *testing.T, b *bundle) seeded {
	t.Helper()
	ctx := t.Context()
	w := b.as(t, roleWorker)
	j, err := journal.New(ctx, w.js)
	if err != nil {
		t.Fatal(err)
	}
	s := seeded{runID: events.RunID(tenant, "t-1"), otherRunID: events.RunID(otherTenant, "t-1")}
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	ev := func(tn, run string, seq uint64, typ events.Type) events.Event {
		return events.Event{EventID: events.UUIDv7.NewEventID(), RunID: run, Tenant: tn, Seq: seq, Type: typ,
			Time: at.Add(time.Duration(seq) * time.Second), Step: 1, Data: json.RawMessage(`{}`)}
	}
	s.lastSeq, err = j.Append(ctx, 0,
		ev(tenant, s.runID, 1, events.TypeStarted),
		ev(tenant, s.runID, 2, events.TypeProposed),
		ev(tenant, s.runID, 3, events.TypeApprovalRequested))
	if err != nil {
		t.Fatalf("append as worker: %v", err)
	}
	if _, err := j.Append(ctx, 0, ev(otherTenant, s.otherRunID, 1, events.TypeStarted)); err != nil {
		t.Fatalf("append as worker: %v", err)
	}
	kv, err := w.js.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	s.entry = approvals.Entry{Kind: approvals.KindApproval, Round: 1, Tenant: tenant, RunID: s.runID, CallID: callID,
		Step: 1, Tool: "draft_escalation", Args: json.RawMessage(`{"request_id":"SR-10421"}`), ArgsHash: "sha256:00",
		OperationID: "op-1", Principal: "dev@cityops", RequestedAt: at, ExpiresAt: at.Add(time.Hour)}
	pkv, err := approvals.OpenIndex(ctx, w.js, journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approvals.NewStore(kv, pkv).Request(ctx, s.entry); err != nil {
		t.Fatalf("request approval as worker: %v", err)
	}
	w.noViolations(t)
	return s
}

// jsRequest is a raw JetStream API request, for calls no client method
// makes in the shape wanted.
func (c *client) jsRequest(subject, body string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.nc.RequestWithContext(ctx, subject, []byte(body))
		return err
	}
}

func TestConnectingWithoutTheRightPasswordIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, opts := range [][]nats.Option{
		nil, // anonymous
		{nats.UserInfo(roleWorker, "wrong")},
		{nats.UserInfo("nobody", "nobody")},
	} {
		nc, err := nats.Connect(b.url, append(opts, nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
			t.Errorf("connect with %d options: the server let it in", len(opts))
			continue
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("connect: got %v, want an authorization violation", err)
		}
	}
}

func TestUpstreamPublishesItsTenantsTasksAndNothingElse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := seed(t, b)
	ctx := t.Context()

	ok := b.as(t, roleUpstream)
	ack, err := ok.js.Publish(ctx, events.TaskSubject(tenant), []byte(`{"task_id":"t-2"}`), jetstream.WithMsgID("t-2"))
	if err != nil {
		t.Fatalf("publish a task as upstream: %v", err)
	}
	if ack.Stream != journal.StreamWork || ack.Sequence == 0 {
		t.Errorf("task ack %+v, want one from %s", ack, journal.StreamWork)
	}
	ok.noViolations(t)

	c := b.as(t, roleUpstream)
	for _, subject := range []string{
		events.TaskSubject(otherTenant),
		events.ApprovalSubject(tenant, s.runID, callID),
		events.EventSubject(tenant, s.runID, events.TypeFinished),
		events.ResumeSubject(tenant, s.runID),
		journal.SchedulesPrefix + "." + tenant + "." + s.runID + "." + callID,
		"$KV.loopgate_approvals." + approvals.Key(s.runID, callID),
	} {
		c.deniedPublish(t, subject, c.publish(subject))
	}
	c.deniedPublish(t, "$JS.API.STREAM.INFO.LOOPGATE_EVENTS", func(ctx context.Context) error {
		_, err := c.js.Stream(ctx, journal.StreamEvents)
		return err
	})
	c.deniedPublish(t, "$JS.API.STREAM.MSG.GET.LOOPGATE_EVENTS", c.jsRequest("$JS.API.STREAM.MSG.GET.LOOPGATE_EVENTS", `{"seq":1}`))
	c.deniedPublish(t, "$JS.API.STREAM.INFO.KV_loopgate_approvals", func(ctx context.Context) error {
		_, err := c.js.KeyValue(ctx, journal.BucketApprovals)
		return err
	})
	c.deniedPublish(t, "$JS.API.CONSUMER.MSG.NEXT.LOOPGATE_WORK.loopgate-workers",
		c.jsRequest("$JS.API.CONSUMER.MSG.NEXT.LOOPGATE_WORK.loopgate-workers", `{"batch":1}`))
	for _, subject := range []string{"loopgate.events.>", "loopgate.>", "_INBOX.>", inboxPrefix(roleWorker) + ".>", "$JS.EVENT.>"} {
		c.deniedSubscribe(t, subject)
	}
}

func TestApproverDecidesItsTenantsCallsAndReadsPendingState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := seed(t, b)
	ctx := t.Context()

	ok := b.as(t, roleApprover)
	kv, err := ok.js.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatalf("open %s as approver: %v", journal.BucketApprovals, err)
	}
	pkv, err := approvals.OpenIndex(ctx, ok.js, journal.StreamPending)
	if err != nil {
		t.Fatalf("open %s as approver: %v", journal.StreamPending, err)
	}
	store := approvals.NewStore(kv, pkv)
	entry, _, err := store.Get(ctx, s.runID, callID)
	if err != nil {
		t.Fatalf("read the pending entry as approver: %v", err)
	}
	if !entry.Pending() || entry.ArgsHash != s.entry.ArgsHash {
		t.Errorf("entry %+v, want the pending one", entry)
	}
	pending, err := store.Pending(ctx, tenant) // what loopgate pending does
	if err != nil {
		t.Fatalf("list pending as approver: %v", err)
	}
	if len(pending) != 1 || pending[0].CallID != callID {
		t.Errorf("pending %+v, want the one entry", pending)
	}
	msg := supervisorApproval(t, s.runID, callID, entry.ArgsHash, "")
	ack, err := ok.js.Publish(ctx, events.ApprovalSubject(tenant, s.runID, callID), msg, jetstream.WithMsgID("a-1"))
	if err != nil {
		t.Fatalf("publish an approval as approver: %v", err)
	}
	if ack.Stream != journal.StreamApprovals {
		t.Errorf("approval ack %+v, want one from %s", ack, journal.StreamApprovals)
	}
	// Following the run, as loopgate approve does after sending.
	j, err := journal.New(ctx, ok.js)
	if err != nil {
		t.Fatalf("open the journal as approver: %v", err)
	}
	if got := watchN(t, j, events.RunFilter(tenant, s.runID), 3); got[2].Type != events.TypeApprovalRequested {
		t.Errorf("followed %v, want the run's three events", got)
	}
	ok.noViolations(t)

	c := b.as(t, roleApprover)
	key := approvals.Key(s.runID, callID)
	for _, subject := range []string{
		events.TaskSubject(tenant),
		events.EventSubject(tenant, s.runID, events.TypeApproved),
		events.ApprovalSubject(otherTenant, s.otherRunID, callID),
		events.ResumeSubject(tenant, s.runID),
	} {
		c.deniedPublish(t, subject, c.publish(subject))
	}
	ckv, err := c.js.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	c.deniedPublish(t, "$KV.loopgate_approvals."+key, func(ctx context.Context) error {
		_, err := ckv.Put(ctx, key, []byte(`{"state":"approved"}`))
		return err
	})
	c.deniedPublish(t, "$KV.loopgate_approvals."+key, func(ctx context.Context) error {
		return ckv.Delete(ctx, key)
	})
	c.deniedPublish(t, "$JS.API.STREAM.PURGE.KV_loopgate_approvals", c.jsRequest("$JS.API.STREAM.PURGE.KV_loopgate_approvals", `{}`))
	listed := events.PendingSubject(tenant, s.runID, callID)
	c.deniedPublish(t, listed, c.publish(listed))
	c.deniedPublish(t, "$JS.API.STREAM.MSG.DELETE."+journal.StreamPending, c.jsRequest("$JS.API.STREAM.MSG.DELETE."+journal.StreamPending, `{"seq":1}`))
	c.deniedPublish(t, "$JS.API.STREAM.DELETE.KV_loopgate_approvals", func(ctx context.Context) error {
		return c.js.DeleteKeyValue(ctx, journal.BucketApprovals)
	})
	c.deniedPublish(t, "$JS.API.STREAM.INFO.KV_loopgate_idempotency", func(ctx context.Context) error {
		_, err := c.js.KeyValue(ctx, journal.BucketIdempotency)
		return err
	})
	c.deniedPublish(t, "$JS.API.STREAM.INFO.LOOPGATE_WORK", func(ctx context.Context) error {
		_, err := c.js.Stream(ctx, journal.StreamWork)
		return err
	})
	// Events: only through a consumer filtered to its own tenant.
	c.deniedPublish(t, "$JS.API.STREAM.MSG.GET.LOOPGATE_EVENTS", c.jsRequest("$JS.API.STREAM.MSG.GET.LOOPGATE_EVENTS", `{"seq":1}`))
	evs, err := c.js.Stream(ctx, journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	c.deniedPublish(t, "$JS.API.CONSUMER.CREATE.LOOPGATE_EVENTS.*.loopgate.events.harbor.>", func(ctx context.Context) error {
		_, err := evs.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"loopgate.events.harbor.>"}})
		return err
	})
	c.deniedPublish(t, "$JS.API.CONSUMER.CREATE.LOOPGATE_EVENTS.*", func(ctx context.Context) error {
		_, err := evs.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{}) // no filter: every tenant
		return err
	})
	c.deniedPublish(t, "$JS.API.STREAM.PURGE.LOOPGATE_EVENTS", c.jsRequest("$JS.API.STREAM.PURGE.LOOPGATE_EVENTS", `{}`))
	for _, subject := range []string{"loopgate.>", "_INBOX.>", inboxPrefix(roleWorker) + ".>"} {
		c.deniedSubscribe(t, subject)
	}
}

func TestAuditorReadsEventsAndRunsAndNothingElse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := seed(t, b)
	ctx := t.Context()

	ok := b.as(t, roleAuditor)
	j, err := journal.New(ctx, ok.js)
	if err != nil {
		t.Fatalf("open the journal as auditor: %v", err)
	}
	got, last, err := j.Load(ctx, tenant, s.runID)
	if err != nil {
		t.Fatalf("load a run as auditor: %v", err)
	}
	if len(got) != 3 || last != s.lastSeq {
		t.Errorf("loaded %d events up to seq %d, want 3 up to %d", len(got), last, s.lastSeq)
	}
	// loopgate audit RUN: any tenant's run, found by its id.
	if got, err := j.Replay(ctx, events.AnyTenantRunFilter(s.otherRunID)); err != nil || len(got) != 1 {
		t.Errorf("replay the other tenant's run as auditor: %d events, %v", len(got), err)
	}
	if got := watchN(t, j, events.RunFilter(tenant, s.runID), 3); got[0].Type != events.TypeStarted {
		t.Errorf("watched %v", got)
	}
	evs, err := ok.js.Stream(ctx, journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := evs.GetMsg(ctx, s.lastSeq); err != nil || m.Sequence != s.lastSeq {
		t.Errorf("get event at seq %d as auditor: %v", s.lastSeq, err)
	}
	// loopgate runs: the projection a worker wrote, every tenant.
	wj, err := journal.New(ctx, b.as(t, roleWorker).js)
	if err != nil {
		t.Fatal(err)
	}
	if err := wj.PutRun(ctx, journal.RunRecord{RunID: s.runID, Tenant: tenant, TaskID: "t", Agent: "a", Status: "finished", Reason: "done", LastSeq: 3}); err != nil {
		t.Fatalf("put a run record as worker: %v", err)
	}
	if recs, err := j.Runs(ctx, ""); err != nil || len(recs) != 1 || recs[0].RunID != s.runID {
		t.Errorf("list runs as auditor: %+v, %v; want the run %s", recs, err, s.runID)
	}
	ok.noViolations(t)

	c := b.as(t, roleAuditor)
	for _, subject := range []string{
		events.TaskSubject(tenant),
		events.ApprovalSubject(tenant, s.runID, callID),
		events.EventSubject(tenant, s.runID, events.TypeFinished),
		events.ResumeSubject(tenant, s.runID),
		journal.SchedulesPrefix + "." + tenant + "." + s.runID + "." + callID,
		"$KV.loopgate_runs." + tenant + "." + s.runID,
	} {
		c.deniedPublish(t, subject, c.publish(subject))
	}
	c.deniedPublish(t, "$JS.API.STREAM.INFO.KV_loopgate_approvals", func(ctx context.Context) error {
		_, err := c.js.KeyValue(ctx, journal.BucketApprovals)
		return err
	})
	direct := "$JS.API.DIRECT.GET.KV_loopgate_approvals.$KV.loopgate_approvals." + approvals.Key(s.runID, callID)
	c.deniedPublish(t, direct, c.jsRequest(direct, ""))
	leader := "$JS.API.STREAM.MSG.GET.KV_loopgate_approvals"
	c.deniedPublish(t, leader, c.jsRequest(leader, `{"last_by_subj":"$KV.loopgate_approvals.`+approvals.Key(s.runID, callID)+`"}`))
	for _, stream := range []string{journal.StreamWork, journal.StreamApprovals} {
		c.deniedPublish(t, "$JS.API.STREAM.INFO."+stream, func(ctx context.Context) error {
			_, err := c.js.Stream(ctx, stream)
			return err
		})
		get := "$JS.API.STREAM.MSG.GET." + stream
		c.deniedPublish(t, get, c.jsRequest(get, `{"seq":1}`))
		create := "$JS.API.CONSUMER.CREATE." + stream + ".peek"
		c.deniedPublish(t, create, c.jsRequest(create, `{"stream_name":"`+stream+`","config":{"name":"peek","ack_policy":"none"}}`))
	}
	c.deniedPublish(t, "$JS.API.CONSUMER.MSG.NEXT.LOOPGATE_WORK.loopgate-workers",
		c.jsRequest("$JS.API.CONSUMER.MSG.NEXT.LOOPGATE_WORK.loopgate-workers", `{"batch":1}`))
	// The runs projection is read only.
	c.deniedPublish(t, "$JS.API.STREAM.PURGE.KV_loopgate_runs", c.jsRequest("$JS.API.STREAM.PURGE.KV_loopgate_runs", `{}`))
	c.deniedPublish(t, "$JS.API.STREAM.MSG.DELETE.KV_loopgate_runs", c.jsRequest("$JS.API.STREAM.MSG.DELETE.KV_loopgate_runs", `{"seq":1}`))
	// The audit log itself is read only.
	c.deniedPublish(t, "$JS.API.STREAM.PURGE.LOOPGATE_EVENTS", c.jsRequest("$JS.API.STREAM.PURGE.LOOPGATE_EVENTS", `{}`))
	c.deniedPublish(t, "$JS.API.STREAM.MSG.DELETE.LOOPGATE_EVENTS", c.jsRequest("$JS.API.STREAM.MSG.DELETE.LOOPGATE_EVENTS", `{"seq":1}`))
	c.deniedPublish(t, "$JS.API.STREAM.DELETE.LOOPGATE_EVENTS", func(ctx context.Context) error {
		return c.js.DeleteStream(ctx, journal.StreamEvents)
	})
	c.deniedPublish(t, "$JS.API.STREAM.UPDATE.LOOPGATE_EVENTS", func(ctx context.Context) error {
		_, err := c.js.UpdateStream(ctx, jetstream.StreamConfig{Name: journal.StreamEvents, Subjects: []string{"loopgate.events.*.*.*"}, MaxAge: time.Minute})
		return err
	})
	for _, subject := range []string{"loopgate.>", "loopgate.events.>", "$KV.>", "_INBOX.>", inboxPrefix(roleWorker) + ".>"} {
		c.deniedSubscribe(t, subject)
	}
}

// The pool's happy paths are proven end to end (worker_test.go); these are
// the recovery paths a run seldom takes.
func TestWorkerMayDeadLetterAndReadEveryBucket(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	c := b.as(t, roleWorker)
	// A work message nobody settles is read, then removed.
	ack, err := c.js.Publish(ctx, events.ResumeSubject(tenant, events.RunID(tenant, "t-9")), nil)
	if err != nil {
		t.Fatalf("publish a wake-up as worker: %v", err)
	}
	work, err := c.js.Stream(ctx, journal.StreamWork)
	if err != nil {
		t.Fatalf("open %s as worker: %v", journal.StreamWork, err)
	}
	if _, err := work.GetMsg(ctx, ack.Sequence); err != nil {
		t.Errorf("read a work message as worker: %v", err)
	}
	if err := work.DeleteMsg(ctx, ack.Sequence); err != nil {
		t.Errorf("remove a work message as worker: %v", err)
	}
	// Idempotency records are read when a write's outcome is in doubt.
	for _, bucket := range []string{journal.BucketApprovals, journal.BucketIdempotency, journal.BucketSessions, journal.BucketRuns} {
		kv, err := c.js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("open %s as worker: %v", bucket, err)
		}
		if _, err := kv.Get(ctx, "no-such-key"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("read %s as worker: %v, want not found", bucket, err)
		}
	}
	// A pool starting on an index that never held anything lists the
	// questions asked before it (the upgrade that added it): a KV watch of
	// the entries, and a listing per pending one, deleted when decided.
	akv, err := c.js.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	asked := approvals.Entry{Kind: approvals.KindApproval, Round: 1, Tenant: tenant, RunID: events.RunID(tenant, "t-8"), CallID: callID,
		Step: 1, Tool: "draft_escalation", ArgsHash: "sha256:00", Principal: "dev@cityops", RequestedAt: at, ExpiresAt: at.Add(time.Hour)}
	if _, err := approvals.NewStore(akv, nil).Request(ctx, asked); err != nil {
		t.Fatal(err)
	}
	index, err := approvals.OpenIndex(ctx, c.js, journal.StreamPending)
	if err != nil {
		t.Fatalf("open %s as worker: %v", journal.StreamPending, err)
	}
	store := approvals.NewStore(akv, index)
	if n, err := store.ListUnlisted(ctx); err != nil || n != 1 {
		t.Errorf("list the question asked before the index as worker: %d, %v", n, err)
	}
	e, rev, err := store.Get(ctx, asked.RunID, callID)
	if err != nil {
		t.Fatal(err)
	}
	e.State, e.Decision = "denied", approvals.Deny
	if err := store.Decide(ctx, e, rev); err != nil {
		t.Errorf("decide as worker: %v", err)
	}
	if got, err := store.Pending(ctx, tenant); err != nil || len(got) != 0 {
		t.Errorf("pending after the decision: %d (%v), want none", len(got), err)
	}
	c.noViolations(t)
}

func TestWorkerMayNotSubmitDecideOrRewriteHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := seed(t, b)
	c := b.as(t, roleWorker)
	for _, subject := range []string{
		events.TaskSubject(tenant),
		events.ApprovalSubject(tenant, s.runID, callID),
	} {
		c.deniedPublish(t, subject, c.publish(subject))
	}
	c.deniedPublish(t, "$JS.API.STREAM.PURGE.LOOPGATE_EVENTS", c.jsRequest("$JS.API.STREAM.PURGE.LOOPGATE_EVENTS", `{}`))
	c.deniedPublish(t, "$JS.API.STREAM.MSG.DELETE.LOOPGATE_EVENTS", c.jsRequest("$JS.API.STREAM.MSG.DELETE.LOOPGATE_EVENTS", `{"seq":1}`))
	c.deniedPublish(t, "$JS.API.STREAM.DELETE.LOOPGATE_EVENTS", func(ctx context.Context) error {
		return c.js.DeleteStream(ctx, journal.StreamEvents)
	})
	c.deniedPublish(t, "$JS.API.STREAM.DELETE.KV_loopgate_idempotency", func(ctx context.Context) error {
		return c.js.DeleteKeyValue(ctx, journal.BucketIdempotency)
	})
	for _, subject := range []string{"_INBOX.>", inboxPrefix(roleAuditor) + ".>", "loopgate.tasks.>"} {
		c.deniedSubscribe(t, subject)
	}
}

// watchN follows filter until it has n events.
func watchN(t *testing.T, j *journal.Journal, filter string, n int) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	var got []events.Event
	for e, err := range j.Watch(ctx, filter) {
		if err != nil {
			t.Fatalf("watch %s: %v", filter, err)
		}
		if got = append(got, e); len(got) == n {
			break
		}
	}
	if len(got) != n {
		t.Fatalf("watch %s: %d events, want %d: %v", filter, len(got), n, ctx.Err())
	}
	return got
}

func TestToolServiceAnswersRequestsAndNothingElse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	svc, w := b.as(t, roleTools), b.as(t, roleWorker)
	const subject = "cityops.tools.lookup_complaints"

	requests := make(chan *nats.Msg, 1)
	if _, err := svc.nc.ChanQueueSubscribe(subject, "cityops-tools", requests); err != nil {
		t.Fatal(err)
	}
	if err := svc.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	replied := make(chan *nats.Msg, 1)
	go func() {
		m, err := w.nc.RequestWithContext(ctx, subject, []byte(`{"category":"sanitation"}`))
		if err != nil {
			t.Errorf("request a tool as worker: %v", err)
		}
		replied <- m
	}()
	var req *nats.Msg
	select {
	case req = <-requests:
	case <-time.After(waitFor):
		t.Fatal("the tool service got no request")
	}
	if err := req.Respond([]byte(`[]`)); err != nil {
		t.Fatal(err)
	}
	if m := <-replied; m == nil || string(m.Data) != `[]` {
		t.Fatalf("worker got %v, want the tool's answer", m)
	}
	svc.noViolations(t)
	w.noViolations(t)

	// allow_responses: one reply per request, to that request only.
	svc.deniedPublish(t, req.Reply, func(context.Context) error { return sent(req.Respond([]byte(`again`))) })
	for _, subject := range []string{
		events.TaskSubject(tenant),
		events.EventSubject(tenant, events.RunID(tenant, "t-1"), events.TypeFinished),
		inboxPrefix(roleWorker) + ".forged",
		"$JS.API.STREAM.INFO.LOOPGATE_EVENTS",
	} {
		svc.deniedPublish(t, subject, svc.publish(subject))
	}
	for _, subject := range []string{"loopgate.>", "_INBOX.>", inboxPrefix(roleWorker) + ".>"} {
		svc.deniedSubscribe(t, subject)
	}
	// Nobody else may pose as the tool service.
	other := b.as(t, roleWorker)
	other.deniedSubscribe(t, subject)
	up := b.as(t, roleUpstream)
	up.deniedPublish(t, subject, up.publish(subject))
}
