package metrics_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/metrics"
)

// The Cluster reads, at each scrape, what JetStream holds for every
// process: the questions pending and the runs they park (two questions of
// one run are one parked run; a decided question is neither), and the
// work queue's messages not yet delivered.
func TestTheClusterGaugesReadJetStreamAtEachScrape(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCluster(env.JS, 0))
	want := func(when, text string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(text),
			"loopgate_approvals_pending", "loopgate_runs_parked", "loopgate_work_backlog", "loopgate_jetstream_up"); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
	want("nothing yet", gauges(0, 0, 0))

	kv, err := env.JS.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	index, err := approvals.OpenIndex(ctx, env.JS, journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	store := approvals.NewStore(kv, index)
	ask := func(runID, callID string) {
		t.Helper()
		if _, err := store.Request(ctx, approvals.Entry{Kind: approvals.KindApproval, Round: 1, Tenant: "cityops",
			RunID: runID, CallID: callID, Tool: "draft_escalation", ArgsHash: "sha256:00", Principal: "dev@cityops",
			RequestedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	const run1, run2 = "00000001-0000-4000-8000-000000000000", "00000002-0000-4000-8000-000000000000"
	ask(run1, "s3c1")
	ask(run1, "s3c2")
	ask(run2, "s4c1")
	if _, err := env.JS.Publish(ctx, "loopgate.tasks.cityops", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	want("three questions of two runs, a task queued", gauges(3, 2, 1))

	e, rev, err := store.Get(ctx, run2, "s4c1")
	if err != nil {
		t.Fatal(err)
	}
	e.State, e.Decision, e.DecidedBy, e.DecidedAt = "approved", approvals.Approve, "supervisor@cityops", time.Now()
	if err := store.Decide(ctx, e, rev); err != nil {
		t.Fatal(err)
	}
	want("one run's question decided", gauges(2, 1, 1))
}

// gauges is the exposition of the Cluster's gauges with JetStream up.
func gauges(pending, parked, backlog int) string {
	return `# HELP loopgate_approvals_pending Questions awaiting a human now, as loopgate pending lists them.
# TYPE loopgate_approvals_pending gauge
loopgate_approvals_pending ` + strconv.Itoa(pending) + `
# HELP loopgate_jetstream_up 1 when this scrape's JetStream requests were answered, 0 when one was not.
# TYPE loopgate_jetstream_up gauge
loopgate_jetstream_up 1
# HELP loopgate_runs_parked Runs waiting for a human now: runs with a question pending, as loopgate pending lists them.
# TYPE loopgate_runs_parked gauge
loopgate_runs_parked ` + strconv.Itoa(parked) + `
# HELP loopgate_work_backlog Work messages of the workers consumer: pending (not yet delivered) or ack_pending (delivered, not yet acknowledged).
# TYPE loopgate_work_backlog gauge
loopgate_work_backlog{state="ack_pending"} 0
loopgate_work_backlog{state="pending"} ` + strconv.Itoa(backlog) + `
`
}
