package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLost means another decision changed the entry first: the caller lost
// the compare-and-set and must re-read.
var ErrLost = errors.New("approval entry changed concurrently")

// ErrNotFound means the call has no entry.
var ErrNotFound = errors.New("no approval entry")

// Store keeps approval entries in the loopgate_approvals bucket.
type Store struct {
	kv jetstream.KeyValue
}

// NewStore wraps the bucket.
func NewStore(kv jetstream.KeyValue) *Store { return &Store{kv: kv} }

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
		return e, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return Entry{}, fmt.Errorf("create approval %s: %w", key, err)
	}
	cur, rev, err := s.Get(ctx, e.RunID, e.CallID)
	if err != nil {
		return Entry{}, err
	}
	switch {
	case cur.Round == e.Round:
		return cur, nil // this request is already recorded, pending or decided
	case cur.Round > e.Round:
		return Entry{}, fmt.Errorf("approval %s: round %d is behind the stored round %d", key, e.Round, cur.Round)
	}
	if _, err := s.kv.Update(ctx, key, b, rev); err != nil {
		return Entry{}, fmt.Errorf("request approval %s round %d: %w", key, e.Round, ErrLost)
	}
	return e, nil
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
	return nil
}

// Pending lists pending entries, of one tenant when tenant is not empty.
// It reads every key: it is for operators' queues, not hot paths.
func (s *Store) Pending(ctx context.Context, tenant string) ([]Entry, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	defer lister.Stop()
	var out []Entry
	for key := range lister.Keys() {
		runID, callID, ok := strings.Cut(key, ".")
		if !ok {
			continue
		}
		e, _, err := s.Get(ctx, runID, callID)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return nil, err
		}
		if e.Pending() && (tenant == "" || e.Tenant == tenant) {
			out = append(out, e)
		}
	}
	return out, nil
}
