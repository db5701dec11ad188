package worker_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	runID, evs := approvedDraftRun(t, b, "projection-2")
	waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "finished" })
	putRecord(t, b, journal.RunRecord{RunID: runID, Tenant: "cityops", TaskID: "projection-2", Agent: "one-draft", Status: "running", LastSeq: 1})
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
	deleteRunsBucket(t, b)
	runID, _ := draftRun(t, b, "projection-3")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.logs.String(), "update run projection") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed projection update logged:\n%s", b.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	bringBackRunsBucket(t, b)
	waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "parked" })
	// The projector logs its word after the write that the record shows.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(b.logs.String(), "run projection written again") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if logs := b.logs.String(); strings.Count(logs, "update run projection") > 1 || !strings.Contains(logs, "run projection written again") {
		t.Errorf("want one warning while the bucket was gone and a word when writes came back:\n%s", logs)
	}
}

// A run's message is acknowledged only once the projection has its
// record: until then a worker that dies leaves the message to come back,
// and the next worker writes the record (TestARedeliveredFinishedRun…).
// Here the bucket is gone while the run parks and finishes: its messages
// stay unacknowledged, heartbeated, and are acknowledged once the records
// are written after the bucket comes back.
func TestARunsMessageIsAcknowledgedAfterItsRecordIsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	deleteRunsBucket(t, b)
	runID, _ := approvedDraftRun(t, b, "projection-4")
	unacked := func() int {
		t.Helper()
		n := 0
		for _, name := range [][2]string{{journal.StreamWork, journal.ConsumerWorkers}, {journal.StreamApprovals, journal.ConsumerApprovals}} {
			c, err := b.env.JS.Consumer(t.Context(), name[0], name[1])
			if err != nil {
				t.Fatal(err)
			}
			info, err := c.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			n += info.NumAckPending
		}
		return n
	}
	// Several projection writes (a quarter second apart) fail meanwhile.
	// Held: the task's message (its park's record) and the approval's,
	// under which the run went on to its end (its finish's record).
	for range 6 {
		if n := unacked(); n != 2 {
			t.Fatalf("with the run's records unwritten, %d messages unacknowledged, want its two", n)
		}
		time.Sleep(150 * time.Millisecond)
	}
	bringBackRunsBucket(t, b)
	waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "finished" })
	deadline := time.Now().Add(10 * time.Second)
	for unacked() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the run's message is still unacknowledged after its record was written")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A pool that stops while the bucket does not take its last records hands
// their messages back instead of acknowledging them: the pool started
// next, with the bucket back, writes the records.
func TestAPoolStoppingWithRecordsUnwrittenHandsTheirMessagesBack(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	deleteRunsBucket(t, b)
	runID, evs := approvedDraftRun(t, b, "projection-5")
	b.stopPool()
	bringBackRunsBucket(t, b)
	b.startPool()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(b.logs.String())
		}
	})
	rec := waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "finished" })
	if rec.LastSeq != evs[len(evs)-1].Seq {
		t.Errorf("record = %+v, want the finish at seq %d", rec, evs[len(evs)-1].Seq)
	}
}

// A scheduled wake-up that comes after its run's end (an expiry, a lease's
// end) reads only the run's last event, and its projection record: if
// that is not the finish's (its worker died before writing it), the run
// is read and the record written.
func TestALateScheduledWakeUpRewritesAFinishedRunsRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, evs := approvedDraftRun(t, b, "projection-6")
	waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "finished" })
	putRecord(t, b, journal.RunRecord{RunID: runID, Tenant: "cityops", TaskID: "projection-6", Agent: "one-draft", Status: "parked", LastSeq: 3})
	// A wake-up the server publishes from a schedule, as for an expiry.
	m := nats.NewMsg(journal.SchedulesPrefix + ".cityops." + runID + ".late")
	m.Header.Set("Nats-Schedule", "@at "+time.Now().Add(time.Second).UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339))
	m.Header.Set("Nats-Schedule-Target", events.ResumeSubject("cityops", runID))
	if _, err := b.env.JS.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	rec := waitRecord(t, b, runID, func(r journal.RunRecord) bool { return r.Status == "finished" })
	if rec.LastSeq != evs[len(evs)-1].Seq || rec.Reason != "done" {
		t.Errorf("record = %+v, want finished done at seq %d", rec, evs[len(evs)-1].Seq)
	}
}

// approvedDraftRun runs the one-draft profile to its end, its draft
// approved.
func approvedDraftRun(t *testing.T, b *bundle, id string) (string, []events.Event) {
	t.Helper()
	runID, q := draftRun(t, b, id)
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	return runID, b.waitEnd(runID)
}

// putRecord writes rec over the run's projection record, as a worker that
// died before its last update leaves it.
func putRecord(t *testing.T, b *bundle, rec journal.RunRecord) {
	t.Helper()
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(rec)
	if _, err := kv.Put(t.Context(), rec.Tenant+"."+rec.RunID, data); err != nil {
		t.Fatal(err)
	}
}

// deleteRunsBucket deletes the runs bucket: its writes fail until
// bringBackRunsBucket.
func deleteRunsBucket(t *testing.T, b *bundle) {
	t.Helper()
	if err := b.env.JS.DeleteKeyValue(t.Context(), journal.BucketRuns); err != nil {
		t.Fatal(err)
	}
}

// bringBackRunsBucket makes the deleted runs bucket again, as starting a
// loopgate does, with the layout natstest made (its 5 s AckWait: the
// default would lengthen the redeliveries the tests wait for).
func bringBackRunsBucket(t *testing.T, b *bundle) {
	t.Helper()
	if err := journal.Ensure(t.Context(), b.env.JS, journal.Layout{AckWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
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
