package natsauth_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/worker"
)

// startPool runs a worker pool with the CityOps example as the worker
// user, as loopgate worker does: the layout, the journal, the built-in
// tools, the pool.
func startPool(t *testing.T, b *bundle, batch bool) *client {
	t.Helper()
	ctx := t.Context()
	w := b.as(t, roleWorker)
	if err := journal.Ensure(ctx, w.js, journal.Layout{AckWait: 5 * time.Second}); err != nil {
		t.Fatalf("ensure as worker: %v", err)
	}
	j, err := journal.New(ctx, w.js)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cityops.Files, "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bt := tools.Builtins{}
	if err := cityops.Register(bt, cityops.Options{Outbox: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(cfg.Tools, bt)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := worker.New(worker.Deps{JS: w.js, Journal: j, App: cfg, Registry: reg},
		&worker.Config{Workers: 2, Logger: slog.New(slog.DiscardHandler), BatchEvents: batch})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(ctx); err != nil {
		t.Fatalf("start the pool as worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := pool.Stop(ctx); err != nil {
			t.Errorf("stop pool: %v", err)
		}
	})
	return w
}

// submit publishes a CityOps scenario's task as upstream and returns its
// run id.
func submit(t *testing.T, up *client, scenario string) string {
	t.Helper()
	sc, ok := cityops.ScenarioByName(scenario)
	if !ok {
		t.Fatalf("no scenario %q", scenario)
	}
	input, _ := json.Marshal(sc.Input)
	task := events.Task{TaskID: "natsauth-" + scenario, Tenant: tenant, Agent: sc.Agent, Input: input, DryRun: sc.DryRun,
		Principal: events.Principal{ID: "dev@cityops", Roles: []string{"operator"}}}
	payload, _ := json.Marshal(task)
	if _, err := up.js.Publish(t.Context(), events.TaskSubject(tenant), payload, jetstream.WithMsgID(tenant+"/"+task.TaskID)); err != nil {
		t.Fatalf("submit %s as upstream: %v", scenario, err)
	}
	return events.RunID(tenant, task.TaskID)
}

// supervisorApproval is supervisor@cityops's approval of a call's exact
// arguments, signed with the example's key for them (embedded in
// cityops.Files): the example policy requires signed approvals.
func supervisorApproval(t *testing.T, runID, callID, argsHash, reason string) []byte {
	t.Helper()
	seed, err := cityops.ApproverSeed("supervisor@cityops")
	if err != nil {
		t.Fatal(err)
	}
	key, err := approvals.ParseSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	m := approvals.Message{RunID: runID, CallID: callID, ArgsHash: argsHash,
		Decision: approvals.Approve, Approver: approvals.Approver{ID: "supervisor@cityops"}, Reason: reason}
	if err := approvals.Sign(&m, key, time.Now()); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// until follows a run as c (the auditor or the approver) until stop says
// so, and returns the event that stopped it.
func until(t *testing.T, c *client, runID string, stop func(events.Event) bool) events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	j, err := journal.New(ctx, c.js)
	if err != nil {
		t.Fatalf("%s: journal: %v", c.user, err)
	}
	for e, err := range j.Watch(ctx, events.RunFilter(tenant, runID)) {
		if err != nil {
			t.Fatalf("%s: follow run %s: %v", c.user, runID, err)
		}
		if e.Type == events.TypeRejected {
			t.Fatalf("run %s rejected: %s", runID, e.Data)
		}
		if stop(e) {
			return e
		}
	}
	t.Fatalf("%s: run %s: the watch ended first: %v", c.user, runID, ctx.Err())
	return events.Event{}
}

func TestWorkerRunsADryRunEndToEnd(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "append", true: "batch"}[batch], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			w := startPool(t, b, batch)
			up, aud := b.as(t, roleUpstream), b.as(t, roleAuditor)

			runID := submit(t, up, "dry-run")
			end := until(t, aud, runID, func(e events.Event) bool { return e.Type == events.TypeFinished })
			var d events.FinishedData
			if err := end.Decode(&d); err != nil || d.Reason != events.ReasonDone {
				t.Errorf("dry run finished %s (%v), want done", d.Reason, err)
			}
			for _, c := range []*client{w, up, aud} {
				c.noViolations(t)
			}
		})
	}
}

func TestApproverDecidesAGatedWriteTheWorkerParked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := startPool(t, b, false)
	up, appr := b.as(t, roleUpstream), b.as(t, roleApprover)
	ctx := t.Context()

	runID := submit(t, up, "happy")
	parked := until(t, appr, runID, func(e events.Event) bool { return e.Type == events.TypeParked })
	var p events.ParkedData
	if err := parked.Decode(&p); err != nil || len(p.Awaiting) == 0 {
		t.Fatalf("parked %s: %v", parked.Data, err)
	}
	kv, err := appr.js.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	entry, _, err := approvals.NewStore(kv, nil).Get(ctx, runID, p.Awaiting[0])
	if err != nil {
		t.Fatalf("read the question as approver: %v", err)
	}
	msg := supervisorApproval(t, runID, entry.CallID, entry.ArgsHash, "natsauth")
	ack, err := appr.js.Publish(ctx, events.ApprovalSubject(tenant, runID, entry.CallID), msg, jetstream.WithMsgID(nats.NewInbox()))
	if err != nil {
		t.Fatalf("publish the approval as approver: %v", err)
	}
	// The worker decides the message: it went from the approver through
	// the workers' consumer to the log, and, signed as the example policy
	// requires, it is the approval.
	decided := until(t, appr, runID, func(e events.Event) bool {
		var d struct {
			ApprovalSeq uint64 `json:"approval_seq"`
		}
		return (e.Type == events.TypeApproved || e.Type == events.TypeApprovalRejected) &&
			e.Decode(&d) == nil && d.ApprovalSeq == ack.Sequence
	})
	if decided.Type != events.TypeApproved {
		t.Errorf("the worker recorded %s, want approved: %s", decided.Type, decided.Data)
	}
	for _, c := range []*client{w, up, appr} {
		c.noViolations(t)
	}
}
