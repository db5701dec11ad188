package journal

import (
	"container/list"
	"slices"
	"sync"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/loopgate/loopgate/events"
)

// DefaultRunCacheBytes is the default budget of the run cache (see
// WithRunCache).
const DefaultRunCacheBytes = 4 << 20

// eventOverhead is what one cached event costs besides its data: the
// envelope's strings and the slice slot, roughly.
const eventOverhead = 256

// runCache keeps the events of runs this journal recently wrote or read,
// least recently used first out once their size passes the budget.
//
// It saves reads, never decides anything: Load serves a run from it only
// when the stream's last event of the run (asked of the stream leader on
// every Load) is the cached one, and otherwise reads just the events after
// the cached ones. A run's events are never changed once stored, so a
// cached prefix stays true; a cache entry whose run another writer
// extended only costs the read of the tail.
//
// Why: a worker that parks a run, decides its approval and resumes it
// reads the run twice more right after writing it; without the cache each
// read was a consumer created, read and deleted on the server.
type runCache struct {
	mu     sync.Mutex
	budget int
	size   int
	order  *list.List // of *cachedRun, most recently used first
	byRun  map[string]*list.Element
}

type cachedRun struct {
	key string
	evs []events.Event // decoded, in run order
	// raw holds the encodings of the events appended after evs, not yet
	// decoded: an appended event is decoded only if the run is read from
	// the cache (most are never read: a run a worker drives from start to
	// finish is not), and then once.
	raw     [][]byte
	lastSeq uint64 // run seq of the last event, decoded or not
	last    uint64 // stream seq of the last event
	size    int
}

// decodeLocked decodes the pending encodings into evs. False means one
// did not decode; the run must then be dropped.
func (r *cachedRun) decodeLocked() bool {
	for _, data := range r.raw {
		var e events.Event
		if jsonv1.Unmarshal(data, &e) != nil { // as decode does
			return false
		}
		r.evs = append(r.evs, e)
	}
	r.raw = nil
	return true
}

func newRunCache(budget int) *runCache {
	return &runCache{budget: budget, order: list.New(), byRun: map[string]*list.Element{}}
}

func runKey(tenant, runID string) string { return tenant + "." + runID }

// get returns a copy of the cached events of a run and the stream seq of
// the last one.
func (c *runCache) get(key string) ([]events.Event, uint64, bool) {
	if c == nil {
		return nil, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byRun[key]
	if !ok {
		return nil, 0, false
	}
	r := el.Value.(*cachedRun)
	if !r.decodeLocked() {
		c.removeLocked(key)
		return nil, 0, false
	}
	c.order.MoveToFront(el)
	return slices.Clone(r.evs), r.last, true
}

// put caches evs as the whole run, last being the stream seq of the last.
// It copies evs.
func (c *runCache) put(key string, evs []events.Event, last uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(key)
	if len(evs) == 0 || finished(evs) {
		return // nothing to keep, or nothing more will happen to it
	}
	r := &cachedRun{key: key, evs: slices.Clone(evs), lastSeq: evs[len(evs)-1].Seq, last: last}
	for i := range r.evs {
		r.size += eventSize(&r.evs[i])
	}
	c.insertLocked(r)
}

// extend adds evs, just appended after stream seq base and ending at
// stream seq last, to the cached run, if the cache held the run up to
// base (or base is 0: a new run). Otherwise it forgets the run: the cache
// never holds a run with a gap. encoded[i] is evs[i] as the stream stored
// it; the cache keeps the encodings and decodes them when the run is read,
// so a cached event is exactly what a read from the stream returns.
func (c *runCache) extend(key string, base uint64, evs []events.Event, encoded [][]byte, last uint64) {
	if c == nil || len(evs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byRun[key]
	if !ok {
		if base == 0 && evs[0].Seq == 1 && !finished(evs) {
			r := &cachedRun{key: key, raw: slices.Clone(encoded), lastSeq: evs[len(evs)-1].Seq, last: last}
			for i := range evs {
				r.size += eventSize(&evs[i])
			}
			c.insertLocked(r)
		}
		return
	}
	r := el.Value.(*cachedRun)
	if r.last != base || r.lastSeq+1 != evs[0].Seq || finished(evs) {
		c.removeLocked(key)
		return
	}
	// get hands out copies of evs, and raw is never handed out, so
	// appending in place is safe.
	r.raw = append(r.raw, encoded...)
	r.lastSeq = evs[len(evs)-1].Seq
	r.last = last
	for i := range evs {
		n := eventSize(&evs[i])
		r.size += n
		c.size += n
	}
	c.order.MoveToFront(el)
	c.evictLocked()
}

// forget drops a run, after a failed append (its outcome is unknown).
func (c *runCache) forget(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(key)
}

func (c *runCache) insertLocked(r *cachedRun) {
	if r.size > c.budget {
		return
	}
	c.byRun[r.key] = c.order.PushFront(r)
	c.size += r.size
	c.evictLocked()
}

func (c *runCache) removeLocked(key string) {
	if el, ok := c.byRun[key]; ok {
		c.size -= el.Value.(*cachedRun).size
		c.order.Remove(el)
		delete(c.byRun, key)
	}
}

func (c *runCache) evictLocked() {
	for c.size > c.budget && c.order.Len() > 0 {
		c.removeLocked(c.order.Back().Value.(*cachedRun).key)
	}
}

// finished reports whether evs end the run: a finished run is not read
// again on the hot path, so it is not worth its space.
func finished(evs []events.Event) bool {
	return evs[len(evs)-1].Type == events.TypeFinished
}

func eventSize(e *events.Event) int {
	return eventOverhead + len(e.Data) + len(e.EventID) + len(e.RunID) + len(e.Tenant) + len(e.CallID) + len(e.Tool)
}
