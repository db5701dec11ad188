package worker_test

import (
	"encoding/json"
	"errors"
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
