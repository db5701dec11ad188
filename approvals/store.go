package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
)

// ErrLost means another decision changed the entry first: the caller lost
// the compare-and-set and must re-read.
var ErrLost = errors.New("approval entry changed concurrently")

// ErrNotFound means the call has no entry.
var ErrNotFound = errors.New("no approval entry")

// Store keeps approval entries in the loopgate_approvals bucket, and lists
// the pending ones in the LOOPGATE_PENDING index.
type Store struct {
	kv jetstream.KeyValue
	// pending is the index of the questions awaiting a human; nil: none
	// (a store that only reads entries).
	pending *Index
}

// Index is the LOOPGATE_PENDING stream: a message on
// loopgate.pending.<tenant>.<run_id>.<call_id> for each question from its
// request to its decision, with a TTL a little past its expiry. Listing
// what awaits a human reads its subjects (one stream info request), not
// every entry ever written. It is an index: the entry stays the truth, and
// a message left behind (its deletion lost) is skipped when listing and
// ages out.
//
// It is a plain stream, not a KV bucket: a bucket refuses message deletes,
// and its deletes leave markers that a listing reads; and a KV watch, how
// keys are listed, waits for as many messages as the stream held when it
// began, which hung when some aged out meanwhile.
type Index struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// OpenIndex opens the index stream.
func OpenIndex(ctx context.Context, js jetstream.JetStream, stream string) (*Index, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return &Index{js: js, stream: st}, nil
}

// NewStore wraps the entries' bucket (loopgate_approvals) and the index of
// pending questions (nil for a store that only reads entries).
func NewStore(entries jetstream.KeyValue, pending *Index) *Store {
	return &Store{kv: entries, pending: pending}
}

// listedGrace keeps a question listed a little past its expiry: the expiry
// itself is decided by the run's wake-up, which takes it out of the index.
const listedGrace = time.Minute

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
	// Listed first: a question is never pending without being listed. A
	// question listed whose entry then failed to be written is skipped
	// when listing, and ages out.
	listed, err := s.list(ctx, e)
	if err != nil {
		return Entry{}, err
	}
	e.ListedSeq = listed
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
	case cur.Round == e.Round && cur.Pending():
		return cur, nil // this request is already recorded, and listed
	case cur.Round == e.Round:
		s.unlist(ctx, e) // already decided: take back what was just listed
		return cur, nil
	case cur.Round > e.Round:
		return Entry{}, fmt.Errorf("approval %s: round %d is behind the stored round %d", key, e.Round, cur.Round)
	}
	if _, err := s.kv.Update(ctx, key, b, rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return Entry{}, fmt.Errorf("request approval %s round %d: %w", key, e.Round, ErrLost)
		}
		// Not a race: JetStream did not take the write (an outage is
		// waited out by the caller, not spent as a lost race).
		return Entry{}, fmt.Errorf("request approval %s round %d: %w", key, e.Round, err)
	}
	return e, nil
}

// list puts a pending question in the index, to age out a little after it
// expires, and returns the message's stream sequence (0: no index, or
// another try listed it at the same moment). The message is empty: the
// entry is the truth.
func (s *Store) list(ctx context.Context, e Entry) (uint64, error) {
	if s.pending == nil {
		return 0, nil
	}
	ttl := max(time.Until(e.ExpiresAt)+listedGrace, time.Second).Round(time.Second)
	subject := events.PendingSubject(e.Tenant, e.RunID, e.CallID)
	seq, stored, err := s.publishListing(ctx, e, subject, ttl, 0)
	if err != nil || stored {
		return seq, err
	}
	return s.relist(ctx, e, subject, ttl)
}

// relist deals with a question whose subject already holds a message:
// this question's own, from a try whose entry write then failed, or an
// earlier round's, whose deletion was lost or whose sequence the entry
// never knew (listed by such a try). It keeps that message if it lasts
// as long as this question does, and else replaces it (one message per
// subject) with one that does: an earlier round's, answered late in its
// time, would age out while this round is still pending, and `loopgate
// pending` would not show it. Either way it returns the message's
// sequence, so the decision deletes it (0: another try of this question
// listed it at the same moment).
func (s *Store) relist(ctx context.Context, e Entry, subject string, ttl time.Duration) (uint64, error) {
	m, err := s.pending.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		seq, _, err := s.publishListing(ctx, e, subject, ttl, 0) // aged out or deleted since
		return seq, err
	}
	if err != nil {
		return 0, fmt.Errorf("list pending approval %s/%s: %w", e.RunID, e.CallID, err)
	}
	if old, perr := time.ParseDuration(m.Header.Get(jetstream.MsgTTLHeader)); perr == nil &&
		!m.Time.Add(old).Before(time.Now().Add(ttl-time.Second)) {
		return m.Sequence, nil
	}
	seq, _, err := s.publishListing(ctx, e, subject, ttl, m.Sequence)
	return seq, err
}

// publishListing stores the question's index message, aging out after
// ttl, if the subject's last message is still the one at sequence after
// (0: none). It returns the message's sequence, and stored false (and no
// error) when the subject had moved on.
func (s *Store) publishListing(ctx context.Context, e Entry, subject string, ttl time.Duration, after uint64) (uint64, bool, error) {
	ack, err := s.pending.js.Publish(ctx, subject, nil,
		jetstream.WithMsgTTL(ttl), jetstream.WithExpectLastSequencePerSubject(after))
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("list pending approval %s/%s: %w", e.RunID, e.CallID, err)
	}
	return ack.Sequence, true, nil
}

// unlist takes a decided question out of the index by deleting its
// message. It is best effort: a message left behind is skipped by Pending
// and ages out with its TTL.
func (s *Store) unlist(ctx context.Context, e Entry) {
	if s.pending != nil && e.ListedSeq != 0 {
		_ = s.pending.stream.DeleteMsg(ctx, e.ListedSeq)
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
		// A revision conflict is 10071 on one server and 10164 on a
		// replicated bucket; nats.go maps both to ErrKeyRevisionMismatch
		// (ErrKeyExists matches only the first).
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("decide approval %s/%s: %w", e.RunID, e.CallID, ErrLost)
		}
		return fmt.Errorf("decide approval %s/%s: %w", e.RunID, e.CallID, err)
	}
	s.unlist(ctx, e)
	return nil
}

// ListUnlisted puts in the index every pending entry that is not there yet,
// and returns how many it listed. It reads every entry: it is for a store
// whose index has never held anything, which is what the upgrade that
// added the index finds (the questions asked before it were never
// listed). Running it again, or in two processes at once, lists nothing
// twice.
func (s *Store) ListUnlisted(ctx context.Context) (int, error) {
	if s.pending == nil {
		return 0, errors.New("list approvals: no index of pending questions")
	}
	info, err := s.pending.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("index of pending approvals: %w", err)
	}
	if info.State.LastSeq != 0 {
		return 0, nil // the index is in use
	}
	lister, err := s.kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list approvals: %w", err)
	}
	defer lister.Stop()
	n := 0
	for key := range lister.Keys() {
		runID, callID, ok := strings.Cut(key, ".")
		if !ok {
			continue
		}
		e, _, err := s.Get(ctx, runID, callID)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return n, err
		}
		if !e.Pending() {
			continue
		}
		// Listed without its sequence in the entry: its decision will not
		// delete it, and the listing skips it once decided until it ages
		// out with the question.
		seq, err := s.list(ctx, e)
		if err != nil {
			return n, err
		}
		if seq != 0 {
			n++
		}
	}
	if n == 0 {
		// Nothing was pending: mark the index as used all the same, with
		// a message that ages out at once, or every start would read
		// every entry again until the next question.
		if _, err := s.pending.js.Publish(ctx, events.PendingSubject(indexMark[0], indexMark[1], indexMark[2]), nil, jetstream.WithMsgTTL(time.Second)); err != nil {
			return 0, fmt.Errorf("mark the index of pending approvals as used: %w", err)
		}
	}
	return n, nil
}

// indexMark is the subject tokens of the message that marks the index as
// used when the one-time listing found nothing to list. No entry has its
// run and call, so a listing that sees it in its second skips it.
var indexMark = [3]string{"loopgate", "index", "listed"}

// Pending lists pending entries, oldest first, of one tenant when tenant is
// not empty:
// the questions in the LOOPGATE_PENDING index, each read back from its
// entry (one whose deletion was lost is skipped). Its cost is what is
// pending, not every question ever asked (BenchmarkPendingListing).
func (s *Store) Pending(ctx context.Context, tenant string) ([]Entry, error) {
	if s.pending == nil {
		return nil, errors.New("list approvals: no index of pending questions")
	}
	prefix := events.PendingPrefix + "."
	filter := prefix + ">"
	if tenant != "" {
		filter = prefix + tenant + ".>"
	}
	info, err := s.pending.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("list pending approvals: %w", err)
	}
	var out []Entry
	for subject := range info.State.Subjects {
		parts := strings.Split(strings.TrimPrefix(subject, prefix), ".")
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
	slices.SortFunc(out, func(a, b Entry) int { return a.RequestedAt.Compare(b.RequestedAt) })
	return out, nil
}
