package journal_test

import (
	"encoding/json"
	"fmt"
	"strings"
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
	if unwritten, err := env.Journal.PutRuns(ctx, burst); err != nil || len(unwritten) > 0 {
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
	if _, err := env.Journal.PutRuns(ctx, []journal.RunRecord{runRecord("twice", 4), runRecord("twice", 3), runRecord("other", 2)}); err != nil {
		t.Fatal(err)
	}
	if r, batch := b.get("twice"); r.LastSeq != 4 || batch != "" {
		t.Errorf("record twice: seq %d batch %q, want seq 4 written on its own", r.LastSeq, batch)
	}
	if r, batch := b.get("other"); r.LastSeq != 2 || batch != "" {
		t.Errorf("record other: seq %d batch %q, want seq 2 written on its own", r.LastSeq, batch)
	}
}

// Runs lists each run's current record, by tenant or all; an update
// replaces a run's record rather than adding one, and a record that is
// not a run record is named in the error without hiding the others.
func TestRunsListsEachRunsCurrentRecord(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	if got, err := env.Journal.Runs(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("empty bucket: %v, %v; want no records, no error", got, err)
	}
	other := runRecord("elsewhere", 2)
	other.Tenant = "globex"
	for _, r := range []journal.RunRecord{runRecord("a", 1), runRecord("b", 1), runRecord("a", 6), other} {
		if err := env.Journal.PutRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	byRun := func(recs []journal.RunRecord) map[string]journal.RunRecord {
		m := map[string]journal.RunRecord{}
		for _, r := range recs {
			if _, dup := m[r.RunID]; dup {
				t.Errorf("run %s listed twice", r.RunID)
			}
			m[r.RunID] = r
		}
		return m
	}
	all, err := env.Journal.Runs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got := byRun(all)
	if len(got) != 3 || got["a"].LastSeq != 6 || got["b"].LastSeq != 1 || got["elsewhere"].Tenant != "globex" {
		t.Errorf("every tenant: %+v; want a at seq 6, b at seq 1 and globex's run", all)
	}
	acme, err := env.Journal.Runs(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := byRun(acme); len(got) != 2 || got["a"].Status != "seq-6" {
		t.Errorf("tenant acme: %+v; want runs a (seq 6) and b only", acme)
	}

	kv, err := env.JS.KeyValue(ctx, journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "acme.junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	acme, err = env.Journal.Runs(ctx, "acme")
	if err == nil || !strings.Contains(err.Error(), "acme.junk") {
		t.Errorf("a record that is not a run record: error %v, want one naming acme.junk", err)
	}
	if len(acme) != 2 {
		t.Errorf("with an unreadable record beside them, %d records listed, want the 2 readable ones", len(acme))
	}
	if _, err := kv.Put(ctx, "zeta.junk", []byte("{")); err != nil {
		t.Fatal(err)
	}
	if zeta, err := env.Journal.Runs(ctx, "zeta"); err == nil || zeta == nil || len(zeta) != 0 {
		t.Errorf("a tenant with only an unreadable record: %v (nil: %v), %v; want an empty, non-nil list and the error", zeta, zeta == nil, err)
	}
	if _, err := env.Journal.Runs(ctx, "acme.>"); err == nil {
		t.Error("a tenant that is not a subject token was accepted")
	}
}

// A record that says what the stored one says is not written again: a
// finished run's task delivered twice costs a read, not an fsynced write.
func TestPutRunSkipsARecordThatChangesNothing(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	kv, err := env.JS.KeyValue(ctx, journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	revision := func() uint64 {
		e, err := kv.Get(ctx, "acme.same")
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	if err := env.Journal.PutRun(ctx, runRecord("same", 4)); err != nil {
		t.Fatal(err)
	}
	first := revision()
	if _, err := env.Journal.PutRuns(ctx, []journal.RunRecord{runRecord("same", 4)}); err != nil {
		t.Fatal(err)
	}
	if err := env.Journal.PutRun(ctx, runRecord("same", 4)); err != nil {
		t.Fatal(err)
	}
	if got := revision(); got != first {
		t.Errorf("the same record was written again: revision %d, was %d", got, first)
	}
	changed := runRecord("same", 4)
	changed.Status = "finished"
	if err := env.Journal.PutRun(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if got := revision(); got == first {
		t.Error("a record with a new status at the same seq was not written")
	}
}

// Records the bucket did not take are handed back to be tried again; a
// record that can never be written (a run id that is no subject token)
// is not, and the error names both.
func TestPutRunsHandsBackWhatTheBucketDidNotTake(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	if _, err := env.Journal.Runs(t.Context(), ""); err != nil { // open the bucket while it answers
		t.Fatal(err)
	}
	recs := []journal.RunRecord{runRecord("one", 1), runRecord("bad.id", 1), runRecord("two", 2), runRecord("three", 3)}
	if err := env.JS.DeleteKeyValue(t.Context(), journal.BucketRuns); err != nil {
		t.Fatal(err)
	}
	unwritten, err := env.Journal.PutRuns(t.Context(), recs)
	if err == nil || !strings.Contains(err.Error(), "bad.id") {
		t.Errorf("error %v, want one naming the run id that is no subject token", err)
	}
	var ids []string
	for _, r := range unwritten {
		ids = append(ids, r.RunID)
	}
	if strings.Join(ids, ",") != "one,two,three" {
		t.Fatalf("handed back %v, want one, two and three", ids)
	}
	if err := journal.Ensure(t.Context(), env.JS, journal.Layout{}); err != nil { // the bucket is back
		t.Fatal(err)
	}
	if again, err := env.Journal.PutRuns(t.Context(), unwritten); err != nil || len(again) > 0 {
		t.Fatalf("second attempt: %v unwritten, %v", again, err)
	}
	got, err := env.Journal.Runs(t.Context(), "acme")
	if err != nil || len(got) != 3 {
		t.Errorf("after the second attempt the bucket lists %+v (%v), want the 3 records", got, err)
	}
}

// A record whose key an operator deleted (nats kv del) is written again by
// the run's next update: the delete marker left on the key's subject made
// every write as a first record fail its expected sequence, and the run
// was missing from the projection for good.
func TestPutRunWritesAgainAfterTheKeyWasDeleted(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	kv, err := env.JS.KeyValue(ctx, journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	for id, remove := range map[string]func(string) error{
		"deleted": func(key string) error { return kv.Delete(ctx, key) },
		"purged":  func(key string) error { return kv.Purge(ctx, key) },
	} {
		if err := env.Journal.PutRun(ctx, runRecord(id, 4)); err != nil {
			t.Fatal(err)
		}
		if err := remove("acme." + id); err != nil {
			t.Fatal(err)
		}
		if err := env.Journal.PutRun(ctx, runRecord(id, 9)); err != nil {
			t.Fatalf("put after the key was removed: %v", err)
		}
		got, ok, err := env.Journal.Run(ctx, "acme", id)
		if err != nil || !ok || got.LastSeq != 9 {
			t.Errorf("record after the key was removed: %+v, %v, %v; want last seq 9", got, ok, err)
		}
	}
}
