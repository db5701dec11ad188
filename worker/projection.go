package worker

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loopgate/loopgate/journal"
)

// projector keeps the loopgate_runs projection off the runs' path. The
// projection is for listing runs and is rebuildable from the events, so a
// run does not wait for it: each update (a KV get and a compare-and-set
// write, at start, at each park and at the finish) was two round trips in
// the middle of a step. Updates go to one goroutine, which writes what is
// queued every projectionDelay, newest per run (an update superseded
// before it is written is never written), in one batch (the journal's
// PutRuns), and the journal refuses to roll a record back.
type projector struct {
	// put writes records and returns those it could not write and may
	// try again (journal.PutRuns).
	put func(context.Context, []journal.RunRecord) ([]journal.RunRecord, error)
	log *slog.Logger

	// failingSince is when writes began to fail, zero while they succeed;
	// warned is when that was last logged (at most every
	// projectionWarnEvery). Only the run goroutine touches them.
	failingSince, warned time.Time

	mu      sync.Mutex
	pending map[string]journal.RunRecord
	// writing holds the records of the write in progress, by key.
	writing map[string]journal.RunRecord
	// waiters wait, by key, for a record of at least their seq (see
	// written); closed says no more writes will come.
	waiters map[string][]projectionWaiter
	closed  bool
	kick    chan struct{} // one token: there is something pending
	stop    chan struct{} // closed by close: write what is pending, then end
	done    chan struct{} // closed when the goroutine ends
}

func newProjector(put func(context.Context, []journal.RunRecord) ([]journal.RunRecord, error), log *slog.Logger) *projector {
	return &projector{put: put, log: log, pending: map[string]journal.RunRecord{}, waiters: map[string][]projectionWaiter{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

type projectionWaiter struct {
	seq  uint64
	wait *projectionWait
}

// projectionWait is one wait for a record: done is closed when the
// projector has dealt with it, after setting dealt unless it gave up
// (the pool stopping before the record could be written).
type projectionWait struct {
	done  chan struct{}
	dealt atomic.Bool
}

func newProjectionWait() *projectionWait { return &projectionWait{done: make(chan struct{})} }

func (w *projectionWait) finish(dealt bool) {
	w.dealt.Store(dealt)
	close(w.done)
}

// written returns a wait that ends once the projector is done with a
// record of key with LastSeq at least seq: it wrote it, found a newer one
// in the bucket, or found it can never be written (dealt is set), or it
// stopped before it could write it (dealt is not). A message is
// acknowledged only when every wait of its handling was dealt with (see
// ackAfterProjection), so a worker that dies first, or stops, leaves the
// message to be delivered again, and the next worker writes the record.
func (p *projector) written(key string, seq uint64) *projectionWait {
	w := newProjectionWait()
	p.mu.Lock()
	defer p.mu.Unlock()
	queued, inQueue := p.pending[key]
	inFlight, inWrite := p.writing[key]
	switch {
	case inQueue && queued.LastSeq >= seq || inWrite && inFlight.LastSeq >= seq:
		if p.closed {
			w.finish(false) // it will not be written here
			return w
		}
		p.waiters[key] = append(p.waiters[key], projectionWaiter{seq: seq, wait: w})
	default:
		w.finish(true) // nothing of that run left to write
	}
	return w
}

// release finishes the waits of key that rec answers: dealt with, or
// given up. p.mu is held.
func (p *projector) release(key string, rec journal.RunRecord, dealt bool) {
	ws := p.waiters[key]
	ws = slices.DeleteFunc(ws, func(w projectionWaiter) bool {
		if w.seq <= rec.LastSeq {
			w.wait.finish(dealt)
			return true
		}
		return false
	})
	if len(ws) == 0 {
		delete(p.waiters, key)
	} else {
		p.waiters[key] = ws
	}
}

// update queues rec, replacing an older queued record of the same run.
func (p *projector) update(rec journal.RunRecord) {
	key := rec.Tenant + "." + rec.RunID
	p.mu.Lock()
	if cur, ok := p.pending[key]; !ok || cur.LastSeq <= rec.LastSeq {
		p.pending[key] = rec
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// projectionDelay is how long an update waits for newer ones of the same
// run before it is written: a run that parks and is decided and resumed
// within it, or finishes, costs one write instead of several (each a KV
// get and an fsynced write).
const projectionDelay = 250 * time.Millisecond

// projectionWarnEvery spaces the warnings of a projection that keeps
// failing to be written.
const projectionWarnEvery = 30 * time.Second

// run writes queued records until close; ctx bounds each write.
func (p *projector) run(ctx context.Context) {
	defer close(p.done)
	for {
		select {
		case <-p.kick:
		case <-p.stop:
			p.writePending(ctx)
			return
		}
		select {
		case <-time.After(projectionDelay):
			p.writePending(ctx)
		case <-p.stop:
			p.writePending(ctx)
			return
		}
	}
}

func (p *projector) writePending(ctx context.Context) {
	p.mu.Lock()
	queued := p.pending
	p.pending = make(map[string]journal.RunRecord, len(queued))
	p.writing = queued
	p.mu.Unlock()
	if len(queued) == 0 {
		return
	}
	recs := slices.Collect(maps.Values(queued))
	// One batch for all of them where the bucket takes it (PutRuns).
	unwritten, err := p.put(ctx, recs)
	now := time.Now()
	switch {
	case err != nil && (p.failingSince.IsZero() || now.Sub(p.warned) >= projectionWarnEvery):
		// While the bucket does not answer, each try would log: say it
		// when it starts and then now and then.
		if p.failingSince.IsZero() {
			p.failingSince = now
		}
		p.warned = now
		p.log.WarnContext(ctx, "update run projection", "runs", len(recs), "retry", len(unwritten),
			"failing_for", now.Sub(p.failingSince).Round(time.Second).String(), "err", err)
	case err == nil && !p.failingSince.IsZero():
		p.log.InfoContext(ctx, "run projection written again", "failed_for", now.Sub(p.failingSince).Round(time.Second).String())
		p.failingSince = time.Time{}
	}
	retry := len(unwritten) > 0 && ctx.Err() == nil
	p.mu.Lock()
	p.writing = nil
	failed := map[string]bool{}
	for _, rec := range unwritten {
		key := rec.Tenant + "." + rec.RunID
		failed[key] = true
		// The bucket did not answer (a cluster electing a leader, say):
		// try again at the next write, unless a newer record came. A run
		// finished meanwhile would otherwise keep an old record, or none.
		if cur, ok := p.pending[key]; retry && (!ok || cur.LastSeq < rec.LastSeq) {
			p.pending[key] = rec
		}
	}
	for key, rec := range queued {
		switch {
		case !failed[key]:
			p.release(key, rec, true)
		case !retry: // the pool is stopping: another worker writes it
			p.release(key, rec, false)
		}
	}
	p.mu.Unlock()
	if retry {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// close writes what is queued and stops, or gives up when ctx is done;
// either way no one waits for a record any longer: the records still
// unwritten are given up (their messages go back to the queue, see
// ackAfterProjection).
func (p *projector) close(ctx context.Context) {
	close(p.stop)
	select {
	case <-p.done:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for key, ws := range p.waiters {
		for _, w := range ws {
			w.wait.finish(false)
		}
		delete(p.waiters, key)
	}
}

// projectionWaits collects, while a message is handled, the projection
// updates its acknowledgement is to wait for (putRun adds them).
type projectionWaits struct {
	mu    sync.Mutex
	waits []*projectionWait
}

type projectionWaitsKey struct{}

// withProjectionWaits returns ctx carrying a new collection of waits.
func withProjectionWaits(ctx context.Context) (context.Context, *projectionWaits) {
	w := &projectionWaits{}
	return context.WithValue(ctx, projectionWaitsKey{}, w), w
}

// addProjectionWait adds pw to the waits ctx carries, if any.
func addProjectionWait(ctx context.Context, pw *projectionWait) {
	if w, ok := ctx.Value(projectionWaitsKey{}).(*projectionWaits); ok {
		w.mu.Lock()
		w.waits = append(w.waits, pw)
		w.mu.Unlock()
	}
}

// wait waits for every update collected, at most max, and reports
// whether the projector gave any up, and whether max passed first.
func (w *projectionWaits) wait(max time.Duration) (givenUp, timedOut bool) {
	w.mu.Lock()
	waits := w.waits
	w.mu.Unlock()
	timeout := time.NewTimer(max)
	defer timeout.Stop()
	for _, pw := range waits {
		select {
		case <-pw.done:
			givenUp = givenUp || !pw.dealt.Load()
		case <-timeout.C:
			return givenUp, true // the bucket is slow: the record is in this process only
		}
	}
	return givenUp, false
}

// none reports whether there is nothing left to wait for, and nothing
// given up.
func (w *projectionWaits) none() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pw := range w.waits {
		select {
		case <-pw.done:
			if !pw.dealt.Load() {
				return false
			}
		default:
			return false
		}
	}
	return true
}
