package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// storeAt appends evs as run runID of tenant cityops, each at the time
// given (offset from t0), envelopes filled in.
func storeAt(t *testing.T, j *journal.Journal, runID string, t0 time.Time, at []time.Duration, evs ...events.Event) {
	t.Helper()
	for i := range evs {
		evs[i].EventID, evs[i].RunID, evs[i].Tenant, evs[i].Seq, evs[i].Time = uuid.Must(uuid.NewV7()).String(), runID, "cityops", uint64(i+1), t0.Add(at[i]).UTC()
		if evs[i].Data == nil {
			evs[i].Data = json.RawMessage(`{}`)
		}
	}
	if _, err := j.Append(t.Context(), 0, evs...); err != nil {
		t.Fatal(err)
	}
}

// projectedRunning writes run id's projection record as running at its
// first event: behind its events, as a record whose worker was killed.
func projectedRunning(t *testing.T, srv *natstest.Env, id string, t0 time.Time) {
	t.Helper()
	kv, err := srv.JS.KeyValue(t.Context(), journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(journal.RunRecord{RunID: id, Tenant: "cityops", TaskID: "t-" + id, Agent: "a", Status: journal.RunRunning, LastSeq: 1, Updated: t0})
	if _, err := kv.Put(t.Context(), "cityops."+id, rec); err != nil {
		t.Fatal(err)
	}
}

func encoded(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := events.EncodeData(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// `loopgate audit` says its active time is "what the budgets count", by
// "the same rule events.Fold uses". Fold does not count the time between a
// run's finish and an answer recorded after it (a late approval_rejected);
// summarize used to count it as active, so a run that finished in 200ms
// and got a late answer an hour later was shown as active for an hour.
func TestAuditActiveTimeLeavesOutTheTimeAfterTheFinish(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	const runID = "late-answer-1"
	t0 := time.Now().Add(-2 * time.Hour)
	storeAt(t, srv.Journal, runID, t0, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, time.Hour},
		events.Event{Type: events.TypeStarted},
		events.Event{Type: events.TypeProposed, Step: 1},
		events.Event{Type: events.TypeFinished, Step: 1, Data: encoded(t, events.FinishedData{Reason: events.ReasonDone})},
		events.Event{Type: events.TypeApprovalRejected, Step: 1, CallID: "s1c1", Data: encoded(t, events.ApprovalRejectedData{Class: "not_pending", Detail: "the run has finished", ApprovalSeq: 7})},
	)
	code, out, stderr := run(t, "", "audit", runID, "--nats", srv.Server.ClientURL())
	if code != exitOK {
		t.Fatalf("audit: exit %d\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "time: active 200ms (what the budgets count)") {
		t.Errorf("audit's active time counts the hour after the run's finish; want active 200ms:\n%s", out)
	}
}

// `loopgate runs` takes the status of a run its projection does not call
// finished from its last event, and used to call a last approval_rejected
// "parked". But a message that decides nothing leaves the run as it was:
// a finished run whose record is behind (its worker killed before writing
// it) and that got a late answer was listed parked, no reason; a running
// run that got a stray answer (no_such_request, or a double click's
// not_pending after the run resumed) was listed parked. The events decide.
func TestRunsStatusIsNotParkedForAnAnswerThatDecidedNothing(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	t0 := time.Now().Add(-time.Minute)
	late := func() events.Event {
		return events.Event{Type: events.TypeApprovalRejected, Step: 1, CallID: "s1c1",
			Data: encoded(t, events.ApprovalRejectedData{Class: "not_pending", Detail: "late", ApprovalSeq: 9})}
	}
	storeAt(t, srv.Journal, "finished-1", t0, []time.Duration{0, time.Second, 2 * time.Second},
		events.Event{Type: events.TypeStarted},
		events.Event{Type: events.TypeFinished, Step: 1, Data: encoded(t, events.FinishedData{Reason: events.ReasonDone})},
		late())
	storeAt(t, srv.Journal, "running-1", t0, []time.Duration{0, time.Second},
		events.Event{Type: events.TypeStarted},
		late())
	for _, id := range []string{"finished-1", "running-1"} {
		projectedRunning(t, srv, id, t0)
	}
	code, out, stderr := run(t, "", "runs", "--json", "--nats", srv.Server.ClientURL())
	if code != exitOK {
		t.Fatalf("runs: exit %d\n%s\n%s", code, out, stderr)
	}
	got := map[string]listedRun{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r listedRun
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got[r.RunID] = r
	}
	if r := got["finished-1"]; r.Status != journal.RunFinished || r.Reason != "done" {
		t.Errorf("a finished run with a late answer is listed %q (reason %q), want finished done", r.Status, r.Reason)
	}
	if r := got["running-1"]; r.Status != journal.RunRunning {
		t.Errorf("a running run with a stray answer is listed %q, want running", r.Status)
	}
}

// `submit --timeout 0` (or a negative one) used to publish the task and
// end the follow at once: exit 5, "interrupted: stopped following run …",
// though nothing interrupted it. It is refused now, before anything is
// published.
func TestSubmitRefusesANonPositiveTimeout(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	code, out, stderr := run(t, "", "submit", "--nats", srv.url, "--task-id", "zero-timeout-1", "--agent", "dry-run-assistant", "--dry-run", "--timeout", "0")
	if code != exitError || !strings.Contains(stderr, "--timeout must be positive") {
		t.Errorf("submit --timeout 0: exit %d, want %d naming --timeout\nstdout:\n%s\nstderr:\n%s", code, exitError, out, stderr)
	}
	if code, out, _ := run(t, "", "runs", "--json", "--nats", srv.url); code != exitOK || strings.Contains(out, "zero-timeout-1") {
		t.Errorf("a refused submit published its task: runs exit %d:\n%s", code, out)
	}
}

// A discarded event (a model call a race's loser paid for in vain) is a
// record, as approval_rejected is: appended by another worker with its own
// clock, it leaves a parked run parked and its time is no part of the
// run's. `loopgate runs` used to list a parked run whose last event was
// such a record as running, and audit counted its clock as active time.
func TestListingsTreatADiscardedCallAsARecord(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	t0 := time.Now().Add(-2 * time.Hour)
	lost := func() events.Event {
		return events.Event{Type: events.TypeDiscarded, Step: 1,
			Data: encoded(t, events.DiscardedData{Proposal: "p", Usage: events.Usage{InputTokens: 120, OutputTokens: 7}, LatencyMS: 640})}
	}
	storeAt(t, srv.Journal, "parked-1", t0, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second},
		events.Event{Type: events.TypeStarted},
		events.Event{Type: events.TypeProposed, Step: 1},
		events.Event{Type: events.TypeParked, Step: 1},
		lost())
	projectedRunning(t, srv, "parked-1", t0)
	code, out, stderr := run(t, "", "runs", "--json", "--nats", srv.Server.ClientURL())
	if code != exitOK {
		t.Fatalf("runs: exit %d\n%s\n%s", code, out, stderr)
	}
	var r listedRun
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if r.Status != journal.RunParked {
		t.Errorf("a parked run whose last event is a discarded call is listed %q, want parked", r.Status)
	}

	// The losing worker's clock ran an hour ahead.
	storeAt(t, srv.Journal, "lost-1", t0, []time.Duration{0, time.Second, time.Hour, 2 * time.Second},
		events.Event{Type: events.TypeStarted},
		events.Event{Type: events.TypeProposed, Step: 1},
		lost(),
		events.Event{Type: events.TypeFinished, Step: 1, Data: encoded(t, events.FinishedData{Reason: events.ReasonDone})})
	code, out, stderr = run(t, "", "audit", "lost-1", "--nats", srv.Server.ClientURL())
	if code != exitOK {
		t.Fatalf("audit: exit %d\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "time: active 2s (what the budgets count)") {
		t.Errorf("audit counts a discarded call's clock as the run's time; want active 2s:\n%s", out)
	}
	if !strings.Contains(out, "a model call lost to the run's driver, charged (640ms, 120+7 tokens)") {
		t.Errorf("audit's timeline does not say what the discarded call was:\n%s", out)
	}
}
