package journal

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
)

// Streams, buckets and the consumer of the v1 wire contract (see
// docs/DESIGN.md, "JetStream layout").
const (
	// StreamWork holds new tasks (loopgate.tasks.<tenant>) and wake-ups of
	// parked runs (loopgate.resume.<tenant>.<run_id>). Work-queue retention:
	// a message is gone once a worker acks it.
	StreamWork = "LOOPGATE_WORK"
	// StreamEvents is the audit log and the runs' source of truth:
	// loopgate.events.<tenant>.<run_id>.<type>, kept until an operator sets
	// a max age.
	StreamEvents = "LOOPGATE_EVENTS"
	// StreamApprovals keeps approval decisions as published:
	// loopgate.approvals.<tenant>.<run_id>.<call_id>.
	StreamApprovals = "LOOPGATE_APPROVALS"
	// StreamPending lists the questions awaiting a human: one message on
	// loopgate.pending.<tenant>.<run_id>.<call_id> from the question until
	// its decision, which deletes it, or a little past its expiry, when
	// its TTL does. Its subjects are what loopgate pending reads, so a
	// listing costs what is pending, not every question ever asked.
	StreamPending = "LOOPGATE_PENDING"
	// StreamCancels keeps cancel messages as published:
	// loopgate.cancel.<tenant>.<run_id>. A cancel sent while no worker
	// runs waits here for the first that starts.
	StreamCancels = "LOOPGATE_CANCELS"

	// BucketApprovals holds approval state per <run_id>.<call_id>.
	BucketApprovals = "loopgate_approvals"
	// BucketIdempotency holds one entry per <operation_id>. It is created
	// with LimitMarkerTTL, so entries can carry their own TTL.
	BucketIdempotency = "loopgate_idempotency"
	// BucketRuns is the projection of runs for listing, per
	// <tenant>.<run_id>; see Journal.PutRun.
	BucketRuns = "loopgate_runs"
	// BucketSessions holds the conversation memory of sessions per
	// <tenant>.<session_id>: what earlier runs of a session were asked and
	// answered, compacted to a byte budget. It is separate from the runs'
	// work state (the events) by design.
	BucketSessions = "loopgate_sessions"
	// BucketKeys holds each tenant's data key, wrapped by the operator's
	// key-encryption key, per <tenant> (package seal). Purging a tenant's
	// key crypto-shreds every value sealed under it.
	BucketKeys = "loopgate_keys"

	// ConsumerWorkers is the one durable pull consumer on StreamWork that
	// every worker of every process shares: a work-queue stream allows one
	// consumer per subject, and its MaxAckPending caps the whole pool.
	ConsumerWorkers = "loopgate-workers"
	// ConsumerApprovals is the durable pull consumer on StreamApprovals
	// through which workers decide approval messages, each once.
	ConsumerApprovals = "loopgate-approvals"
	// ConsumerCancels is the durable pull consumer on StreamCancels
	// through which workers handle cancel messages, each once.
	ConsumerCancels = "loopgate-cancels"
)

// SchedulesPrefix is where loopgate stores scheduled wake-ups in
// StreamWork: loopgate.schedules.<tenant>.<run_id>.<call_id> holds an
// "@at" schedule that JetStream itself publishes to the run's resume
// subject when an approval expires. No worker waits for it.
const SchedulesPrefix = "loopgate.schedules"

// duplicateWindow is how long the streams remember a Nats-Msg-Id, so a
// retried publish of a task or an event is stored once.
const duplicateWindow = 2 * time.Minute

// eventsDuplicateWindow is how long StreamEvents remembers a Nats-Msg-Id.
// Every append is conditional on the run's last sequence, so a stored
// event published again is refused by that expectation however late
// (a single server checks it before the ids; Append and AppendBatch then
// find the event is theirs): the ids only answer a quick retry, on a
// replicated stream, first. The server keeps every id of the window in
// memory, and its cost grows with their number: at 2m, 64 writers
// appending 45,000 events/s held 2.4 million ids after a minute and each
// append cost 40-90 % more CPU than with a 10 s window, which stays flat
// (docs/benchmarks.md, "Thirteenth round"). Ten seconds covers a client's
// retry after an answer lost to a timeout.
const eventsDuplicateWindow = 10 * time.Second

// markerTTL is how long BucketIdempotency keeps the marker of a key its TTL
// removed. Any positive value enables per-key TTLs.
const markerTTL = time.Minute

// DefaultAckWait is Layout.AckWait's default.
const DefaultAckWait = 30 * time.Second

// Layout sizes what Ensure creates. The zero value is the single-node
// default.
type Layout struct {
	// Replicas of every stream and bucket: 1 for one server, 3 for a
	// cluster. Defaults to 1.
	Replicas int
	// AckWait is how long a worker may hold a work message, on its first
	// delivery, before JetStream redelivers it, unless the worker sends
	// InProgress. Each redelivery doubles the deadline (the consumer's
	// BackOff), up to max(AckWait, 5m). Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one work message; one that exhausts
	// it stays in the stream and is reported by the max-deliveries
	// advisory. Defaults to 5.
	MaxDeliver int
	// MaxAckPending caps the work messages in flight across the pool.
	// Defaults to 1024.
	MaxAckPending int
	// EventsMaxAge ages events out of StreamEvents. Defaults to 0: events
	// are kept forever (the audit log is the product).
	EventsMaxAge time.Duration
	// IdempotencyMaxAge ages an operation's record out of
	// BucketIdempotency this long after its last write. Defaults to
	// DefaultIdempotencyMaxAge. A record is read only while its run can
	// still resume the operation: by the worker that claims it, and by one
	// that resumes the run after a crash between its executing and its
	// executed event, which JetStream redelivers within the consumer's
	// delivery deadlines; so it must outlast all of them (validate), and
	// it keeps a day beyond them for outages and for a human to answer an
	// unknown outcome (an answer after the record is gone still stands:
	// retry runs the tool, as asked). Records are never deleted: KV
	// Create is not atomic across a delete.
	IdempotencyMaxAge time.Duration
}

// DefaultIdempotencyMaxAge is Layout.IdempotencyMaxAge's default: 30 days.
const DefaultIdempotencyMaxAge = 30 * 24 * time.Hour

// idempotencySlack is how much longer than the work consumer's delivery
// deadlines together an idempotency record must live.
const idempotencySlack = 24 * time.Hour

// WithDefaults is the layout with each zero field set to its default, as
// Ensure makes the streams and buckets.
func (l Layout) WithDefaults() Layout {
	l.Replicas = cmp.Or(l.Replicas, 1)
	l.AckWait = cmp.Or(l.AckWait, DefaultAckWait)
	l.MaxDeliver = cmp.Or(l.MaxDeliver, 5)
	l.MaxAckPending = cmp.Or(l.MaxAckPending, 1024)
	l.IdempotencyMaxAge = cmp.Or(l.IdempotencyMaxAge, DefaultIdempotencyMaxAge)
	return l
}

// maxBackOff caps the doubling of the ack deadline across redeliveries.
const maxBackOff = 5 * time.Minute

// backOff is the worker consumer's BackOff: the ack deadline of each
// successive delivery, AckWait doubling, MaxDeliver-1 steps (at least one).
// JetStream takes BackOff[0] as the AckWait.
func (l Layout) backOff() []time.Duration {
	steps := make([]time.Duration, max(l.MaxDeliver-1, 1))
	limit := max(l.AckWait, maxBackOff)
	d := l.AckWait
	for i := range steps {
		steps[i] = d
		d = min(2*d, limit)
	}
	return steps
}

func (l Layout) validate() error {
	switch {
	case l.Replicas < 1 || l.Replicas > 5:
		return fmt.Errorf("journal: Layout.Replicas %d: want 1 to 5", l.Replicas)
	case l.AckWait < 100*time.Millisecond:
		return fmt.Errorf("journal: Layout.AckWait %s: want at least 100ms", l.AckWait)
	case l.MaxDeliver < 1:
		return fmt.Errorf("journal: Layout.MaxDeliver %d: want at least 1", l.MaxDeliver)
	case l.MaxAckPending < 1:
		return fmt.Errorf("journal: Layout.MaxAckPending %d: want at least 1", l.MaxAckPending)
	case l.EventsMaxAge < 0 || (l.EventsMaxAge > 0 && l.EventsMaxAge < time.Minute):
		return fmt.Errorf("journal: Layout.EventsMaxAge %s: want 0 (forever) or at least 1m", l.EventsMaxAge)
	case l.IdempotencyMaxAge < l.MinIdempotencyMaxAge():
		return fmt.Errorf("journal: Layout.IdempotencyMaxAge %s: want at least %s (a day beyond the %d deliveries' deadlines, %s)",
			l.IdempotencyMaxAge, l.MinIdempotencyMaxAge(), l.MaxDeliver, l.deliveriesSpan())
	}
	return nil
}

// deliveriesSpan is the longest a work message can go from its first
// delivery to the end of its last by the consumer's deadlines: the
// delivery n waits BackOff[n-1], the last step for every delivery past
// the list's end.
func (l Layout) deliveriesSpan() time.Duration {
	steps := l.backOff()
	var span time.Duration
	for _, d := range steps {
		span += d
	}
	return span + time.Duration(l.MaxDeliver-len(steps))*steps[len(steps)-1]
}

// MinIdempotencyMaxAge is the least IdempotencyMaxAge the layout takes,
// given its AckWait and MaxDeliver (their defaults where zero).
func (l Layout) MinIdempotencyMaxAge() time.Duration {
	return l.WithDefaults().deliveriesSpan() + idempotencySlack
}

func (l Layout) streams() []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{
			Name:        StreamWork,
			Description: "loopgate tasks and wake-ups of parked runs; one worker takes each",
			Subjects:    []string{events.TasksPrefix + ".*", events.ResumePrefix + ".*.*", SchedulesPrefix + ".*.*.*"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    l.Replicas,
			Duplicates:  duplicateWindow,
			// Expiry of parked runs is a message JetStream publishes at a
			// time, not a timer a worker holds (server 2.12+).
			AllowMsgSchedules: true,
			AllowRollup:       true,
			// A decided question's expiry is cancelled by a message that
			// rolls its schedule up and ages out (server 2.11+); turning
			// it on is an in-place update of an existing stream.
			AllowMsgTTL: true,
		},
		{
			Name:        StreamEvents,
			Description: "loopgate audit log: every transition of every run",
			Subjects:    []string{events.EventsPrefix + ".*.*.*"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    l.Replicas,
			MaxAge:      l.EventsMaxAge,
			// Shorter than the other streams' (whose dedupe is the only
			// guard of a retried publish), and than EventsMaxAge's
			// least, 1m.
			Duplicates: eventsDuplicateWindow,
			// Reads go to the stream leader (the msg-get API), never to a
			// follower that may lag the last append.
			AllowDirect: false,
			// Journal.AppendBatch stores a step's events all-or-nothing
			// with one round trip (and one fsync of the stream) through
			// atomic batch publish (server 2.12+). Turning it on is an
			// in-place update of an existing stream.
			AllowAtomicPublish: true,
		},
		{
			Name:        StreamApprovals,
			Description: "loopgate approval decisions as published",
			Subjects:    []string{events.ApprovalsPrefix + ".*.*.*"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    l.Replicas,
			Duplicates:  duplicateWindow,
		},
		{
			Name:        StreamCancels,
			Description: "loopgate cancel messages as published",
			Subjects:    []string{events.CancelPrefix + ".*.*"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    l.Replicas,
			Duplicates:  duplicateWindow,
		},
		{
			Name:              StreamPending,
			Description:       "loopgate questions awaiting a human, for listing",
			Subjects:          []string{events.PendingPrefix + ".*.*.*"},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          l.Replicas,
			MaxMsgsPerSubject: 1,
			// A question's message ages out a little past its expiry if
			// its decision did not delete it (no marker is left).
			AllowMsgTTL: true,
		},
	}
}

func (l Layout) buckets() []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{
			Bucket:      BucketApprovals,
			Description: "loopgate approval state per <run_id>.<call_id>",
			Storage:     jetstream.FileStorage,
			Replicas:    l.Replicas,
		},
		{
			Bucket:         BucketIdempotency,
			Description:    "loopgate idempotency records per <operation_id>",
			Storage:        jetstream.FileStorage,
			Replicas:       l.Replicas,
			LimitMarkerTTL: markerTTL,
			TTL:            l.IdempotencyMaxAge,
		},
		{
			Bucket:      BucketSessions,
			Description: "loopgate session memory per <tenant>.<session_id>",
			Storage:     jetstream.FileStorage,
			Replicas:    l.Replicas,
		},
		{
			Bucket:      BucketRuns,
			Description: "loopgate runs projection per <tenant>.<run_id>",
			Storage:     jetstream.FileStorage,
			Replicas:    l.Replicas,
		},
		{
			Bucket:      BucketKeys,
			Description: "loopgate tenants' wrapped data keys per <tenant>",
			Storage:     jetstream.FileStorage,
			Replicas:    l.Replicas,
		},
	}
}

func (l Layout) workers() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerWorkers,
		Description:   "the loopgate worker pool",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       l.AckWait,
		MaxDeliver:    l.MaxDeliver,
		BackOff:       l.backOff(),
		MaxAckPending: l.MaxAckPending,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
		// Schedules wait in the stream until JetStream fires them.
		FilterSubjects: []string{events.TasksPrefix + ".*", events.ResumePrefix + ".*.*"},
	}
}

func (l Layout) approvals() jetstream.ConsumerConfig {
	return l.handlers(ConsumerApprovals, "loopgate workers deciding approval messages")
}

func (l Layout) cancels() jetstream.ConsumerConfig {
	return l.handlers(ConsumerCancels, "loopgate workers handling cancel messages")
}

// handlers is a durable pull consumer the workers share to handle the
// messages of a stream one delivery at a time, with the work consumer's
// deadlines and bounds.
func (l Layout) handlers(durable, description string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   description,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       l.AckWait,
		MaxDeliver:    l.MaxDeliver,
		BackOff:       l.backOff(),
		MaxAckPending: l.MaxAckPending,
	}
}

// Ensure creates the streams, buckets and worker consumer of l, or updates
// them to match l. It never lowers the replicas of a stream or bucket that
// has more than l asks for: the one process started without --replicas in
// a cluster's pool would otherwise turn its R3 streams, the audit log
// among them, into R1, and the loss of one server would lose events.
// Lower them by hand if that is meant (nats stream edit). It is idempotent and safe to run from every process at
// startup; concurrent runs converge. Changes JetStream refuses (storage
// type, work-queue retention) fail with an error naming the stream, bucket
// or consumer.
func Ensure(ctx context.Context, js jetstream.JetStream, l Layout) error {
	l = l.WithDefaults()
	if err := l.validate(); err != nil {
		return err
	}
	for _, cfg := range l.streams() {
		if st, err := js.Stream(ctx, cfg.Name); err == nil {
			cfg.Replicas = max(cfg.Replicas, st.CachedInfo().Config.Replicas)
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("journal: ensure stream %s: %w", cfg.Name, err)
		}
	}
	for _, cfg := range l.buckets() {
		if err := ensureBucket(ctx, js, cfg, bucketStreams[cfg.Bucket]); err != nil {
			return fmt.Errorf("journal: ensure bucket %s: %w", cfg.Bucket, err)
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamWork, l.workers()); err != nil {
		return fmt.Errorf("journal: ensure consumer %s on %s: %w", ConsumerWorkers, StreamWork, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamApprovals, l.approvals()); err != nil {
		return fmt.Errorf("journal: ensure consumer %s on %s: %w", ConsumerApprovals, StreamApprovals, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamCancels, l.cancels()); err != nil {
		return fmt.Errorf("journal: ensure consumer %s on %s: %w", ConsumerCancels, StreamCancels, err)
	}
	return nil
}

// bucketStream is what loopgate sets on a bucket's stream beyond what a
// KeyValueConfig can say.
type bucketStream struct {
	// leaderReads: the bucket's reads decide something (which approval a
	// message may decide, whether an operation already ran, what a session
	// remembers), so they go to the stream leader, as the events stream's
	// do. A bucket as nats.go creates it answers reads from any replica
	// (direct gets, a queue group of all of them), and a follower can be
	// behind the last acknowledged write: make soak saw an approval
	// rejected as "already decided" by its own decision, read back stale.
	leaderReads bool
	// atomic: the bucket takes atomic batches. The runs projection is
	// written in bursts (Journal.PutRuns), one batch each.
	atomic bool
}

var bucketStreams = map[string]bucketStream{
	BucketApprovals:   {leaderReads: true},
	BucketIdempotency: {leaderReads: true},
	BucketSessions:    {leaderReads: true},
	BucketRuns:        {atomic: true},
	BucketKeys:        {leaderReads: true},
}

// ensureBucket creates or updates a bucket and sets what want says on its
// stream. A bucket already as wanted is left alone: nats.go's update would
// undo those settings until the second update (turning direct gets back
// on, and a process binding the bucket in between would read from
// followers).
//
// A handle bound while direct gets were on (a process from before this
// setting) keeps asking for them and gets no answer once they are off:
// after the upgrade that turns them off, restart every loopgate process.
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, want bucketStream) error {
	name := "KV_" + cfg.Bucket
	if st, err := js.Stream(ctx, name); err == nil {
		cfg.Replicas = max(cfg.Replicas, st.CachedInfo().Config.Replicas) // never lowered, as Ensure's streams
		if bucketAsWanted(st.CachedInfo().Config, cfg, want) {
			return nil
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
		return err
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	sc := st.CachedInfo().Config
	if sc.AllowDirect == !want.leaderReads && sc.AllowAtomicPublish == want.atomic {
		return nil
	}
	sc.AllowDirect, sc.AllowAtomicPublish = !want.leaderReads, want.atomic
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("set reads from the leader only %v, atomic batches %v: %w", want.leaderReads, want.atomic, err)
	}
	return nil
}

// bucketAsWanted reports whether a bucket's stream has what loopgate
// sets: replicas, storage, description, limit markers, max age, where
// reads go and atomic batches.
func bucketAsWanted(sc jetstream.StreamConfig, cfg jetstream.KeyValueConfig, want bucketStream) bool {
	return sc.Replicas == max(cfg.Replicas, 1) && sc.Storage == cfg.Storage && sc.Description == cfg.Description &&
		sc.SubjectDeleteMarkerTTL == cfg.LimitMarkerTTL && sc.MaxAge == cfg.TTL && sc.AllowDirect == !want.leaderReads &&
		sc.AllowAtomicPublish == want.atomic
}
