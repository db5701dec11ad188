package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLost means another decision changed the entry first: the caller lost
// the compare-and-set and must re-read.
var ErrLost = errors.New("approval entry changed concurrently")

// ErrNotFound means the call has no entry.
var ErrNotFound = errors.New("no approval entry")

// Store keeps approval entries in the loopgate_approvals bucket, and lists
// the pending ones in the loopgate_pending bucket.
type Store struct {
	kv jetstream.KeyValue
	// pending has a key <tenant>.<run_id>.<call_id> for each question from
	// its request to its decision, with the question's TTL: listing what
	// awaits a human reads it, not every entry ever written. It is an
	// index: the entry stays the truth, and a key left behind (its
	// removal lost) is skipped when listing and ages out. nil: no index
	// (the store only reads entries).
	pending jetstream.KeyValue
}

// NewStore wraps the buckets: entries (loopgate_approvals) and the index of
// pending questions (loopgate_pending, may be nil for a store that only
// reads entries).
func NewStore(entries, pending jetstream.KeyValue) *Store {
	return &Store{kv: entries, pending: pending}
}

// PendingKey is the key of a pending question in the loopgate_pending
// bucket.
func PendingKey(tenant, runID, callID string) string { return tenant + "." + runID + "." + callID }

// listedGrace keeps a question listed a little past its expiry: the expiry
// itself is decided by the run's wake-up, which takes the key away.
const listedGrace = time.Minute

// markerTTL is how long the bucket keeps the marker of a removed key.
const markerTTL = time.Minute

// Get returns a call's entry and its revision.
func (s *Store) Get(ctx context.Context, runID, callID string) (Entry, uint64, error) {
	kve, err := s.kv.Get(ctx, Key(runID, callID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, 0, fmt.Errorf("approval %s/%s: %w", runID, callID, ErrNotFound)
	}
	if err != nil {
		return Entry{}, 0, fmt.Errorf("read approval %s/%s: %w", runID, callID, err)
	}
	var e Entry
	if err := json.Unmarshal(kve.Value(), &e); err != nil {
		return Entry{}, 0, fmt.Errorf("decode approval %s/%s: %w", runID, callID, err)
	}
	return e, kve.Revision(), nil
}

// Request makes e (pending) the call's entry and returns the entry as
// stored. It is idempotent: an entry already there for the same round,
// pending or decided, is left as is and returned (a worker that died after
// writing it and before asking its question left it; the question asked
// now must be the one it holds, expiry included). A later round (an
// unknown outcome after an approval) replaces a decided entry by
// compare-and-set.
func (s *Store) Request(ctx context.Context, e Entry) (Entry, error) {
	e.State = StatePending
	b, err := json.Marshal(e)
	if err != nil {
		return Entry{}, err
	}
	key := Key(e.RunID, e.CallID)
	if _, err := s.kv.Create(ctx, key, b); err == nil {
		return e, s.list(ctx, e)
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return Entry{}, fmt.Errorf("create approval %s: %w", key, err)
	}
	cur, rev, err := s.Get(ctx, e.RunID, e.CallID)
	if err != nil {
		return Entry{}, err
	}
	switch {
	case cur.Round == e.Round && cur.Pending():
		// This request is already recorded (a worker that died after
		// writing it may have died before listing it).
		return cur, s.list(ctx, cur)
	case cur.Round == e.Round:
		return cur, nil // already decided
	case cur.Round > e.Round:
		return Entry{}, fmt.Errorf("approval %s: round %d is behind the stored round %d", key, e.Round, cur.Round)
	}
	if _, err := s.kv.Update(ctx, key, b, rev); err != nil {
		return Entry{}, fmt.Errorf("request approval %s round %d: %w", key, e.Round, ErrLost)
	}
	return e, s.list(ctx, e)
}

// list puts a pending entry's key in the index, to age out a little after
// the question expires. Its value is empty: the entry is the truth.
func (s *Store) list(ctx context.Context, e Entry) error {
	if s.pending == nil {
		return nil
	}
	ttl := max(time.Until(e.ExpiresAt)+listedGrace, time.Second).Round(time.Second)
	_, err := s.pending.Create(ctx, PendingKey(e.Tenant, e.RunID, e.CallID), nil, jetstream.KeyTTL(ttl))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("list pending approval %s/%s: %w", e.RunID, e.CallID, err)
	}
	return nil
}

// unlist takes a decided entry's key out of the index. It is best effort:
// a key left behind is skipped by Pending and ages out with its TTL.
func (s *Store) unlist(ctx context.Context, e Entry) {
	if s.pending != nil {
		_ = s.pending.Purge(ctx, PendingKey(e.Tenant, e.RunID, e.CallID), jetstream.PurgeTTL(markerTTL))
	}
}

// Decide writes a decided entry if the entry is still at rev: the
// compare-and-set that makes the first valid decision win.
func (s *Store) Decide(ctx context.Context, e Entry, rev uint64) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := s.kv.Update(ctx, Key(e.RunID, e.CallID), b, rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("decide approval %s/%s: %w", e.RunID, e.CallID, ErrLost)
		}
		return fmt.Errorf("decide approval %s/%s: %w", e.RunID, e.CallID, err)
	}
	s.unlist(ctx, e)
	return nil
}

// Pending lists pending entries, of one tenant when tenant is not empty:
// the questions in the loopgate_pending index, each read back from its
// entry (a key whose removal was lost is skipped). Its cost is what is
// pending, not every question ever asked: over 41,000 decided entries the
// old listing, which read every entry, took 2.7 s.
func (s *Store) Pending(ctx context.Context, tenant string) ([]Entry, error) {
	if s.pending == nil {
		return nil, errors.New("list approvals: no index of pending questions")
	}
	filter := ">"
	if tenant != "" {
		filter = tenant + ".>"
	}
	lister, err := s.pending.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list pending approvals: %w", err)
	}
	defer lister.Stop()
	var out []Entry
	for key := range lister.Keys() {
		parts := strings.Split(key, ".")
		if len(parts) != 3 {
			continue
		}
		e, _, err := s.Get(ctx, parts[1], parts[2])
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // listed, then its worker died before writing it
			}
			return nil, err
		}
		if e.Pending() && e.Tenant == parts[0] {
			out = append(out, e)
		}
	}
	return out, nil
}
