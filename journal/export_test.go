package journal

import "time"

// HoldGroup stops j's group commit from starting flights, so a test can
// queue appends and have them committed as one flight: queued reports how
// many wait, release starts the flights. j must have WithGroupCommit. It
// first waits for the group to be idle: a flight goroutine that just
// finished an append may not have seen the empty queue yet.
func HoldGroup(j *Journal) (queued func() int, release func()) {
	g := j.group
	for {
		g.mu.Lock()
		if !g.flying {
			g.flying = true
			g.mu.Unlock()
			break
		}
		g.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	queued = func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.queue)
	}
	return queued, func() { go g.fly() }
}

// CachedEvents reports how many events of a run j's run cache holds, and
// whether it holds the run at all.
func CachedEvents(j *Journal, tenant, runID string) (int, bool) {
	evs, _, ok := j.cache.get(runKey(tenant, runID))
	return len(evs), ok
}
