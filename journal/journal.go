package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/follow"
	"github.com/loopgate/loopgate/internal/wait"
)

// ErrConflict means another writer appended to the run after the sequence
// the append expected: the caller is no longer the run's writer. Reload the
// run and back off; never retry the same append blindly. Errors matching it
// are *ConflictError.
var ErrConflict = errors.New("journal: another writer appended to the run")

// ErrInProcess matches an append the stream refused because a message on
// the run's subjects, or one with the same Nats-Msg-Id, was still being
// proposed after several quick tries, while nothing after the expected
// sequence is stored yet: the publish in process (often this writer's own
// earlier one, whose ack timed out through a failover, which can take
// seconds to commit) decides, and it has not. Neither a conflict nor a
// success: try the same append again later.
var ErrInProcess = errors.New("journal: an append on the run is still in process")

// inProcess reports whether err is a replicated stream's "ask again":
// wrong last sequence with no number (10164, nothing was checked) or a
// duplicate message id in process (10158).
func inProcess(err error) bool {
	return isAPIError(err, jetstream.JSErrCodeStreamWrongLastSequenceConstant, codeDuplicateInProcess)
}

// ConflictError is the error Append and AppendBatch return when the run's last event is
// not the one it expected. It matches ErrConflict.
type ConflictError struct {
	Tenant string
	RunID  string
	// Seq is the run's own seq of the event that was not appended.
	Seq uint64
	// Expected is the stream seq the append expected as the run's last.
	Expected uint64
	// Err is the server's answer: wrong last sequence (10071 on a single
	// server, 10164 on a replicated stream), a duplicate in process (10158),
	// a batch refused for a Nats-Msg-Id already stored (10201, AppendBatch),
	// or a duplicate Nats-Msg-Id whose stored event is another writer's.
	Err error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("journal: append event %d of run %s/%s after stream seq %d: another writer appended first: %v",
		e.Seq, e.Tenant, e.RunID, e.Expected, e.Err)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Unwrap returns the server's answer.
func (e *ConflictError) Unwrap() error { return e.Err }

// DecodeError is a message of StreamEvents that is not a valid event: not
// an event envelope, or an envelope that does not belong on its subject.
type DecodeError struct {
	StreamSeq uint64
	Subject   string
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("journal: %s stream seq %d (%s): %v", StreamEvents, e.StreamSeq, e.Subject, e.Err)
}

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// codeDuplicateInProcess is JetStream's "duplicate message id is in
// process": on a replicated stream, another publish of the same Nats-Msg-Id
// (the same run seq) is being stored right now. nats.go has no constant.
const codeDuplicateInProcess jetstream.ErrorCode = 10158

// Reading a run or a filter uses an ephemeral consumer, in memory, deleted
// when the read ends (watching: internal/follow's ordered ones). The
// inactive threshold only reaps consumers whose reader died.
const (
	readInactive = 10 * time.Second
	readWait     = time.Second // a pull asks for what exists: it waits only if something went wrong
	readRetries  = 5
	readBatch    = 256
	dropTimeout  = 2 * time.Second
)

// Journal appends events to and reads them from StreamEvents, and keeps the
// BucketRuns projection. It is safe for concurrent use.
type Journal struct {
	js     jetstream.JetStream
	events jetstream.Stream
	// atomic is whether StreamEvents allows atomic batch publish, as last
	// seen; AppendBatch asks again while it is false.
	atomic atomic.Bool

	mu   sync.Mutex
	runs jetstream.KeyValue // opened on first PutRun
	// runsBatch: the runs bucket's stream takes atomic batches (PutRuns).
	runsBatch atomic.Bool

	cache *runCache // nil: off
	group *group    // nil: every append on its own (see WithGroupCommit)
}

// Option configures a Journal.
type Option func(*Journal)

// WithRunCache sets the budget, in bytes, of the cache of recently written
// and read runs (DefaultRunCacheBytes unless set); 0 turns it off. The
// cache only saves reads: every Load still asks the stream for the run's
// last event and reads whatever the cache lacks.
func WithRunCache(bytes int) Option {
	return func(j *Journal) {
		j.cache = nil
		if bytes > 0 {
			j.cache = newRunCache(bytes)
		}
	}
}

// New opens the journal on js. StreamEvents must exist (see Ensure).
func New(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Journal, error) {
	st, err := js.Stream(ctx, StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("journal: open stream %s (was Ensure run?): %w", StreamEvents, err)
	}
	j := &Journal{js: js, events: st, cache: newRunCache(DefaultRunCacheBytes)}
	for _, o := range opts {
		o(j)
	}
	if info := st.CachedInfo(); info != nil {
		j.atomic.Store(info.Config.AllowAtomicPublish)
	}
	return j, nil
}

// Append stores evs, in order, as the next events of their run, each only
// if the run's last event is still the one the caller knows: lastStreamSeq
// is the stream seq of the run's last event (0: the run has no events yet),
// as returned by Load or the previous Append. All evs must belong to one
// run. It returns the stream seq of the last event appended, the caller's
// next lastStreamSeq.
//
// Each event is published to its subject with Nats-Msg-Id <run_id>/<seq>
// and an expected last sequence for the run's subject filter, so of two
// writers racing on one run exactly one succeeds; the other gets an error
// matching ErrConflict. A retried Append of events that were stored but
// not acknowledged (a timeout, a lost ack) succeeds without storing them
// twice, as long as the events are identical, byte for byte, to the first
// attempt's (the same EventID and Time). The same run seq with other
// content is a conflict. Neither depends on the stream still remembering
// the Nats-Msg-Id (its window is short, see eventsDuplicateWindow): the
// expected last sequence refuses a stored event published again. The
// Nats-Msg-Id does not name the tenant, so run ids must be unique across
// tenants, as events.RunID makes them: the same run id in two tenants
// within the duplicate window reads as a conflict.
//
// On error the returned seq is that of the last event known to be stored
// (lastStreamSeq if none was). Cancelling ctx abandons the publish in
// flight, whose outcome is then unknown: retry the Append or reload.
func (j *Journal) Append(ctx context.Context, lastStreamSeq uint64, evs ...events.Event) (uint64, error) {
	stored := make([][]byte, len(evs))
	var (
		last uint64
		err  error
	)
	if j.group != nil {
		last, err = j.group.append(ctx, lastStreamSeq, evs, stored, false)
	} else {
		last, err = j.appendEach(ctx, lastStreamSeq, evs, stored)
	}
	j.remember(lastStreamSeq, last, err, evs, stored)
	return last, err
}

// MaxDataBytes is the largest event data the connected server takes in
// one message (its max_payload), less room for the event's envelope and
// its headers. An event whose data is larger is refused whatever happens
// next: a worker must record something smaller instead of trying again.
func (j *Journal) MaxDataBytes() int {
	limit := j.js.Conn().MaxPayload()
	if limit <= 0 {
		limit = defaultMaxPayload // not connected yet: the server default
	}
	return int(limit) - eventOverheadBytes
}

const (
	// defaultMaxPayload is nats-server's max_payload unless configured.
	defaultMaxPayload = 1 << 20
	// eventOverheadBytes bounds what an event adds to its data: the
	// envelope's fields (ids, tenant, type, time, step, call, tool) and the
	// headers of a conditional, deduplicated, possibly batched publish.
	eventOverheadBytes = 4 << 10
)

// remember brings the run cache up to date after an append of evs (stored
// holding their encodings) after stream seq base: on success the run gains
// evs as the stream stored them (the bytes sent, decoded if the run is read
// from the cache, so a cached event equals a read one); on failure the run
// is forgotten.
func (j *Journal) remember(base, last uint64, err error, evs []events.Event, stored [][]byte) {
	if j.cache == nil || len(evs) == 0 {
		return
	}
	key := runKey(evs[0].Tenant, evs[0].RunID)
	if err != nil || slices.ContainsFunc(stored, func(b []byte) bool { return b == nil }) {
		j.cache.forget(key)
		return
	}
	j.cache.extend(key, base, evs, stored, last)
}

// appendEach is Append, one publish per event; it puts each event's
// encoding in stored[i].
func (j *Journal) appendEach(ctx context.Context, lastStreamSeq uint64, evs []events.Event, stored [][]byte) (uint64, error) {
	last := lastStreamSeq
	if len(evs) == 0 {
		return last, nil
	}
	tenant, runID := evs[0].Tenant, evs[0].RunID
	if err := checkRun(tenant, runID); err != nil {
		return last, fmt.Errorf("journal: append: %w", err)
	}
	filter := events.RunFilter(tenant, runID)
	for i := range evs {
		e := &evs[i]
		if e.Tenant != tenant || e.RunID != runID {
			return last, fmt.Errorf("journal: append: event %d is for run %s/%s, not %s/%s: one run per append",
				i, e.Tenant, e.RunID, tenant, runID)
		}
		if !events.ValidToken(string(e.Type)) {
			return last, fmt.Errorf("journal: append: event %d of run %s has type %q, not a subject token", e.Seq, runID, e.Type)
		}
		data, err := e.Encode()
		if err != nil {
			return last, fmt.Errorf("journal: append: encode %s event %d of run %s: %w", e.Type, e.Seq, runID, err)
		}
		stored[i] = data
		msg := &nats.Msg{Subject: e.Subject(), Data: data}
		var ack *jetstream.PubAck
		for try := 1; ; try++ {
			ack, err = j.js.PublishMsg(ctx, msg,
				jetstream.WithMsgID(e.MsgID()),
				jetstream.WithExpectStream(StreamEvents),
				jetstream.WithExpectLastSequenceForSubject(last, filter))
			if try >= inProcessTries || !inProcess(err) {
				break
			}
			if werr := wait.For(ctx, time.Duration(try)*time.Millisecond); werr != nil {
				return last, fmt.Errorf("journal: append %s event %d of run %s/%s: %w (after %w)", e.Type, e.Seq, tenant, runID, werr, err)
			}
		}
		conflict := func(cause error) error {
			return &ConflictError{Tenant: tenant, RunID: runID, Seq: e.Seq, Expected: last, Err: cause}
		}
		switch {
		case err == nil && !ack.Duplicate:
			last = ack.Sequence
		case err == nil:
			// The stream already holds a message with this Nats-Msg-Id
			// (<run_id>/<seq>): our own earlier attempt, or another
			// writer's event with the same run seq. Only the content
			// tells them apart.
			ours, err := j.storedAt(ctx, ack.Sequence, msg)
			if err != nil {
				return last, fmt.Errorf("journal: append: check duplicate %s event %d of run %s: %w", e.Type, e.Seq, runID, err)
			}
			if !ours {
				return last, conflict(fmt.Errorf("stream seq %d holds another event with Nats-Msg-Id %s", ack.Sequence, e.MsgID()))
			}
			last = max(last, ack.Sequence)
		case isConflict(err):
			// A single server checks the expectation before the
			// Nats-Msg-Id, so a retry of an event that was stored (ack
			// lost) lands here. Then our event is the run's next one.
			seq, ours, gerr := j.storedNext(ctx, last, filter, msg)
			if gerr != nil {
				return last, fmt.Errorf("journal: append: check conflict on %s event %d of run %s: %w (after %w)", e.Type, e.Seq, runID, gerr, err)
			}
			if !ours && seq == 0 && inProcess(err) {
				// Judged a conflict, the writer gave the run up
				// (a delivery spent) while its own event was still being
				// stored (worker's TestARunIsReadThroughAFailover with
				// group commit, one run in three).
				return last, fmt.Errorf("journal: append %s event %d of run %s/%s: %w: %w", e.Type, e.Seq, tenant, runID, ErrInProcess, err)
			}
			if !ours {
				return last, conflict(err)
			}
			last = seq
		default:
			return last, fmt.Errorf("journal: append %s event %d of run %s/%s: %w", e.Type, e.Seq, tenant, runID, err)
		}
	}
	return last, nil
}

// inProcessTries bounds the publishes of one event (or batch) that a
// replicated stream refuses because a message on the run's subjects, or
// one with the same Nats-Msg-Id, is still being proposed: 10164 "wrong
// last sequence" (no number: the expectation was not checked) or 10158.
// That is not a conflict yet, only "ask again": it comes from another
// writer's append in flight, whose outcome decides, or from the leader
// still clearing our own previous append after acknowledging it (seen in
// the R3 append benchmark, one publish in tens of thousands). Each retry
// waits try milliseconds; after the last, the answer is treated as a
// conflict and checked against the stream.
const inProcessTries = 4

// isConflict reports whether err is JetStream refusing a publish because of
// its expected last sequence (10071), or, on a replicated stream, because
// a message on the run's subjects or with the same Nats-Msg-Id is still in
// process (10164, 10158) after inProcessTries: then the stream decides
// (see storedNext).
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence,
		jetstream.JSErrCodeStreamWrongLastSequenceConstant,
		codeDuplicateInProcess:
		return true
	}
	return false
}

// storedAt reports whether the message at stream seq is msg.
func (j *Journal) storedAt(ctx context.Context, seq uint64, msg *nats.Msg) (bool, error) {
	m, err := j.events.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return m.Subject == msg.Subject && bytes.Equal(m.Data, msg.Data), nil
}

// storedNext reports whether the first message on filter after stream seq
// after is msg, and its seq.
func (j *Journal) storedNext(ctx context.Context, after uint64, filter string, msg *nats.Msg) (uint64, bool, error) {
	m, err := j.events.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return m.Sequence, m.Subject == msg.Subject && bytes.Equal(m.Data, msg.Data), nil
}

// Load returns every event of a run, in order, and the stream seq of the
// last one (0 and no events for a run that has none), which is what the
// next Append expects. Events appended while Load runs may or may not be
// included. An event that does not decode, or does not belong on its
// subject, is a *DecodeError naming its stream seq.
//
// It asks the stream (its leader) for the run's last event, one request,
// and reads only what the run cache (see WithRunCache) lacks: nothing for
// a run this process wrote last, a message-get per event for a short
// tail, an ordered consumer for a long one.
func (j *Journal) Load(ctx context.Context, tenant, runID string) ([]events.Event, uint64, error) {
	if err := checkRun(tenant, runID); err != nil {
		return nil, 0, fmt.Errorf("journal: load: %w", err)
	}
	key := runKey(tenant, runID)
	evs, last, err := j.load(ctx, key, events.RunFilter(tenant, runID))
	if err != nil {
		j.cache.forget(key)
		return nil, 0, fmt.Errorf("journal: load run %s/%s: %w", tenant, runID, err)
	}
	j.cache.put(key, evs, last)
	return evs, last, nil
}

// Last returns a run's last event, with one message get; ok is false for a
// run with no events. It is what to read of a run whose wake-up may come
// after its end (an approval's expiry): Load would read all of it.
func (j *Journal) Last(ctx context.Context, tenant, runID string) (e events.Event, ok bool, err error) {
	if err := checkRun(tenant, runID); err != nil {
		return events.Event{}, false, fmt.Errorf("journal: last event: %w", err)
	}
	m, err := j.events.GetLastMsgForSubject(ctx, events.RunFilter(tenant, runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.Event{}, false, nil
	}
	if err != nil {
		return events.Event{}, false, fmt.Errorf("journal: last event of run %s/%s: %w", tenant, runID, err)
	}
	e, err = decode(m.Subject, m.Sequence, m.Data)
	if err != nil {
		return events.Event{}, false, fmt.Errorf("journal: last event of run %s/%s: %w", tenant, runID, err)
	}
	return e, true, nil
}

// LastOn reports the stream seq of the last event on filter (a filter as
// Replay takes), with one message get; ok is false when none matches.
func (j *Journal) LastOn(ctx context.Context, filter string) (seq uint64, ok bool, err error) {
	m, err := j.events.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("journal: last event on %s: %w", filter, err)
	}
	return m.Sequence, true, nil
}

// TenantOf returns the tenant whose run runID has started (its started
// event is in the stream), whatever tenant that is, with one message get;
// ok is false when no tenant has such a run. Run ids are derived from the
// tenant, so at most one tenant has a run of an id.
func (j *Journal) TenantOf(ctx context.Context, runID string) (tenant string, ok bool, err error) {
	if !events.ValidToken(runID) {
		return "", false, fmt.Errorf("journal: tenant of run %q: not a valid subject token", runID)
	}
	m, err := j.events.GetLastMsgForSubject(ctx, events.EventSubject("*", runID, events.TypeStarted))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("journal: tenant of run %s: %w", runID, err)
	}
	parts := strings.Split(m.Subject, ".")
	if len(parts) != 5 {
		return "", false, fmt.Errorf("journal: tenant of run %s: started event on %q", runID, m.Subject)
	}
	return parts[2], true, nil
}

// maxTailGets is the most events Load reads with one message-get each;
// beyond it, a consumer costs less.
const maxTailGets = 32

func (j *Journal) load(ctx context.Context, key, filter string) ([]events.Event, uint64, error) {
	lastMsg, err := j.events.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("last message: %w", err)
	}
	lastEv, err := decode(lastMsg.Subject, lastMsg.Sequence, lastMsg.Data)
	if err != nil {
		return nil, 0, err
	}
	have, after, ok := j.cache.get(key)
	if ok && len(have) > 0 {
		cachedSeq := have[len(have)-1].Seq
		if after > lastMsg.Sequence || cachedSeq > lastEv.Seq || (cachedSeq == lastEv.Seq) != (after == lastMsg.Sequence) {
			// The cache is ahead of or beside the stream (the stream
			// recreated, say): read it all.
			ok = false
		}
	}
	if !ok || len(have) == 0 {
		have, after = nil, 0
	}
	if after == lastMsg.Sequence {
		return have, after, nil
	}
	var haveSeq uint64
	if len(have) > 0 {
		haveSeq = have[len(have)-1].Seq
	}
	if lastEv.Seq-haveSeq > maxTailGets {
		// The last event is in hand: read exactly the ones before it, so
		// that nothing looks past them (see readFrom).
		tail, _, err := j.readFrom(ctx, filter, after+1, lastMsg.Sequence-1, int(lastEv.Seq-haveSeq-1))
		if err != nil {
			return nil, 0, err
		}
		return append(append(have, tail...), lastEv), lastMsg.Sequence, nil
	}
	// A short tail: one get per event, the last one already in hand.
	for n := lastEv.Seq - haveSeq - 1; n > 0; n-- {
		m, err := j.events.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(filter))
		if err != nil {
			return nil, 0, fmt.Errorf("read after stream seq %d: %w", after, err)
		}
		if m.Sequence >= lastMsg.Sequence {
			break // fewer events than their seqs say (some aged out): Fold will tell
		}
		e, err := decode(m.Subject, m.Sequence, m.Data)
		if err != nil {
			return nil, 0, err
		}
		have, after = append(have, e), m.Sequence
	}
	return append(have, lastEv), lastMsg.Sequence, nil
}

// Replay returns the events on filter (a subject filter within
// loopgate.events.>, such as events.RunFilter or events.AnyTenantRunFilter)
// that exist now, in stream order, and stops. It returns no events and no
// error when nothing matches. Events appended meanwhile may or may not be
// included.
func (j *Journal) Replay(ctx context.Context, filter string) ([]events.Event, error) {
	return j.ReplayAfter(ctx, filter, 0)
}

// ReplayAfter is Replay of the events stored after stream seq after.
func (j *Journal) ReplayAfter(ctx context.Context, filter string, after uint64) ([]events.Event, error) {
	evs, _, err := j.readNow(ctx, filter, after+1)
	if err != nil {
		return nil, fmt.Errorf("journal: replay %s: %w", filter, err)
	}
	return evs, nil
}

// readNow reads the events on filter from stream seq from up to the last
// one stored now.
func (j *Journal) readNow(ctx context.Context, filter string, from uint64) ([]events.Event, uint64, error) {
	lastMsg, err := j.events.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("last message: %w", err)
	}
	if lastMsg.Sequence < from {
		return nil, 0, nil
	}
	return j.readFrom(ctx, filter, from, lastMsg.Sequence, 0)
}

// readFrom reads the events on filter from stream seq from up to stream
// seq upTo through an ephemeral consumer. It asks for exactly the messages
// it needs: want, or, when want is 0, as many as the filter matched when
// the consumer was made. A pull for more than there are has the server look
// for the rest through every message stored after the run's last one, and
// for a run read long after it ended or parked (an expiry wake-up, an
// audit, an approval hours later) that is the whole stream since: with
// 200,000 events stored after a 37-event run, its read took 45 ms against
// 0.9 ms for a recent one (TestReadingAnOldRunDoesNotScanTheStream).
func (j *Journal) readFrom(ctx context.Context, filter string, from, upTo uint64, want int) ([]events.Event, uint64, error) {
	cfg := jetstream.ConsumerConfig{
		FilterSubject:     filter,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: readInactive,
		Replicas:          1,
		MemoryStorage:     true,
	}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := j.events.CreateConsumer(ctx, cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("read consumer: %w", err)
	}
	defer j.drop(ctx, cons)
	asked := max(want, 0)
	// want <= 0 too: a seq no loopgate wrote (2^64-1 on a run's subject)
	// makes the count Load asks for negative, which make would panic on.
	if pending := int(cons.CachedInfo().NumPending); want <= 0 || want > pending {
		want = pending // fewer than asked: some aged out, or a lagging replica
	}
	out, seq, err := j.readConsumer(ctx, cons, upTo, want)
	if err != nil {
		return nil, 0, err
	}
	return j.topUp(ctx, filter, out, max(seq, from-1), upTo, asked)
}

// topUp completes from the stream's leader a read that ended before upTo
// (asked > 0: before it had asked events). The read's consumer is R1 and
// JetStream puts it on any server holding the stream, and a follower that
// is catching up (seconds after its restart) has fewer of the messages
// than the leader said there were: the read came back short, a worker
// found a gap in a healthy run ("run trail does not fold"), and an audit
// could have shown a trail without its last events. Message gets go to the
// leader, one per event left after stream seq seq, which a complete read
// never needs.
func (j *Journal) topUp(ctx context.Context, filter string, out []events.Event, seq, upTo uint64, asked int) ([]events.Event, uint64, error) {
	for seq < upTo && (asked == 0 || len(out) < asked) {
		m, err := j.events.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read after stream seq %d: %w", seq, err)
		}
		if m.Sequence > upTo {
			break
		}
		e, err := decode(m.Subject, m.Sequence, m.Data)
		if err != nil {
			return nil, 0, err
		}
		out, seq = append(out, e), m.Sequence
	}
	return out, seq, nil
}

// readConsumer reads want events through cons, none past upTo.
func (j *Journal) readConsumer(ctx context.Context, cons jetstream.Consumer, upTo uint64, want int) ([]events.Event, uint64, error) {
	out := make([]events.Event, 0, want)
	var seq uint64
	for tries := 0; len(out) < want; {
		batch, err := cons.Fetch(min(want-len(out), readBatch), jetstream.FetchMaxWait(readWait))
		if err != nil {
			return nil, 0, fmt.Errorf("read after stream seq %d: %w", seq, err)
		}
		got := 0
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return nil, 0, fmt.Errorf("read after stream seq %d: %w", seq, err)
			}
			if md.Sequence.Stream > upTo {
				return out, seq, nil
			}
			e, err := decode(msg.Subject(), md.Sequence.Stream, msg.Data())
			if err != nil {
				return nil, 0, err
			}
			seq, got = md.Sequence.Stream, got+1
			out = append(out, e)
		}
		switch err := batch.Error(); {
		case errors.Is(err, nats.ErrNoResponders) && tries < readRetries:
			// On a cluster the first pull to a just-made consumer is
			// sometimes answered before its interest reached this server
			// (about 1 read in 25 on three nodes): ask again.
			tries++
			if err := wait.For(ctx, time.Duration(tries)*20*time.Millisecond); err != nil {
				return nil, 0, err
			}
		case err != nil:
			return nil, 0, fmt.Errorf("read after stream seq %d: %w", seq, err)
		case got == 0:
			// Nothing came in readWait though the consumer counted more:
			// its server went away, or they aged out since. An error, not
			// a short read: the caller reads again (a run with a gap would
			// not fold, and an audit must not look complete).
			return nil, 0, fmt.Errorf("read after stream seq %d: %d of %d events came", seq, len(out), want)
		}
	}
	return out, seq, nil
}

// Watch yields every event on filter (see Replay), from the first stored
// one, then live ones as they are appended, in stream order. It follows
// until ctx is done, then ends without an error. A message that is not a
// valid event is yielded as a *DecodeError and watching goes on; an error
// making the first consumer is yielded last. Each range over the sequence
// follows through consumers of its own (internal/follow: made again within
// about a second of their server dying, from the event after the last one
// yielded), the last deleted when the range ends; stop early by breaking
// out.
func (j *Journal) Watch(ctx context.Context, filter string) iter.Seq2[events.Event, error] {
	return func(yield func(events.Event, error) bool) {
		watching, cancel := context.WithCancel(ctx)
		type stored struct {
			msg jetstream.Msg
			seq uint64
		}
		msgs := make(chan stored)
		stop, err := follow.Stream(watching, j.js, StreamEvents, []string{filter}, 1, func(m jetstream.Msg, seq uint64) {
			select {
			case msgs <- stored{m, seq}:
			case <-watching.Done():
			}
		})
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				yield(events.Event{}, fmt.Errorf("journal: watch %s: %w", filter, err))
			}
			return
		}
		// The handler may be waiting to hand a message on: cancel first,
		// then stop, which waits for the follower.
		defer func() {
			cancel()
			stop()
		}()
		for {
			select {
			case <-watching.Done():
				return
			case m := <-msgs:
				if !yield(decode(m.msg.Subject(), m.seq, m.msg.Data())) {
					return
				}
			}
		}
	}
}

// drop deletes an ordered consumer once its read is over, rather than
// leaving it to the inactive threshold; it runs even after ctx is done.
func (j *Journal) drop(ctx context.Context, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
	defer cancel()
	_ = j.events.DeleteConsumer(ctx, info.Name) // best effort: the threshold reaps it otherwise
}

// decode reads an event's envelope. Like events.Event.Decode it uses
// encoding/json's semantics on the JSON v2 implementation (go-json-experiment's
// v1 package), about twice as fast: every event read is decoded here.
func decode(subject string, streamSeq uint64, data []byte) (events.Event, error) {
	var e events.Event
	if err := jsonv1.Unmarshal(data, &e); err != nil {
		return events.Event{}, &DecodeError{StreamSeq: streamSeq, Subject: subject, Err: err}
	}
	if e.Subject() != subject {
		return events.Event{}, &DecodeError{StreamSeq: streamSeq, Subject: subject,
			Err: fmt.Errorf("envelope of run %s/%s type %q does not belong on this subject", e.Tenant, e.RunID, e.Type)}
	}
	return e, nil
}

func checkRun(tenant, runID string) error {
	if !events.ValidToken(tenant) {
		return fmt.Errorf("tenant %q is not a valid subject token", tenant)
	}
	if !events.ValidToken(runID) {
		return fmt.Errorf("run id %q is not a valid subject token", runID)
	}
	return nil
}
