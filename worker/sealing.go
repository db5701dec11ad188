package worker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/seal"
	"github.com/loopgate/loopgate/tools"
)

// Sealer keeps the real arguments of calls whose stored arguments were
// redacted, encrypted per tenant (package seal's Keyring). Implementations
// are safe for concurrent use.
type Sealer interface {
	// Seal encrypts plaintext for tenant, bound to aad.
	Seal(ctx context.Context, tenant string, plaintext, aad []byte) (*events.Sealed, error)
	// Open decrypts s for tenant and aad. An error matching
	// seal.ErrShredded means the value is gone for good; any other error
	// may pass (the key bucket unreachable) or needs an operator (a
	// worker with another key-encryption key).
	Open(ctx context.Context, tenant string, s *events.Sealed, aad []byte) ([]byte, error)
}

// sealStored returns stored, the redacted encoding of e, with the real
// arguments of each redacted call of e sealed beside it: the calls of a
// proposed event, the canonical arguments of an ok validated one. Any
// other event, or a pool without a Sealer, is returned as it is. The
// redactor never reads what is sealed: its boxes are added after it ran.
func (r *run) sealStored(ctx context.Context, e *events.Event, stored json.RawMessage) (json.RawMessage, error) {
	if r.p.sealer == nil {
		return stored, nil
	}
	redacted := events.Event{Type: e.Type, Seq: e.Seq, RunID: e.RunID, Data: stored}
	switch e.Type {
	case events.TypeProposed:
		var real, out events.ProposedData
		if err := e.Decode(&real); err != nil {
			return nil, err
		}
		if real.Decision == nil {
			return stored, nil
		}
		if err := redacted.Decode(&out); err != nil {
			return nil, err
		}
		if out.Decision == nil || len(out.Decision.ToolCalls) != len(real.Decision.ToolCalls) {
			return nil, fmt.Errorf("seal proposed event %d of run %s: its redacted copy has other calls", e.Seq, e.RunID)
		}
		sealed := false
		for i, c := range real.Decision.ToolCalls {
			if !c.Redacted {
				continue
			}
			s, err := r.p.sealer.Seal(ctx, r.task.Tenant, c.Args, events.SealAAD(e.RunID, c.ID, e.Type))
			if err != nil {
				return nil, fmt.Errorf("seal the arguments of call %s of run %s: %w", c.ID, e.RunID, err)
			}
			out.Decision.ToolCalls[i].Sealed, sealed = s, true
		}
		if !sealed {
			return stored, nil
		}
		return events.EncodeData(out)
	case events.TypeValidated:
		var real, out events.ValidatedData
		if err := e.Decode(&real); err != nil {
			return nil, err
		}
		if !real.Redacted || real.Status != events.ValidOK {
			return stored, nil
		}
		if err := redacted.Decode(&out); err != nil {
			return nil, err
		}
		s, err := r.p.sealer.Seal(ctx, r.task.Tenant, real.Args, events.SealAAD(e.RunID, e.CallID, e.Type))
		if err != nil {
			return nil, fmt.Errorf("seal the arguments of call %s of run %s: %w", e.CallID, e.RunID, err)
		}
		out.Sealed = s
		return events.EncodeData(out)
	}
	return stored, nil
}

// sealedBytes bounds what sealing adds to data's proposed event: a sealed
// box per redacted call, its arguments' size in base64 plus the cipher's
// tag, nonce and key id. 0 for a pool without a Sealer.
func (r *run) sealedBytes(data *events.ProposedData) int {
	if r.p.sealer == nil || data.Decision == nil {
		return 0
	}
	n := 0
	for _, c := range data.Decision.ToolCalls {
		if c.Redacted {
			n += sealedSize(len(c.Args))
		}
	}
	return n
}

// sealedSize bounds the encoding of a sealed value of n bytes as an
// event's "sealed" member: the box (n bytes and a 16-byte tag) and a
// 12-byte nonce in base64, a key id, and the names around them.
func sealedSize(n int) int {
	return base64.StdEncoding.EncodedLen(n+16) + base64.StdEncoding.EncodedLen(12) + 96
}

// openSealed gives the current decision's calls whose arguments this
// worker does not know in full their real arguments back, from their
// sealed copies: the validated arguments where the call was validated
// (checked against its args_hash), else the proposed ones. A call whose
// tenant key was shredded stays as stored and is marked so (shredded);
// it cannot run. Any other failure to open is returned: the run waits
// for a worker that can open it rather than lose an approved action.
func (r *run) openSealed(ctx context.Context) error {
	if r.p.sealer == nil {
		return nil
	}
	for _, c := range r.st.CurrentCalls {
		id := c.Call.ID
		if r.fresh[id] || r.shredded[id] {
			continue
		}
		var (
			s   *events.Sealed
			typ events.Type
		)
		switch {
		case c.Validated != nil && c.Validated.Sealed != nil:
			s, typ = c.Validated.Sealed, events.TypeValidated
		case c.Validated == nil && c.Call.Sealed != nil:
			s, typ = c.Call.Sealed, events.TypeProposed
		default:
			continue
		}
		plain, err := r.p.sealer.Open(ctx, r.task.Tenant, s, events.SealAAD(r.st.RunID, id, typ))
		if errors.Is(err, seal.ErrShredded) {
			if r.shredded == nil {
				r.shredded = map[string]bool{}
			}
			r.shredded[id] = true
			r.log.WarnContext(ctx, "the tenant's data key was deleted: a call's sealed arguments cannot be opened", "call_id", id, "tool", c.Call.Tool)
			continue
		}
		if err != nil {
			return fmt.Errorf("open the sealed arguments of call %s of run %s: %w", id, r.st.RunID, err)
		}
		if typ == events.TypeValidated {
			if _, hash, err := tools.CanonicalHash(plain); err != nil || hash != c.Validated.ArgsHash {
				return fmt.Errorf("the sealed arguments of call %s of run %s do not hash to its args_hash %s", id, r.st.RunID, c.Validated.ArgsHash)
			}
			c.Validated.Args = json.RawMessage(plain)
		} else {
			c.Call.Args = json.RawMessage(plain)
		}
		r.know(id)
	}
	return nil
}

// lostArgs says why call id's arguments cannot be had: its tenant's data
// key was shredded, or they were never kept.
func (r *run) lostArgs(id string) string {
	if r.shredded[id] {
		return "the arguments held sensitive values, sealed under the tenant's data key, and that key was deleted (crypto-shredded): they can never be opened again"
	}
	return "the arguments held sensitive values, which loopgate never stores in clear, and no sealed copy can be opened (no seal key is configured); the worker that knew them is gone"
}
