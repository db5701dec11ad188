package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
)

// While the workers' consumer cannot be pulled from (here it is deleted;
// on a cluster, its leader died and no other is elected yet), every worker
// of a pool fails its pulls at once and retries: the pool warns once for
// all of them, not once per worker and retry, and says when it takes work
// again. The task sent meanwhile is worked on once the consumer is back.
func TestAPoolWarnsOnceOfWorkItCannotFetch(t *testing.T) {
	t.Parallel()
	answer := model.Response{Output: []byte(`{"final_answer":{"summary":"ok"}}`), Name: "quick"}
	b := setup(t, options{
		workers: 8,
		retry:   20 * time.Millisecond,
		agents:  map[string]config.Profile{"quick": profile("lookup_complaints")},
		scripts: map[string]model.Model{"quick": model.Func(func(context.Context, model.Request) (model.Response, error) { return answer, nil })},
	})
	restore := deleteConsumer(t, b, journal.StreamWork, journal.ConsumerWorkers)
	runID := b.submit(task("unfetched-1", "quick"))
	// 8 workers retrying every 20ms: hundreds of failed pulls, well
	// inside the 10s after which the pool would warn again.
	time.Sleep(time.Second)
	restore()
	assertTrail(t, b.waitEnd(runID), []string{"started", "proposed:final", "finished:done"})
	logs := b.logs.String()
	// Only the outage counts: a pull racing the consumer's recreation may
	// fail once after it (no responders) and is a trouble of its own.
	during, _, _ := strings.Cut(logs, `msg="fetch work: working again"`)
	if n := strings.Count(during, `msg="fetch work" `); n != 1 {
		t.Errorf("%d warnings of work the pool could not fetch, want 1 for the pool's 8 workers\n%s", n, logs)
	}
	var failures int
	if _, after, ok := strings.Cut(logs, `msg="fetch work: working again" failures=`); !ok {
		t.Errorf("the pool did not say it fetches work again\n%s", logs)
	} else if _, err := fmt.Sscan(after, &failures); err != nil || failures <= 8 {
		t.Errorf("the pool counted %d failed pulls (%v), want more than one per worker\n%s", failures, err, logs)
	}
}

// An idle pool, too, says when it can fetch work again: a pull that the
// server ends with nothing to take shows the consumer answers.
func TestAnIdlePoolSaysItFetchesWorkAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, options{retry: 20 * time.Millisecond})
	ctx := t.Context()
	restore := deleteConsumer(t, b, journal.StreamWork, journal.ConsumerWorkers)
	for !strings.Contains(b.logs.String(), `msg="fetch work" `) {
		if ctx.Err() != nil {
			t.Fatal("no warning of the failed pulls")
		}
		time.Sleep(10 * time.Millisecond)
	}
	restore()
	// A pull ends with nothing to take after 4.5s (pullExpiry, less the
	// server's margin).
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(b.logs.String(), `msg="fetch work: working again"`) {
		if time.Now().After(deadline) {
			t.Fatalf("15s after the consumer came back, the idle pool has not said it fetches work again\n%s", b.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The server ends the pool's pull of approvals for good when their
// consumer is deleted (an operator makes it again, a restore): the pool
// warns, opens it again once it answers, says so, and decides the
// approval sent meanwhile. It stopped deciding approvals for the rest of
// its life, saying nothing after the first warning.
func TestAPoolDecidesApprovalsAgainOnceTheirConsumerIsBack(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.retry = 20 * time.Millisecond
	b := setup(t, o)
	runID, q := draftRun(t, b, "reopened-1")
	restore := deleteConsumer(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	waitLogged(t, b, `msg="fetch approvals" `, 1)
	restore()
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	assertTrail(t, b.waitEndWithin(runID, 15*time.Second), oneDraftApproved())
	if logs := b.logs.String(); !strings.Contains(logs, `msg="fetch approvals: working again"`) {
		t.Errorf("the pool did not say it fetches approvals again\n%s", logs)
	}
}

// A pool whose approvals consumer is gone, and keeps trying to open it
// again, still stops at once when asked.
func TestAPoolTryingToReopenItsApprovalsStops(t *testing.T) {
	t.Parallel()
	b := setup(t, options{retry: 20 * time.Millisecond})
	deleteConsumer(t, b, journal.StreamApprovals, journal.ConsumerApprovals)
	// Warned: the pool is in the loop that starts consuming again.
	waitLogged(t, b, `msg="fetch approvals" `, 1)
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := b.pool.Stop(ctx); err != nil {
		t.Fatalf("Stop while the pool opens its approvals again: %v\n%s", err, b.logs.String())
	}
}

// deleteConsumer deletes a consumer of stream; restore makes it again as
// it was.
func deleteConsumer(t *testing.T, b *bundle, stream, name string) (restore func()) {
	t.Helper()
	c, err := b.env.JS.Consumer(t.Context(), stream, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	if err := b.env.JS.DeleteConsumer(t.Context(), stream, name); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := b.env.JS.CreateConsumer(t.Context(), stream, cfg); err != nil {
			t.Fatal(err)
		}
	}
}
