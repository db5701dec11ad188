package worker_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// The loopgate_runs projection follows a run, off its path: parked while
// it waits for a decision, finished with its reason and last seq after.
func TestTheRunsProjectionFollowsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "projection-1")
	parked := b.waitType(runID, events.TypeParked, 1)
	waitRecord(t, b, runID, func(r journal.RunRecord) bool {
		return r.Status == "parked" && r.LastSeq == parked.Seq
	})

	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	evs := b.waitEnd(runID)
	rec := waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "finished" })
	if rec.Reason != "done" || rec.LastSeq != evs[len(evs)-1].Seq || rec.TaskID != "projection-1" || rec.Agent != "one-draft" {
		t.Errorf("record = %+v, want finished done at seq %d", rec, evs[len(evs)-1].Seq)
	}
}

// A finished run's record that its worker never wrote (killed within the
// projection's quarter second) is written again when the run's task is
// delivered once more, as it is when the worker dies before acknowledging
// it.
func TestARedeliveredFinishedRunRewritesItsRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "projection-2")
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	evs := b.waitEnd(runID)
	waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "finished" })

	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := json.Marshal(journal.RunRecord{RunID: runID, Tenant: "cityops", TaskID: "projection-2", Agent: "one-draft", Status: "running", LastSeq: 1})
	if _, err := kv.Put(t.Context(), "cityops."+runID, stale); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(task("projection-2", "one-draft"))
	b.publishRaw("cityops", payload, "projection-2-again") // another message id: not deduplicated
	rec := waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "finished" })
	if rec.Reason != "done" || rec.LastSeq != evs[len(evs)-1].Seq {
		t.Errorf("record = %+v, want finished done at seq %d", rec, evs[len(evs)-1].Seq)
	}
	if got, _, err := b.env.Journal.Load(t.Context(), "cityops", runID); err != nil || len(got) != len(evs) {
		t.Errorf("after the task's second delivery the run has %d events (%v), had %d", len(got), err, len(evs))
	}
}

// An update the bucket did not take is tried again: here the bucket is
// gone while the run parks, and comes back (as a cluster's stream does
// once it has a leader again). Without the retry the run would have no
// record at all.
func TestAProjectionUpdateTheBucketRefusedIsTriedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	if err := b.env.JS.DeleteKeyValue(t.Context(), journal.BucketRuns); err != nil {
		t.Fatal(err)
	}
	runID, _ := draftRun(t, b, "projection-3")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.logs.String(), "update run projection") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed projection update logged:\n%s", b.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := journal.Ensure(t.Context(), b.env.JS, journal.Layout{}); err != nil {
		t.Fatal(err)
	}
	waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "parked" })
	if logs := b.logs.String(); strings.Count(logs, "update run projection") > 1 || !strings.Contains(logs, "run projection written again") {
		t.Errorf("want one warning while the bucket was gone and a word when writes came back:\n%s", logs)
	}
}

func waitRecord(t *testing.T, b *bundle, runID string, ok func(journal.RunRecord) bool) journal.RunRecord {
	t.Helper()
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	var rec journal.RunRecord
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		e, err := kv.Get(t.Context(), "cityops."+runID)
		if err == nil && json.Unmarshal(e.Value(), &rec) == nil && ok(rec) {
			return rec
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("run %s: projection is %+v after 10s", runID, rec)
	return rec
}
