package journal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/wait"
)

// MaxBatch is the most events one AppendBatch stores: JetStream's default
// limit on an atomic batch (the server configuration's jetstream { limits {
// batch { max_msgs } } } may lower it; a larger batch is then refused with
// error 10199).
const MaxBatch = 1000

// ErrBatchUnsupported means StreamEvents does not have atomic batch publish
// enabled (AllowAtomicPublish, nats-server 2.12+): Ensure has not run
// against this server since loopgate gained AppendBatch, or the server is
// older than 2.12. AppendBatch then refuses rather than publish batch
// headers a stream would store as plain, unconditional messages. Append
// still works.
var ErrBatchUnsupported = errors.New("journal: " + StreamEvents + " does not allow atomic batch publish (needs nats-server 2.12+ and Ensure)")

// ErrBatchRefused means the server refused an atomic batch whole, and kept
// refusing it for batchTries attempts: most often because too many batches
// were open (by default 50 per stream and 1000 per server: the server
// configuration's jetstream { limits { batch { max_inflight_per_stream,
// max_inflight_total } } }), or because a message of it was lost; or it
// refused it once for holding more messages than the server's batch
// max_msgs, which no retry changes. Nothing
// was stored: the run is where it was, and a caller that does not need
// the events stored all-or-nothing can Append them instead.
var ErrBatchRefused = errors.New("journal: atomic batch refused (too many batches open, one lost, or over the server's max_msgs); nothing stored")

// Headers of JetStream's atomic batch publish (nats-server 2.12+). nats.go
// has no API for it.
const (
	hdrBatchID     = "Nats-Batch-Id"       // at most 64 characters, one per batch
	hdrBatchSeq    = "Nats-Batch-Sequence" // 1, 2, ... without gaps
	hdrBatchCommit = "Nats-Batch-Commit"   // "1" on the last message: store it and commit
)

// Error codes of atomic batch publish; nats.go has no constants for them.
const (
	codeBatchDisabled    jetstream.ErrorCode = 10174 // AllowAtomicPublish is off
	codeBatchIncomplete  jetstream.ErrorCode = 10176 // a message of the batch was lost or refused; nothing stored
	codeBatchDuplicateID jetstream.ErrorCode = 10201 // a Nats-Msg-Id of the batch is already in the stream (or twice in the batch)
	codeBatchTooLarge    jetstream.ErrorCode = 10199 // more messages than the server's batch max_msgs
	codeBatchTooManyOpen jetstream.ErrorCode = 10210 // too many batches open on the stream or server
)

// An incomplete batch stored nothing, so AppendBatch publishes it again
// (as a new batch), up to batchTries times in all.
const (
	batchTries   = 3
	batchBackoff = 5 * time.Millisecond
)

// AppendBatch is Append stored all-or-nothing: evs, all of one run and
// with consecutive run seqs, are appended as the run's next events only if
// the run's last event is still the one at stream seq lastStreamSeq, and
// either all of them are stored, contiguously, or none is. It costs one
// round trip to the server. It returns the stream seq of the last event,
// the caller's next lastStreamSeq.
//
// The contract is Append's: of two writers racing on a run exactly one
// wins and the other gets an error matching ErrConflict; retrying the same
// events (byte for byte: the same EventID and Time) after a lost ack or a
// timeout succeeds without storing them twice, even if an earlier Append
// stored only some of them; the same run seq with other content is a
// conflict. Append and AppendBatch chain freely on one run. A single event
// is simply Appended. At most MaxBatch events; more is an error and
// nothing is stored. If StreamEvents does not allow atomic publish the
// error matches ErrBatchUnsupported and nothing is published.
//
// It uses JetStream's atomic batch publish: every event is one message
// with Nats-Msg-Id <run_id>/<seq> and the batch headers; only the first
// carries the expected last sequence for the run's subject filter. The
// server checks it, and every Nats-Msg-Id, when the last message commits
// the batch, against the stream as it was before the batch (so an
// expectation chained on an earlier message of the batch would fail), and
// refuses the whole batch if a Nats-Msg-Id is already stored (10201)
// rather than acknowledging a duplicate. The messages before the commit
// are published without a reply subject, so the server answers only the
// commit.
//
// What it costs depends on the stream. With replicas, the server stages a
// batch in memory and proposes it as one: far cheaper per event than
// Appending the events one by one. On a single server with file storage
// (R1, the embedded default) it stages every batch in a store of its own
// on disk (created, fsynced and removed per batch, whatever the
// sync_interval), which costs several times an Append of the same events:
// use AppendBatch there for atomicity, not speed. See docs/durability.md.
func (j *Journal) AppendBatch(ctx context.Context, lastStreamSeq uint64, evs ...events.Event) (uint64, error) {
	stored := make([][]byte, len(evs))
	var (
		last uint64
		err  error
	)
	if j.group != nil {
		last, err = j.group.append(ctx, lastStreamSeq, evs, stored, true)
	} else {
		last, err = j.appendBatch(ctx, lastStreamSeq, evs, stored)
	}
	j.remember(lastStreamSeq, last, err, evs, stored)
	return last, err
}

// appendBatch is AppendBatch; it puts each event's encoding in stored[i].
func (j *Journal) appendBatch(ctx context.Context, lastStreamSeq uint64, evs []events.Event, stored [][]byte) (uint64, error) {
	last := lastStreamSeq
	switch {
	case len(evs) == 0:
		return last, nil
	case len(evs) == 1:
		return j.appendEach(ctx, last, evs, stored)
	case len(evs) > MaxBatch:
		return last, fmt.Errorf("journal: append batch of run %s/%s: %d events, at most %d", evs[0].Tenant, evs[0].RunID, len(evs), MaxBatch)
	}
	tenant, runID := evs[0].Tenant, evs[0].RunID
	filter := events.RunFilter(tenant, runID)
	msgs, err := batchMessages(last, evs, stored)
	if err != nil {
		return last, err
	}
	if err := j.checkAtomic(ctx); err != nil {
		return last, err
	}

	var seq uint64
	for try := 1; ; try++ {
		seq, err = j.publishBatch(ctx, StreamEvents, msgs)
		// Incomplete means the server stored nothing (a message of the
		// batch was refused before the commit, say too many open batches,
		// and only the commit is answered): a fresh batch may succeed.
		// So does "in process" (see inProcessTries): the batch was
		// refused whole at its first message's expectation.
		if try >= batchTries || !(isAPIError(err, codeBatchIncomplete, codeBatchTooManyOpen) || inProcess(err)) {
			break
		}
		if werr := wait.For(ctx, time.Duration(try)*batchBackoff); werr != nil {
			return last, fmt.Errorf("journal: append batch of %d events of run %s/%s: %w (after %w)", len(evs), tenant, runID, werr, err)
		}
	}
	switch {
	case err == nil:
		return seq, nil
	case isConflict(err) || isAPIError(err, codeBatchDuplicateID):
		// Another writer got there first, or our own earlier attempt did
		// (an ack lost, a timeout): the server checks the Nats-Msg-Ids of a
		// batch before its expectation and refuses the whole batch on a
		// duplicate, so a retry lands here, as does a stale expectation.
		// Only the events stored after lastStreamSeq tell them apart.
		return j.resolveBatch(ctx, last, filter, msgs, evs, stored, err)
	case isAPIError(err, codeBatchIncomplete, codeBatchTooManyOpen, codeBatchTooLarge):
		// Too large: the server's batch max_msgs is below len(evs), and
		// will refuse it however often it is tried; one by one it goes.
		return last, fmt.Errorf("journal: append batch of %d events of run %s/%s: %w: %w", len(evs), tenant, runID, ErrBatchRefused, err)
	case isAPIError(err, codeBatchDisabled):
		j.atomic.Store(false)
		return last, fmt.Errorf("journal: append batch of %d events of run %s/%s: %w: %w", len(evs), tenant, runID, ErrBatchUnsupported, err)
	default:
		return last, fmt.Errorf("journal: append batch of %d events of run %s/%s: %w", len(evs), tenant, runID, err)
	}
}

// batchMessages encodes evs, the next events of one run after stream seq
// last with consecutive run seqs, as the messages of an atomic batch (or
// of a run's share of one): each with its Nats-Msg-Id, and the first with
// the expected last sequence for the run's subject filter, which guards
// the run's whole share. It puts each event's encoding in stored[i].
func batchMessages(last uint64, evs []events.Event, stored [][]byte) ([]*nats.Msg, error) {
	tenant, runID := evs[0].Tenant, evs[0].RunID
	if err := checkRun(tenant, runID); err != nil {
		return nil, fmt.Errorf("journal: append batch: %w", err)
	}
	msgs := make([]*nats.Msg, len(evs))
	for i := range evs {
		e := &evs[i]
		if e.Tenant != tenant || e.RunID != runID {
			return nil, fmt.Errorf("journal: append batch: event %d is for run %s/%s, not %s/%s: one run per batch",
				i, e.Tenant, e.RunID, tenant, runID)
		}
		if i > 0 && e.Seq != evs[0].Seq+uint64(i) {
			return nil, fmt.Errorf("journal: append batch: event %d of run %s has seq %d after seq %d: want consecutive seqs",
				i, runID, e.Seq, evs[i-1].Seq)
		}
		if !events.ValidToken(string(e.Type)) {
			return nil, fmt.Errorf("journal: append batch: event %d of run %s has type %q, not a subject token", e.Seq, runID, e.Type)
		}
		data, err := e.Encode()
		if err != nil {
			return nil, fmt.Errorf("journal: append batch: encode %s event %d of run %s: %w", e.Type, e.Seq, runID, err)
		}
		stored[i] = data
		msgs[i] = &nats.Msg{Subject: e.Subject(), Data: data, Header: nats.Header{
			jetstream.MsgIDHeader:          []string{e.MsgID()},
			jetstream.ExpectedStreamHeader: []string{StreamEvents},
		}}
	}
	msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
	msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, events.RunFilter(tenant, runID))
	return msgs, nil
}

// batchAck is the server's answer to the commit of an atomic batch: a
// PubAck for the batch's last message, naming the batch and its size, or
// an error.
type batchAck struct {
	Stream   string              `json:"stream"`
	Sequence uint64              `json:"seq"`
	BatchID  string              `json:"batch"`
	Count    uint64              `json:"count"`
	Error    *jetstream.APIError `json:"error"`
}

// publishBatch publishes msgs as one new atomic batch to stream (which
// must be the stream that stores their subjects) and returns the stream
// seq of its last message. It sets the batch headers on msgs.
func (j *Journal) publishBatch(ctx context.Context, stream string, msgs []*nats.Msg) (uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, j.js.Options().DefaultTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	id := newBatchID()
	nc := j.js.Conn()
	n := len(msgs)
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		m.Header.Del(hdrBatchCommit)
		m.Reply = ""
		if i == n-1 {
			break
		}
		// No reply subject: the server stages the message silently. A
		// message it refuses makes the commit fail as incomplete.
		if err := nc.PublishMsg(m); err != nil {
			if i > 0 {
				abandonBatch(nc, m.Subject, id, i)
			}
			return 0, fmt.Errorf("publish batch message %d of %d: %w", i+1, n, err)
		}
	}
	commit := msgs[n-1]
	commit.Header.Set(hdrBatchCommit, "1")
	resp, err := nc.RequestMsgWithContext(ctx, commit)
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, jetstream.ErrNoStreamResponse
	}
	if errors.Is(err, nats.ErrMaxPayload) && n > 1 {
		// The client refused the commit itself (over max_payload): it was
		// never sent, and the messages before it are staged. A commit
		// that was sent is never abandoned: it may be committing.
		abandonBatch(nc, commit.Subject, id, n-1)
	}
	if err != nil {
		return 0, fmt.Errorf("commit batch of %d: %w", n, err)
	}
	var ack batchAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("commit batch of %d: %w: %q", n, jetstream.ErrInvalidJSAck, resp.Data)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if ack.Stream != stream || ack.BatchID != id || ack.Count != uint64(n) || ack.Sequence < uint64(n) {
		return 0, fmt.Errorf("commit batch of %d: %w: %s", n, jetstream.ErrInvalidJSAck, resp.Data)
	}
	return ack.Sequence, nil
}

// abandonBatch makes the server drop batch id, of which it has staged sent
// messages, at once: a message that skips a batch sequence is a gap, and a
// gap ends the batch. Left open, a batch refused on the client's side (a
// message over max_payload, say) held one of the stream's open-batch slots
// (50) until the server's batch timeout (10 s), and another writer's batch
// could be refused meanwhile. Best effort: if this cannot be sent either,
// the timeout still ends the batch.
func abandonBatch(nc *nats.Conn, subject, id string, sent int) {
	m := nats.NewMsg(subject)
	m.Header.Set(hdrBatchID, id)
	m.Header.Set(hdrBatchSeq, strconv.Itoa(sent+2))
	_ = nc.PublishMsg(m)
}

// resolveBatch decides a batch the server refused because the run moved
// past lastStreamSeq or a Nats-Msg-Id of the batch is already stored: it
// walks the run's events after lastStreamSeq. If they are ours, byte for
// byte, the batch was stored by an earlier attempt; if only a prefix is
// (stored by an earlier Append), the rest is appended; anything else is
// another writer's, a conflict.
func (j *Journal) resolveBatch(ctx context.Context, lastStreamSeq uint64, filter string, msgs []*nats.Msg, evs []events.Event, stored [][]byte, cause error) (uint64, error) {
	e0 := &evs[0]
	after := lastStreamSeq
	for i, m := range msgs {
		seq, ours, err := j.storedNext(ctx, after, filter, m)
		if err != nil {
			return after, fmt.Errorf("journal: append batch: check conflict on %s event %d of run %s: %w (after %w)",
				evs[i].Type, evs[i].Seq, e0.RunID, err, cause)
		}
		switch {
		case seq == 0 && i == 0 && inProcess(cause):
			// Nothing after lastStreamSeq, and an append in flight on a
			// replicated stream (ours, perhaps): undecided yet.
			return after, fmt.Errorf("journal: append batch of %d events of run %s/%s: %w: %w", len(evs), e0.Tenant, e0.RunID, ErrInProcess, cause)
		case seq == 0 && i == 0:
			// Nothing after lastStreamSeq, yet the server refused: a
			// Nats-Msg-Id of ours names an event that is not this run's
			// next (the same run id in another tenant).
			return after, &ConflictError{Tenant: e0.Tenant, RunID: e0.RunID, Seq: e0.Seq, Expected: lastStreamSeq, Err: cause}
		case seq == 0:
			// A prefix is stored: append the rest after it.
			return j.appendBatch(ctx, after, evs[i:], stored[i:])
		case !ours:
			return after, &ConflictError{Tenant: e0.Tenant, RunID: e0.RunID, Seq: evs[i].Seq, Expected: after,
				Err: fmt.Errorf("stream seq %d holds another event (%w)", seq, cause)}
		}
		after = seq
	}
	return after, nil
}

// checkAtomic returns ErrBatchUnsupported unless StreamEvents allows
// atomic publish. It asks the server again while the answer is no, so a
// journal opened before Ensure enabled it picks the change up.
func (j *Journal) checkAtomic(ctx context.Context) error {
	if j.atomic.Load() {
		return nil
	}
	info, err := j.events.Info(ctx)
	if err != nil {
		return fmt.Errorf("journal: append batch: stream info: %w", err)
	}
	if !info.Config.AllowAtomicPublish {
		return ErrBatchUnsupported
	}
	j.atomic.Store(true)
	return nil
}

// isAPIError reports whether err is a JetStream API error with one of codes.
func isAPIError(err error, codes ...jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	for _, c := range codes {
		if apiErr.ErrorCode == c {
			return true
		}
	}
	return false
}

// newBatchID returns a random batch id: 32 hex characters, within the
// server's limit of 64.
func newBatchID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}
