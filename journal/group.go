package journal

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
)

// Group commit.
//
// On a single server with sync_interval always, every conditional append
// is one fsync of StreamEvents, and the stream does them one after another
// (about 3,600/s on the machine the benchmarks ran on): with many runs
// active that, not the host, is the limit. An atomic batch costs a few
// fsyncs whatever its size (a batch of 64 events about 3.4 ms against
// 0.27 ms for one append), so appends of different runs that are waiting
// at the same time can share one: each run's share of the batch carries
// the run's own expected last sequence on its first message, and the
// server checks every share against the stream as it was before the batch.
//
// A group commits one flight at a time. A flight takes what is queued
// (one share per run, at most maxEvents events); fewer than min appends
// go as they would without the group, at once and side by side, because a
// small batch costs more than the appends it saves. A batch the server
// refuses for any reason (one share's run moved on, a Nats-Msg-Id already
// stored after a lost ack, too many batches open, a timeout) costs nothing
// but time: every share of it is then appended on its own, with Append's
// and AppendBatch's full contract, so a batch can only ever save fsyncs,
// never change an outcome.

// Group commit defaults: the fewest appends worth a batch (below it a
// batch costs more than the appends, measured in docs/durability.md) and
// the most events in one.
const (
	DefaultGroupMin    = 8
	DefaultGroupEvents = 256
)

// WithGroupCommit makes appends of different runs that wait at the same
// time share atomic batches when at least least of them (DefaultGroupMin
// if least is 0) are queued; a flight holds at most DefaultGroupEvents events.
// It pays on a single server that fsyncs every write (sync_interval
// always), where the stream's fsyncs are the limit; where appends cost no
// fsync, a batch is slower than the appends it replaces. StreamEvents must
// allow atomic publish (Ensure turns it on); while it does not, appends go
// one by one. The contract of Append and AppendBatch is unchanged.
func WithGroupCommit(least int) Option {
	return func(j *Journal) {
		if least <= 0 {
			least = DefaultGroupMin
		}
		j.group = &group{j: j, min: least, maxEvents: DefaultGroupEvents}
	}
}

// GroupStats counts what a journal's group commit did.
type GroupStats struct {
	Batches  uint64 // batches the server stored
	Events   uint64 // events stored in them
	Alone    uint64 // appends that went on their own: too few waiting, or none could share
	Refused  uint64 // batches the server refused, whose shares were then appended on their own
	MaxShare uint64 // the most appends one stored batch held
	// BatchTime is the time from the first message of the stored batches
	// published to their commits' acknowledgements, summed.
	BatchTime time.Duration
}

// GroupStats returns the counts of the journal's group commit (all zero
// without WithGroupCommit).
func (j *Journal) GroupStats() GroupStats {
	if j.group == nil {
		return GroupStats{}
	}
	g := j.group
	return GroupStats{
		Batches:   g.batches.Load(),
		Events:    g.events.Load(),
		Alone:     g.alone.Load(),
		Refused:   g.refused.Load(),
		MaxShare:  g.maxShare.Load(),
		BatchTime: time.Duration(g.batchTime.Load()),
	}
}

// group queues appends and commits them in flights.
type group struct {
	j         *Journal
	min       int
	maxEvents int

	mu     sync.Mutex
	queue  []*share
	flying bool // a goroutine is running flights: one at a time

	batches, events, alone, refused, maxShare atomic.Uint64
	batchTime                                 atomic.Int64 // nanoseconds
}

// share is one Append or AppendBatch waiting in a group.
type share struct {
	ctx    context.Context
	last   uint64
	evs    []events.Event
	stored [][]byte
	atomic bool // AppendBatch: all of evs or none

	taken bool // in a flight (under group.mu)
	msgs  []*nats.Msg
	done  chan struct{}
	seq   uint64
	err   error
}

// append queues an append of evs after stream seq last and waits for its
// outcome, which is Append's (or AppendBatch's, if atomic).
func (g *group) append(ctx context.Context, last uint64, evs []events.Event, stored [][]byte, atomic bool) (uint64, error) {
	if len(evs) == 0 {
		return last, nil
	}
	// The flight may read the share's events after the caller has gone
	// (its ctx ended): a copy, so the caller's slice stays its own. stored
	// is the flight's output (each event's encoding, for the run cache),
	// read by the caller only after an outcome without error: a copy of it
	// left the cache empty after every group append, and each next read
	// of the run fetched its events one by one (approval=required at
	// sync always lost a third of its rate).
	s := &share{ctx: ctx, last: last, evs: slices.Clone(evs), stored: stored, atomic: atomic, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, s)
	if !g.flying {
		g.flying = true
		go g.fly()
	}
	g.mu.Unlock()
	select {
	case <-s.done:
		return s.seq, s.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	if !s.taken {
		g.queue = deleteShare(g.queue, s)
	}
	g.mu.Unlock()
	// Queued, nothing was sent. In a flight, the batch may yet be stored:
	// its outcome is unknown, as Append's is when ctx ends mid-publish.
	// The caller used to wait for the flight's answer, up to the
	// connection's timeout (5 s) past its own deadline.
	return last, ctx.Err()
}

// fly runs flights until the queue is empty.
func (g *group) fly() {
	for {
		g.mu.Lock()
		flight := g.take()
		if len(flight) == 0 {
			g.flying = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if len(flight) < g.min || g.j.checkAtomic(context.Background()) != nil {
			g.each(flight)
			continue
		}
		g.together(flight)
	}
}

// take removes the next flight from the queue: in queue order, at most one
// share per run (a run's second append, which can only be another writer's
// in this process, waits for the next flight, so no batch holds two
// expectations on one run) and at most maxEvents events, though always at
// least one share. The caller holds g.mu.
func (g *group) take() []*share {
	var (
		flight []*share
		rest   []*share
		runs   = map[string]bool{}
		n      int
	)
	for _, s := range g.queue {
		key := runKey(s.evs[0].Tenant, s.evs[0].RunID)
		if runs[key] || (len(flight) > 0 && n+len(s.evs) > g.maxEvents) {
			// A share left for the next flight keeps its run's place:
			// the run's later append, queued behind it, used to be taken
			// in its stead, and win the run from the writer queued first.
			runs[key] = true
			rest = append(rest, s)
			continue
		}
		runs[key] = true
		n += len(s.evs)
		s.taken = true
		flight = append(flight, s)
	}
	g.queue = rest
	return flight
}

// each appends every share of the flight on its own, side by side, and
// waits for all of them.
func (g *group) each(flight []*share) {
	var wg sync.WaitGroup
	for _, s := range flight {
		g.alone.Add(1)
		wg.Go(func() {
			if s.atomic {
				s.seq, s.err = g.j.appendBatch(s.ctx, s.last, s.evs, s.stored)
			} else {
				s.seq, s.err = g.j.appendEach(s.ctx, s.last, s.evs, s.stored)
			}
			close(s.done)
		})
	}
	wg.Wait()
}

// together commits the flight as one atomic batch; if the server refuses
// it, each share is appended on its own. A share whose events cannot be
// encoded as a batch (the wrong run, seqs out of order) is appended on its
// own too, where it gets Append's error.
func (g *group) together(flight []*share) {
	var (
		batch, alone []*share
		msgs         []*nats.Msg
	)
	for _, s := range flight {
		m, err := batchMessages(s.last, s.evs, s.stored)
		if err != nil {
			alone = append(alone, s)
			continue
		}
		s.msgs = m
		batch = append(batch, s)
		msgs = append(msgs, m...)
	}
	if len(batch) < 2 {
		g.each(flight)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.j.js.Options().DefaultTimeout)
	t0 := time.Now()
	seq, err := g.j.publishBatch(ctx, StreamEvents, msgs)
	took := time.Since(t0)
	cancel()
	if err != nil {
		switch {
		case isAPIError(err, codeBatchDisabled):
			g.j.atomic.Store(false)
		case isAPIError(err, codeBatchTooLarge):
			// The server's jetstream { limits { batch { max_msgs } } } is
			// below maxEvents: ask for no more than it takes from now on.
			g.mu.Lock()
			g.maxEvents = batchLimit(err, min(g.maxEvents, len(msgs))/2)
			g.mu.Unlock()
		}
		g.refused.Add(1)
		g.each(flight)
		return
	}
	g.batches.Add(1)
	g.events.Add(uint64(len(msgs)))
	g.batchTime.Add(int64(took))
	if n := uint64(len(batch)); n > g.maxShare.Load() {
		g.maxShare.Store(n) // one flight at a time: no race
	}
	// The batch's messages are stored contiguously, in order, ending at seq.
	next := seq - uint64(len(msgs))
	for _, s := range batch {
		next += uint64(len(s.msgs))
		s.seq = next
		close(s.done)
	}
	g.each(alone)
}

// batchLimit is the most messages a batch may hold according to a
// server's "batch is too large: <max>" error, or otherwise guess (at least
// 2 either way).
func batchLimit(err error, guess int) int {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		_, after, _ := strings.Cut(apiErr.Description, ": ")
		if n, perr := strconv.Atoi(strings.TrimSpace(after)); perr == nil {
			guess = n
		}
	}
	return max(guess, 2)
}

// deleteShare removes s from q.
func deleteShare(q []*share, s *share) []*share {
	for i, x := range q {
		if x == s {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}
