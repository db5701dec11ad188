package journal

// HoldGroup stops j's group commit from starting flights, so a test can
// queue appends and have them committed as one flight: queued reports how
// many wait, release starts the flights. j must have WithGroupCommit.
func HoldGroup(j *Journal) (queued func() int, release func()) {
	g := j.group
	g.mu.Lock()
	g.flying = true
	g.mu.Unlock()
	queued = func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.queue)
	}
	return queued, func() { go g.fly() }
}
