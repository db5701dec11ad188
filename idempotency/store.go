// Package idempotency makes side effects happen at most once per operation
// id. The loopgate_idempotency bucket binds each operation id (derived from
// run and call) to the hash of its arguments by an atomic create, then to
// the outcome: a second execution with the same id and hash gets the
// recorded result instead of running the tool again, and the same id with
// other arguments is a conflict. Records are never deleted (KV Create is not
// atomic across a delete); they only age out, by the bucket's max age
// (journal.Layout.IdempotencyMaxAge) counted from their last write.
package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// State of an operation.
type State string

// States.
const (
	// InFlight: an attempt claimed the operation and may be running; if it
	// is found in this state later, its outcome is unknown.
	InFlight State = "in_flight"
	// Completed: the tool returned; Result is what it returned.
	Completed State = "completed"
	// Unknown: the attempt timed out or was interrupted; it may or may not
	// have taken effect.
	Unknown State = "unknown"
	// Retryable: the attempt failed in a way that means it did not happen
	// (a transient failure); another attempt may claim it.
	Retryable State = "retryable"
	// Failed: the tool failed unexpectedly.
	Failed State = "failed"
	// Abandoned: a human decided not to pursue an unknown outcome.
	Abandoned State = "abandoned"
)

// Record is one operation's entry.
type Record struct {
	OperationID string          `json:"operation_id"`
	ArgsHash    string          `json:"args_hash"`
	RunID       string          `json:"run_id"`
	CallID      string          `json:"call_id"`
	Tool        string          `json:"tool"`
	State       State           `json:"state"`
	Attempt     int             `json:"attempt"`
	Result      json.RawMessage `json:"result,omitempty"`
	// ResultBytes is the size of the tool's result when Result holds
	// only its first part (cut to fit an event), 0 when it is whole: a
	// reuse of the record tells the model it sees a part, as the first
	// execution did.
	ResultBytes int       `json:"result_bytes,omitempty"`
	Updated     time.Time `json:"updated"`
}

// ErrConflict means the operation id is bound to other arguments: the call
// is never executed.
var ErrConflict = errors.New("operation id is bound to other arguments")

// Store keeps records in the loopgate_idempotency bucket.
type Store struct {
	kv jetstream.KeyValue
}

// NewStore wraps the bucket.
func NewStore(kv jetstream.KeyValue) *Store { return &Store{kv: kv} }

// Claim tries to bind rec's operation id to its arguments, in flight. When
// the id is new it returns fresh=true and the new revision: the caller may
// run the tool. Otherwise it returns the stored record and its revision,
// for the caller to decide; a stored record with another args hash is
// ErrConflict.
func (s *Store) Claim(ctx context.Context, rec Record) (prior Record, rev uint64, fresh bool, err error) {
	rec.State = InFlight
	b, err := json.Marshal(rec)
	if err != nil {
		return Record{}, 0, false, err
	}
	rev, err = s.kv.Create(ctx, rec.OperationID, b)
	if err == nil {
		return rec, rev, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return Record{}, 0, false, fmt.Errorf("claim operation %s: %w", rec.OperationID, err)
	}
	prior, rev, err = s.Get(ctx, rec.OperationID)
	if err != nil {
		return Record{}, 0, false, err
	}
	if prior.ArgsHash != rec.ArgsHash {
		return prior, rev, false, fmt.Errorf("operation %s: stored hash %s, call hash %s: %w", rec.OperationID, prior.ArgsHash, rec.ArgsHash, ErrConflict)
	}
	return prior, rev, false, nil
}

// Get reads an operation's record. A missing one is jetstream.ErrKeyNotFound.
func (s *Store) Get(ctx context.Context, operationID string) (Record, uint64, error) {
	e, err := s.kv.Get(ctx, operationID)
	if err != nil {
		return Record{}, 0, fmt.Errorf("read operation %s: %w", operationID, err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Record{}, 0, fmt.Errorf("decode operation %s: %w", operationID, err)
	}
	return r, e.Revision(), nil
}

// Set writes rec if the record is still at rev (compare-and-set) and
// returns the new revision.
func (s *Store) Set(ctx context.Context, rec Record, rev uint64) (uint64, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	n, err := s.kv.Update(ctx, rec.OperationID, b, rev)
	if err != nil {
		return 0, fmt.Errorf("record operation %s as %s: %w", rec.OperationID, rec.State, err)
	}
	return n, nil
}
