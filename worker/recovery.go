package worker

import (
	"context"
	"sync"
	"time"

	"github.com/loopgate/loopgate/internal/wait"
)

// recovery carries word, between the messages a pool holds through an
// outage, that JetStream answers again. Each held message tries again at
// doubling intervals, up to maxOutageDelay: alone, a run held since early
// in an outage goes on up to that long after it ended (4 s after a store
// was emptied, in TestAHeldRunGoesOnWhenAnotherGetsThrough; 0.25 s when
// told). The first held message whose try gets through now tells the
// others, which try at once, but not sooner than RetryDelay after their
// own last try: in a partial outage, where some writes go through and
// others do not, that costs no more tries than a fresh outage does.
type recovery struct {
	mu sync.Mutex
	ch chan struct{} // closed when a held message got through; nil when no one waits
}

// awaited returns a channel closed at the next recovery.
func (r *recovery) awaited() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

// tell wakes every message waiting out an outage.
func (r *recovery) tell() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch != nil {
		close(r.ch)
		r.ch = nil
	}
}

// waitOutage waits delay before the next try of something JetStream
// refused, or less when another held message got through meanwhile: then
// until at least RetryDelay since this one's last try (when the wait
// began). It returns ctx's error if ctx ends first.
func (p *Pool) waitOutage(ctx context.Context, delay time.Duration) error {
	began := time.Now()
	recovered := p.recovery.awaited()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	case <-recovered:
		return wait.For(ctx, min(delay, p.opts.RetryDelay)-time.Since(began))
	}
}
