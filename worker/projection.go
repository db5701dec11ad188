package worker

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
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
	kick    chan struct{} // one token: there is something pending
	stop    chan struct{} // closed by close: write what is pending, then end
	done    chan struct{} // closed when the goroutine ends
}

func newProjector(put func(context.Context, []journal.RunRecord) ([]journal.RunRecord, error), log *slog.Logger) *projector {
	return &projector{put: put, log: log, pending: map[string]journal.RunRecord{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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
	if len(unwritten) > 0 && ctx.Err() == nil {
		// The bucket did not answer (a cluster electing a leader, say):
		// try again at the next write, unless a newer record came. A run
		// finished meanwhile would otherwise keep an old record, or none.
		p.mu.Lock()
		for _, rec := range unwritten {
			key := rec.Tenant + "." + rec.RunID
			if cur, ok := p.pending[key]; !ok || cur.LastSeq < rec.LastSeq {
				p.pending[key] = rec
			}
		}
		p.mu.Unlock()
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// close writes what is queued and stops, or gives up when ctx is done.
func (p *projector) close(ctx context.Context) {
	close(p.stop)
	select {
	case <-p.done:
	case <-ctx.Done():
	}
}
