package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/wait"
)

// RunRecord is a run's entry in BucketRuns, for listing runs without
// replaying them. It is a projection of the run's events, rebuildable from
// them; it matches the key <tenant>.<run_id>.
type RunRecord struct {
	RunID  string `json:"run_id"`
	Tenant string `json:"tenant"`
	TaskID string `json:"task_id"`
	Agent  string `json:"agent"`
	// Status is the run's state: RunRunning, RunParked or RunFinished.
	Status string `json:"status"`
	// Reason is why a finished run stopped (an events.Reason).
	Reason string `json:"reason,omitempty"`
	// LastSeq is the run's own seq of its last event (events.Event.Seq).
	LastSeq uint64 `json:"last_seq"`
	// Updated is when the writer produced this record, by its clock.
	Updated time.Time `json:"updated"`
}

// The statuses of a RunRecord.
const (
	RunRunning  = "running"  // started or resumed, on a worker or in the queue
	RunParked   = "parked"   // waiting for a human, holding no worker
	RunFinished = "finished" // ended; Reason says why
)

// PutRun writes r under <tenant>.<run_id> in BucketRuns unless the bucket
// already holds a record of the run with a greater LastSeq, so a late
// writer cannot roll the projection back, or one with the same LastSeq and
// status, which would be a write for nothing. It is best effort: the events
// stay the truth, and callers usually log an error rather than fail.
func (j *Journal) PutRun(ctx context.Context, r RunRecord) error {
	kv, err := j.runsBucket(ctx)
	if err != nil {
		return err
	}
	const attempts = 4
	for try := 1; try <= attempts; try++ {
		m, ok, err := runMessage(ctx, kv, r)
		if err != nil || !ok {
			return err
		}
		if try > 1 && m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "0" {
			// No record, yet the write as a first one was refused: the
			// key's last message is a delete or purge marker (an operator
			// ran nats kv del), which a first write must name too, or the
			// run's record could never be written again.
			if err := j.afterMarker(ctx, m); err != nil {
				return fmt.Errorf("journal: put run %s.%s: %w", r.Tenant, r.RunID, err)
			}
		}
		_, err = j.js.PublishMsg(ctx, m)
		if err == nil {
			return nil
		}
		// Another writer of the record (10071), or, on a replicated
		// bucket, the record's previous write still being proposed (10164,
		// no number: nothing was checked, nothing stored; seen as a
		// warning on every R3 pool under load): read it again, and try.
		if !isAPIError(err, jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return fmt.Errorf("journal: put run %s.%s: %w", r.Tenant, r.RunID, err)
		}
		if werr := wait.For(ctx, time.Duration(try)*time.Millisecond); werr != nil {
			return fmt.Errorf("journal: put run %s.%s: %w", r.Tenant, r.RunID, err)
		}
	}
	return fmt.Errorf("journal: put run %s.%s: still contended after %d attempts", r.Tenant, r.RunID, attempts)
}

// afterMarker makes m, a first write of a runs record, conditional on the
// delete or purge marker its key's subject ends with, if any.
func (j *Journal) afterMarker(ctx context.Context, m *nats.Msg) error {
	st, err := j.js.Stream(ctx, "KV_"+BucketRuns)
	if err != nil {
		return err
	}
	last, err := st.GetLastMsgForSubject(ctx, m.Subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil // no marker: the refusal was another writer's first record
	case err != nil:
		return err
	case last.Header.Get("KV-Operation") == "":
		return nil // a record now: the next read finds it
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last.Sequence, 10))
	return nil
}

func (j *Journal) runsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.runs != nil {
		return j.runs, nil
	}
	kv, err := j.js.KeyValue(ctx, BucketRuns)
	if err != nil {
		return nil, fmt.Errorf("journal: open bucket %s: %w", BucketRuns, err)
	}
	if st, err := j.js.Stream(ctx, "KV_"+BucketRuns); err == nil {
		j.runsBatch.Store(st.CachedInfo().Config.AllowAtomicPublish)
	}
	j.runs = kv
	return kv, nil
}

// PutRuns writes records as PutRun does, several at once: with the bucket's
// stream allowing atomic publish (Ensure turns it on), the records whose
// stored version is older go in one atomic batch per DefaultGroupEvents,
// each message conditional on the revision it replaces. On one server
// with sync always that is a few fsyncs for the batch instead of one per
// record, and the projection is written in bursts (one per pool every
// quarter second) of every run that moved. A refused batch (a record
// changed by another writer meanwhile, or no atomic publish) changes
// nothing: its records are then written one by one with PutRun.
//
// unwritten are the records that could not be written and may be tried
// again (the stream did not answer, say, while a cluster elects a
// leader); err says why, for those and for records that never can be (a
// run id that is no subject token).
func (j *Journal) PutRuns(ctx context.Context, recs []RunRecord) (unwritten []RunRecord, err error) {
	kv, err := j.runsBucket(ctx)
	if err != nil {
		return recs, err
	}
	var (
		msgs []*nats.Msg
		errs []error
		sent []RunRecord
	)
	flush := func() {
		if len(msgs) == 0 {
			return
		}
		if len(msgs) == 1 || !j.runsBatch.Load() {
			unwritten, errs = j.putEach(ctx, sent, unwritten, errs)
		} else if _, err := j.publishBatch(ctx, "KV_"+BucketRuns, msgs); err != nil {
			if isAPIError(err, codeBatchDisabled) {
				j.runsBatch.Store(false)
			}
			unwritten, errs = j.putEach(ctx, sent, unwritten, errs)
		}
		msgs, sent = nil, nil
	}
	stalled := false // the bucket did not answer: the rest would wait as long each
	for _, r := range recs {
		if err := checkRun(r.Tenant, r.RunID); err != nil {
			errs = append(errs, fmt.Errorf("journal: put run: %w", err))
			continue
		}
		if stalled {
			unwritten = append(unwritten, r) // left for the next attempt
			continue
		}
		m, ok, err := runMessage(ctx, kv, r)
		switch {
		case err != nil:
			stalled = true
			errs = append(errs, fmt.Errorf("%w (the records after it not tried)", err))
			unwritten = append(unwritten, r)
			continue
		case !ok:
			continue // the bucket holds a newer record
		}
		msgs, sent = append(msgs, m), append(sent, r)
		if len(msgs) == DefaultGroupEvents {
			flush()
		}
	}
	flush()
	return unwritten, errors.Join(errs...)
}

// runMessage is the conditional write of r over the bucket's current
// record, or ok false if that record is newer or already says the same.
func runMessage(ctx context.Context, kv jetstream.KeyValue, r RunRecord) (*nats.Msg, bool, error) {
	if err := checkRun(r.Tenant, r.RunID); err != nil {
		return nil, false, fmt.Errorf("journal: put run: %w", err)
	}
	key := r.Tenant + "." + r.RunID
	data, err := json.Marshal(r)
	if err != nil {
		return nil, false, fmt.Errorf("journal: put run %s: %w", key, err)
	}
	var rev uint64
	entry, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, false, fmt.Errorf("journal: put run %s: %w", key, err)
	default:
		var cur RunRecord
		if json.Unmarshal(entry.Value(), &cur) == nil &&
			(cur.LastSeq > r.LastSeq || cur.LastSeq == r.LastSeq && cur.Status == r.Status) {
			return nil, false, nil // newer, or the same: nothing to write
		}
		rev = entry.Revision()
	}
	m := nats.NewMsg("$KV." + BucketRuns + "." + key)
	m.Data = data
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	return m, true, nil
}

// putEach writes records one by one with PutRun, adding those it could
// not write to unwritten and why to errs.
func (j *Journal) putEach(ctx context.Context, recs, unwritten []RunRecord, errs []error) ([]RunRecord, []error) {
	for _, r := range recs {
		if err := j.PutRun(ctx, r); err != nil {
			unwritten, errs = append(unwritten, r), append(errs, err)
		}
	}
	return unwritten, errs
}

// Run returns the runs projection's current record of one run; ok is
// false if it has none.
func (j *Journal) Run(ctx context.Context, tenant, runID string) (r RunRecord, ok bool, err error) {
	if err := checkRun(tenant, runID); err != nil {
		return RunRecord{}, false, fmt.Errorf("journal: run record: %w", err)
	}
	kv, err := j.runsBucket(ctx)
	if err != nil {
		return RunRecord{}, false, err
	}
	e, err := kv.Get(ctx, tenant+"."+runID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return RunRecord{}, false, nil
	case err != nil:
		return RunRecord{}, false, fmt.Errorf("journal: run record %s.%s: %w", tenant, runID, err)
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return RunRecord{}, false, fmt.Errorf("journal: run record %s.%s: %w", tenant, runID, err)
	}
	return r, true, nil
}

// Runs returns the runs projection's current record of every run of
// tenant (every tenant if empty), in no particular order. It reads the
// bucket's last message per key through one watcher, not a get per key.
// The records trail the events by up to one projection flush (a quarter
// second) and are best effort: a run's events stay its truth. A record
// that does not decode is left out and named in the error, which then
// comes with every record that did (a non-nil slice, empty if none did);
// an error with a nil slice means the listing itself failed.
func (j *Journal) Runs(ctx context.Context, tenant string) ([]RunRecord, error) {
	kv, err := j.runsBucket(ctx)
	if err != nil {
		return nil, err
	}
	keys := ">"
	if tenant != "" {
		if !events.ValidToken(tenant) {
			return nil, fmt.Errorf("journal: list runs: tenant %q is not a valid subject token", tenant)
		}
		keys = tenant + ".*"
	}
	w, err := kv.Watch(ctx, keys, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("journal: list runs: %w", err)
	}
	defer w.Stop()
	var (
		out []RunRecord
		bad []error
	)
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("journal: list runs: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("journal: list runs: the watcher stopped")
			}
			if e == nil { // every key's current record has been delivered
				if out == nil {
					out = []RunRecord{} // non-nil: the listing itself worked
				}
				return out, errors.Join(bad...)
			}
			var r RunRecord
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				bad = append(bad, fmt.Errorf("journal: runs projection: record %s (revision %d) is not a run record: %w", e.Key(), e.Revision(), err))
				continue
			}
			if e.Key() != r.Tenant+"."+r.RunID {
				// JSON, but not this key's run ({} or null, a foreign
				// writer): a caller reading the run would fail on it.
				bad = append(bad, fmt.Errorf("journal: runs projection: record %s (revision %d) is not a run record: it names run %q of tenant %q", e.Key(), e.Revision(), r.RunID, r.Tenant))
				continue
			}
			out = append(out, r)
		}
	}
}
