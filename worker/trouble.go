package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// troubleEvery is how often a pool repeats the warning of a trouble that
// goes on (troubleLog).
const troubleEvery = 10 * time.Second

// troubleLog reports a failure that all the workers of a pool meet at
// once, such as their pulls of work when the server holding them dies or
// the consumer has no leader yet: once for the pool, not once per
// worker and retry (16 workers retrying every 2s logged 8 lines a
// second through an outage). It warns at the first failure, then at most
// once per every with how many failures there were since, and says once,
// at the first success after them, that the trouble is over.
type troubleLog struct {
	what  string
	log   *slog.Logger
	now   func() time.Time
	every time.Duration

	failing atomic.Bool // the fast path of ok, taken on every success

	mu       sync.Mutex
	since    time.Time // the trouble's first failure
	warned   time.Time // its last warning
	unwarned int       // failures since that warning
	failures int       // failures since the trouble began
}

func newTroubleLog(what string, log *slog.Logger, now func() time.Time) *troubleLog {
	return &troubleLog{what: what, log: log, now: now, every: troubleEvery}
}

// failed notes one failure, err, and warns unless the pool warned of
// this trouble less than every ago.
func (t *troubleLog) failed(ctx context.Context, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.failures++
	if t.failing.Load() {
		t.unwarned++
		if now.Sub(t.warned) < t.every {
			return
		}
		t.log.WarnContext(ctx, t.what, "err", err, "failures", t.unwarned, "since", now.Sub(t.since).Round(time.Millisecond))
	} else {
		t.failing.Store(true)
		t.since = now
		t.log.WarnContext(ctx, t.what, "err", err)
	}
	t.warned, t.unwarned = now, 0
}

// ok notes a success: the first after failures ends the trouble.
func (t *troubleLog) ok(ctx context.Context) {
	if !t.failing.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.failing.Load() {
		return // another worker said so
	}
	t.failing.Store(false)
	t.log.InfoContext(ctx, t.what+": working again", "failures", t.failures, "after", t.now().Sub(t.since).Round(time.Millisecond))
	t.failures, t.unwarned = 0, 0
}
