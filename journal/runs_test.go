package journal_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// runsBucket reads the runs projection back: each record and the batch id
// (Nats-Batch-Id, empty if none) of the message that wrote it.
type runsBucket struct {
	t   *testing.T
	env *natstest.Env
}

func (b runsBucket) get(runID string) (journal.RunRecord, string) {
	b.t.Helper()
	st, err := b.env.JS.Stream(b.t.Context(), "KV_"+journal.BucketRuns)
	if err != nil {
		b.t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(b.t.Context(), "$KV."+journal.BucketRuns+".acme."+runID)
	if err != nil {
		b.t.Fatalf("record of %s: %v", runID, err)
	}
	var r journal.RunRecord
	if err := json.Unmarshal(m.Data, &r); err != nil {
		b.t.Fatal(err)
	}
	return r, m.Header.Get("Nats-Batch-Id")
}

func runRecord(runID string, seq uint64) journal.RunRecord {
	return journal.RunRecord{RunID: runID, Tenant: "acme", TaskID: "t-" + runID, Agent: "a", Status: fmt.Sprintf("seq-%d", seq), LastSeq: seq}
}

// A burst of projection updates is one atomic batch, each record
// conditional on the one it replaces; a record older than the stored one
// is left out, as PutRun leaves it.
func TestPutRunsWritesABurstInOneBatch(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	b := runsBucket{t, env}
	for _, r := range []journal.RunRecord{runRecord("newer", 10), runRecord("older", 1)} {
		if err := env.Journal.PutRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	burst := []journal.RunRecord{runRecord("newer", 5), runRecord("older", 7)}
	for i := range 8 {
		burst = append(burst, runRecord(fmt.Sprintf("new-%d", i), 3))
	}
	if err := env.Journal.PutRuns(ctx, burst); err != nil {
		t.Fatal(err)
	}
	if r, _ := b.get("newer"); r.LastSeq != 10 {
		t.Errorf("the newer record was rolled back to seq %d", r.LastSeq)
	}
	r, batch := b.get("older")
	if r.LastSeq != 7 || batch == "" {
		t.Fatalf("the older record: seq %d, batch %q; want seq 7, written in a batch", r.LastSeq, batch)
	}
	for i := range 8 {
		id := fmt.Sprintf("new-%d", i)
		if r, got := b.get(id); r.LastSeq != 3 || r.Status != "seq-3" || got != batch {
			t.Errorf("record %s: seq %d status %q batch %q, want seq 3 in batch %q", id, r.LastSeq, r.Status, got, batch)
		}
	}
}

// A batch the server refuses changes nothing: here two records of one run
// are both conditional on the same stored revision, so the server refuses
// the batch, and the records are written one by one as PutRun writes them,
// the newest kept.
func TestPutRunsRefusedWritesEachRecord(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	b := runsBucket{t, env}
	if err := env.Journal.PutRun(ctx, runRecord("twice", 1)); err != nil {
		t.Fatal(err)
	}
	if err := env.Journal.PutRuns(ctx, []journal.RunRecord{runRecord("twice", 4), runRecord("twice", 3), runRecord("other", 2)}); err != nil {
		t.Fatal(err)
	}
	if r, batch := b.get("twice"); r.LastSeq != 4 || batch != "" {
		t.Errorf("record twice: seq %d batch %q, want seq 4 written on its own", r.LastSeq, batch)
	}
	if r, batch := b.get("other"); r.LastSeq != 2 || batch != "" {
		t.Errorf("record other: seq %d batch %q, want seq 2 written on its own", r.LastSeq, batch)
	}
}
