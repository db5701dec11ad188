package events

import (
	"fmt"
	"strconv"

	"github.com/google/uuid"
)

// namespace roots every name-based UUID loopgate mints. Changing it would
// change every run and operation id: it is part of the wire contract, and
// the README documents it with the name bytes of RunID and OperationID so
// that clients can derive the same ids.
var namespace = uuid.MustParse("6f1c8a52-3d0e-4b7a-9a51-0c2d6e7f4b10")

// RunID derives a run's id from the tenant and the client's task id: the
// UUID v5 of namespace and the bytes "run", NUL, tenant, NUL, task id. A
// redelivered or republished task finds its run instead of starting a
// second one, and an upstream system can compute the id before publishing.
func RunID(tenant, taskID string) string {
	return uuid.NewSHA1(namespace, []byte("run\x00"+tenant+"\x00"+taskID)).String()
}

// RejectedRunID names the run a malformed task is rejected under when the
// task carries no usable task_id. It is derived from the work-stream
// sequence, so a redelivery of the same message lands on the same id.
func RejectedRunID(tenant string, streamSeq uint64) string {
	return uuid.NewSHA1(namespace, []byte("rejected\x00"+tenant+"\x00"+strconv.FormatUint(streamSeq, 10))).String()
}

// CallID names the index-th call (1-based) of the decision at step. It is
// minted by loopgate, never taken from the model, and is one subject token.
func CallID(step, index int) string { return fmt.Sprintf("s%dc%d", step, index) }

// OperationID derives the idempotency key of one call of one run. It is
// stable across retries, redeliveries and restarts, and is never chosen by
// the model nor derived from the date.
func OperationID(runID, callID string) string {
	return uuid.NewSHA1(namespace, []byte("op\x00"+runID+"\x00"+callID)).String()
}

// FencedOperationID is the operation id of a call's next attempt once
// fences reconcile checks have fenced the call's earlier ids (reconciled
// events with fenced set): OperationID's for 0, else OperationID's
// followed by "-f" and fences. A fenced id never takes effect in the
// backend, so the attempt after it needs an id of its own; every worker
// derives the same one from the call's events.
func FencedOperationID(runID, callID string, fences int) string {
	if fences <= 0 {
		return OperationID(runID, callID)
	}
	return OperationID(runID, callID) + "-f" + strconv.Itoa(fences)
}

// IDSource mints event ids. Implementations must be safe for concurrent use.
type IDSource interface {
	NewEventID() string
}

// IDFunc adapts a function to IDSource.
type IDFunc func() string

// NewEventID calls f.
func (f IDFunc) NewEventID() string { return f() }

// UUIDv7 is the production IDSource: time-ordered UUID v7 ids.
var UUIDv7 IDSource = IDFunc(func() string { return uuid.Must(uuid.NewV7()).String() })
