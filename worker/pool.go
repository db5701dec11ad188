package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaptinlin/jsonschema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/idempotency"
	"github.com/loopgate/loopgate/internal/wait"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/redact"
	"github.com/loopgate/loopgate/schemas"
	"github.com/loopgate/loopgate/sessions"
	"github.com/loopgate/loopgate/tools"
)

// Config tunes a Pool. The zero value is useful.
type Config struct {
	// Workers is how many runs the pool works on at once. Defaults to 4.
	Workers int
	// Logger receives operational logs, including the full text of
	// unexpected tool errors (which never reach the audit stream or the
	// model). Defaults to slog.Default().
	Logger *slog.Logger
	// Clock is the time source. Defaults to time.Now.
	Clock func() time.Time
	// IDs mints event ids. Defaults to events.UUIDv7.
	IDs events.IDSource
	// Heartbeat is how often a worker tells JetStream it still holds a
	// message (InProgress), so AckWait never redelivers a live run.
	// Defaults to 5s, and is cut to a third of the consumer's AckWait
	// when that is shorter.
	Heartbeat time.Duration
	// TransientBackoff is the wait before the one retry of a transient
	// tool failure. Defaults to 250ms.
	TransientBackoff time.Duration
	// RetryDelay is the redelivery delay after an infrastructure error.
	// Defaults to 2s.
	RetryDelay time.Duration
	// ProjectionAckWait bounds how long a settled message waits for its
	// run's record in loopgate_runs before it is handed back (to come
	// back that long later) rather than acknowledged with the record
	// only in this process. Defaults to 30s.
	ProjectionAckWait time.Duration
	// BatchEvents appends the events of a step in one atomic batch (one
	// round trip, one Raft proposal) wherever the write-ahead rule allows.
	// It pays on replicated streams; on a single server each batch costs
	// more than its events appended one by one (docs/durability.md).
	// Defaults to false.
	BatchEvents bool
	// StageEvents stages a step's events as BatchEvents does but makes them
	// durable with one Append, in order and not all-or-nothing (every
	// prefix of a step's events is a state a run resumes from). With a
	// journal's group commit (journal.WithGroupCommit) the step then rides
	// in one share of a batch under load, and is appended event by event,
	// an fsync each, when nothing else waits: on a single server that is
	// cheaper than an atomic batch of its own. BatchEvents wins if both are
	// set. Defaults to false.
	StageEvents bool
	// Summarizer compacts session memory past its budget. Defaults to
	// sessions.Clip (no model: the first words of each exchange).
	Summarizer sessions.Summarizer
	// Metrics is told what the pool does (see Metrics). Defaults to none.
	Metrics Metrics
	// Crash is the fault-injection hook: called at each named point of a
	// run (before:<event type>, after:<event type>, before:load,
	// before:claim, before:side_effect, after:side_effect,
	// after:idempotency_record, before:decision, after:approved). Tests
	// and the soak make it kill the process; nil, the default, does
	// nothing.
	Crash func(point string)
}

func (c *Config) setDefaults() {
	c.Workers = cmp.Or(c.Workers, 4)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.IDs == nil {
		c.IDs = events.UUIDv7
	}
	c.Heartbeat = cmp.Or(c.Heartbeat, 5*time.Second)
	if c.Summarizer == nil {
		c.Summarizer = sessions.Clip
	}
	c.TransientBackoff = cmp.Or(c.TransientBackoff, 250*time.Millisecond)
	c.RetryDelay = cmp.Or(c.RetryDelay, 2*time.Second)
	c.ProjectionAckWait = cmp.Or(c.ProjectionAckWait, 30*time.Second)
}

func (c *Config) validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("worker config: Workers must be at least 1, got %d", c.Workers)
	case c.Heartbeat < 0, c.TransientBackoff < 0, c.RetryDelay < 0:
		return errors.New("worker config: durations must not be negative")
	}
	return nil
}

// Deps are the parts a Pool works with.
type Deps struct {
	// JS is the JetStream context; the layout must exist (journal.Ensure).
	JS jetstream.JetStream
	// Journal stores and loads events.
	Journal *journal.Journal
	// App is the loaded configuration: profiles, policy, intake bounds.
	App *config.Config
	// Registry holds the tools the profiles name.
	Registry *tools.Registry
	// Models by agent profile name. Nil: built from App's profiles with
	// model.Build, which knows only the scripted provider; a process that
	// runs real models builds them with providers.Build and passes them here.
	Models map[string]model.Model
	// Sealer seals the real arguments of every call whose stored
	// arguments the redactor changed, so any worker can run the call
	// (package seal's Keyring). Nil: they are not kept, and a call whose
	// worker is gone before it runs ends args_lost.
	Sealer Sealer
}

// Pool is a set of identical workers sharing the loopgate-workers consumer.
type Pool struct {
	js          jetstream.JetStream
	journal     *journal.Journal
	app         *config.Config
	registry    *tools.Registry
	models      map[string]model.Model
	opts        Config
	log         *slog.Logger
	ids         events.IDSource
	now         func() time.Time
	taskSchema  *jsonschema.Schema
	approvalSch *jsonschema.Schema
	decisions   *decisionParser
	redactor    *redact.Redactor
	sealer      Sealer

	approvals *approvals.Store
	// approvalMsgs is LOOPGATE_APPROVALS, where approvers' messages are
	// read back (lastApprovalSeq).
	approvalMsgs jetstream.Stream
	idem         *idempotency.Store
	sessions     *sessions.Store
	maxDeliver   int
	// ackWait is the workers consumer's AckWait: how long a run another
	// worker drives is left to it (yieldTo), the time in which JetStream
	// would hand that worker's message to another had it died.
	ackWait    time.Duration
	advisories interface{ Unsubscribe() error }
	// refusedWarned is when the pool last warned that the server refused
	// its atomic batches (unix nanoseconds): at most once a minute.
	refusedWarned atomic.Int64
	// fetching reports the workers' failed pulls of work, once for all.
	fetching *troubleLog
	// recovery tells the messages held through an outage that one of
	// them got through.
	recovery recovery
	// halts cancels the tool calls in flight here of a run cancelled here.
	halts halts
	// holding counts the writes and messages held through an outage now
	// (hold): while any is, the pool is not Ready.
	holding atomic.Int64

	mu           sync.Mutex
	started      bool
	stopped      bool
	approvalIter jetstream.ConsumeContext
	// stopTaking ends the workers' pulls of work messages (Stop).
	stopTaking context.CancelFunc
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	projection *projector
	// acks are the acknowledgements waiting for the projection updates of
	// their messages (ackAfterProjection); Stop waits for them after wg.
	acks sync.WaitGroup
	// continuing holds a token for each run going on right after its
	// decision (continueRun): at most Workers at once.
	continuing chan struct{}
}

// New makes a pool. It does not consume until Start.
func New(d Deps, cfg *Config) (*Pool, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.setDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if d.JS == nil || d.Journal == nil || d.App == nil || d.Registry == nil {
		return nil, errors.New("worker: JS, Journal, App and Registry are required")
	}
	taskSchema, err := schemas.Compile("task.schema.json")
	if err != nil {
		return nil, fmt.Errorf("worker: compile task schema: %w", err)
	}
	approvalSch, err := schemas.Compile("approval.schema.json")
	if err != nil {
		return nil, fmt.Errorf("worker: compile approval schema: %w", err)
	}
	decisions, err := newDecisionParser()
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	models := d.Models
	if models == nil {
		models = map[string]model.Model{}
		for name, p := range d.App.Agents {
			m, err := model.Build(p.Model, d.App.ReadFile)
			if err != nil {
				return nil, fmt.Errorf("worker: agent %q: %w", name, err)
			}
			models[name] = m
		}
	}
	var patterns []redact.Pattern
	if d.App.Redaction.Patterns != nil {
		patterns = []redact.Pattern{}
		for _, p := range d.App.Redaction.Patterns {
			patterns = append(patterns, redact.Pattern(p))
		}
	}
	redactor, err := redact.NewFromConfig(&redact.Config{Keys: d.App.Redaction.Keys, Patterns: patterns, PhoneRegions: d.App.Redaction.PhoneRegions})
	if err != nil {
		return nil, fmt.Errorf("worker: redaction.patterns or redaction.phone_regions: %w", err)
	}
	return &Pool{
		redactor:    redactor,
		sealer:      d.Sealer,
		js:          d.JS,
		journal:     d.Journal,
		app:         d.App,
		registry:    d.Registry,
		models:      models,
		opts:        c,
		log:         c.Logger,
		ids:         c.IDs,
		now:         c.Clock,
		taskSchema:  taskSchema,
		approvalSch: approvalSch,
		decisions:   decisions,
		continuing:  make(chan struct{}, c.Workers),
		fetching:    newTroubleLog("fetch work", c.Logger, c.Clock),
	}, nil
}

// Start begins consuming with Workers concurrent workers. Runs are worked on
// under a context of their own, cancelled by Stop, not by ctx; ctx bounds
// only the start itself.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("worker: pool already started")
	}
	akv, err := p.js.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		return fmt.Errorf("worker: bucket %s: %w", journal.BucketApprovals, err)
	}
	ikv, err := p.js.KeyValue(ctx, journal.BucketIdempotency)
	if err != nil {
		return fmt.Errorf("worker: bucket %s: %w", journal.BucketIdempotency, err)
	}
	index, err := approvals.OpenIndex(ctx, p.js, journal.StreamPending)
	if err != nil {
		return fmt.Errorf("worker: stream %s: %w", journal.StreamPending, err)
	}
	p.approvals, p.idem = approvals.NewStore(akv, index), idempotency.NewStore(ikv)
	if p.approvalMsgs, err = p.js.Stream(ctx, journal.StreamApprovals); err != nil {
		return fmt.Errorf("worker: stream %s: %w", journal.StreamApprovals, err)
	}
	skv, err := p.js.KeyValue(ctx, journal.BucketSessions)
	if err != nil {
		return fmt.Errorf("worker: bucket %s: %w", journal.BucketSessions, err)
	}
	p.sessions = sessions.NewStore(skv)
	feed := p.newApprovalFeed(context.WithoutCancel(ctx), p.opts.Workers)
	aiter, approvalsAckWait, err := p.openApprovals(ctx, feed)
	if err != nil {
		return err
	}
	ccons, err := p.openCancels(ctx)
	if err != nil {
		aiter.Stop() // Start may be tried again
		return err
	}
	cons, err := p.js.Consumer(ctx, journal.StreamWork, journal.ConsumerWorkers)
	if err != nil {
		aiter.Stop() // Start may be tried again
		return fmt.Errorf("worker: consumer %s on %s: %w", journal.ConsumerWorkers, journal.StreamWork, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.maxDeliver = cons.CachedInfo().Config.MaxDeliver
	p.ackWait = cons.CachedInfo().Config.AckWait
	if aw := cons.CachedInfo().Config.AckWait; aw > 0 && p.opts.Heartbeat > aw/3 {
		// Beat well inside the consumer's AckWait, whatever was asked: a
		// step longer than AckWait would otherwise go to a second worker
		// while the first still works on it (make soak, --ack-wait 2s).
		p.opts.Heartbeat = aw / 3
	}
	advisories, err := p.watchMaxDeliveries(runCtx)
	if err != nil {
		cancel()
		aiter.Stop()
		return err
	}
	haltSub, err := p.watchHalts(runCtx)
	if err != nil {
		cancel()
		aiter.Stop()
		_ = advisories.Unsubscribe()
		return err
	}
	p.advisories = unsubscribeAll{advisories, haltSub}
	taking, stopTaking := context.WithCancel(runCtx)
	p.approvalIter, p.stopTaking, p.cancel, p.started = aiter, stopTaking, cancel, true
	p.projection = newProjector(p.journal.PutRuns, p.log)
	go p.projection.run(runCtx)
	// Work messages that ran out of deliveries while no pool listened for
	// their advisory (see sweepStranded): until the pool stops taking work.
	go p.sweepStranded(taking, cons)
	for range p.opts.Workers {
		p.wg.Go(func() { p.consume(runCtx, taking, cons) })
	}
	// Approval messages are decided in as many lanes as there are workers,
	// each run's in order in its lane (see consumeApprovals).
	p.wg.Go(func() { p.consumeApprovals(runCtx, taking, feed, aiter, approvalsAckWait) })
	// Cancel messages, one at a time (see consumeCancels).
	p.wg.Go(func() { p.consumeCancels(runCtx, taking, ccons) })
	p.wg.Go(func() { p.listUnlisted(runCtx) })
	p.log.InfoContext(ctx, "workers started", "workers", p.opts.Workers)
	return nil
}

// listUnlisted lists, after the upgrade that added the index of pending
// questions, the questions asked before it, or loopgate pending would not
// show them. It reads every entry, so it does not hold up the start; once
// the index has held anything it is one stream info request.
func (p *Pool) listUnlisted(ctx context.Context) {
	n, err := p.approvals.ListUnlisted(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		p.log.WarnContext(ctx, "list the questions asked before the index of pending questions existed", "err", err)
	case n > 0:
		p.log.InfoContext(ctx, "listed the questions asked before the index of pending questions existed", "questions", n)
	}
}

// Stop stops taking messages, lets runs in progress finish until ctx is
// done, then cancels them (their messages are nakked for another worker).
// It is idempotent and safe to call without Start.
func (p *Pool) Stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.started || p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	approvalIter := p.approvalIter // the one open now: consumeApprovals opens no other once stopped is set
	p.mu.Unlock()
	_ = p.advisories.Unsubscribe()
	p.stopTaking()
	approvalIter.Drain()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		p.projection.close(ctx) // the runs' last updates
		p.acks.Wait()           // the acknowledgements that waited for them
		p.cancel()
		return nil
	case <-ctx.Done():
		p.cancel()
		<-done
		p.projection.close(ctx)
		p.acks.Wait()
		return ctx.Err()
	}
}

// pullExpiry bounds each pull request a worker keeps open, and
// pullHeartbeat is how often the server says an open pull is alive. When
// the server holding a pending pull dies (a consumer's leader on a lost
// node) nothing tells the client: nats.go notices only when two heartbeats
// are missing, and then pulls again. With the defaults (30s expiry, 15s
// heartbeat) a pool sat idle for 30-35s after a cluster node died (make
// soak); with these it notices in 2s, and pulls again every 2s until the
// consumer has a new leader.
const (
	pullExpiry    = 5 * time.Second
	pullHeartbeat = time.Second
)

func (p *Pool) crash(point string) {
	if p.opts.Crash != nil {
		p.opts.Crash(point)
	}
}

func (p *Pool) stopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// consume is one worker: it pulls a work message only when it is free to
// work on it, and works on it, until taking is done (Stop).
//
// Each worker pulls for itself, one message at a time, rather than the
// pool keeping a buffer filled ahead (jetstream's Messages): a buffered
// message is delivered to nobody who works on it. When the pool stops,
// or its process dies, each buffered message has spent one of its
// MaxDeliver deliveries, and after a kill waits out AckWait while other
// workers sit idle; a few restarts while the queue is backed up would
// stop a healthy task as a poison message before any worker started it
// (TestAPoolTakesNoMoreWorkThanItsWorkersCanDo). A pull costs a request
// per message, against the 36 writes of a run.
func (p *Pool) consume(ctx, taking context.Context, cons jetstream.Consumer) {
	for taking.Err() == nil {
		msg, err := p.take(taking, cons)
		switch {
		case taking.Err() != nil:
			if msg != nil {
				// Came as the pool stopped: leave it for another worker.
				_ = msg.NakWithDelay(time.Second)
			}
			return
		case errors.Is(err, nats.ErrTimeout):
			// The server ended the pull with nothing to take: it answers,
			// so an idle pool, too, says when a trouble is over.
			p.fetching.ok(ctx)
			continue
		case errors.Is(err, context.DeadlineExceeded):
			continue // no answer in pullExpiry: pull again
		case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed):
			return
		case err != nil:
			// The server holding the pull went away (no heartbeat), or
			// the consumer has no leader yet: pull again shortly. Every
			// worker meets it at once: the pool warns once for all.
			p.fetching.failed(ctx, err)
			_ = wait.For(taking, p.opts.RetryDelay)
			continue
		}
		p.fetching.ok(ctx)
		p.handle(ctx, msg)
	}
}

// take pulls one work message, waiting at most pullExpiry for one.
func (p *Pool) take(taking context.Context, cons jetstream.Consumer) (jetstream.Msg, error) {
	ctx, cancel := context.WithTimeout(taking, pullExpiry)
	defer cancel()
	return cons.Next(jetstream.FetchContext(ctx), jetstream.FetchHeartbeat(pullHeartbeat))
}

// handle works on one message and settles it. It never panics out: a
// panic is logged and the message retried, never lost.
func (p *Pool) handle(ctx context.Context, msg jetstream.Msg) {
	p.redelivery(msg)
	ctx, waits := withProjectionWaits(ctx)
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	defer stopHeartbeat()
	go p.heartbeat(hbCtx, msg)

	o, reason := p.processSafely(ctx, msg)
	// JetStream could not take one of the run's writes or read the run
	// (its store is full, its cluster has no leader): not the run's doing.
	// Handing the message back would spend a delivery per try and stop a
	// healthy run as a poison message within seconds (a stop that could
	// not be recorded either). Keep it, heartbeat and all, and try again
	// from the run's events.
	o, reason = p.waitOutOutage(ctx, "the run", msg.Subject(), o, reason, func() (outcome, string) {
		return p.processSafely(ctx, msg)
	})
	if o == retry && p.lastDelivery(msg) {
		// The message will not come back: stop its run with the cause
		// rather than leave it to rot in the stream. The stop is the last
		// thing the message can record, so it is held through an outage
		// as the run's writes are.
		cause := reason
		giveUp := func() (outcome, string) { return p.giveUp(ctx, msg, cause) }
		o, reason = giveUp()
		o, reason = p.waitOutOutage(ctx, "the stop of a poisoned run", msg.Subject(), o, reason, giveUp)
	}
	stopHeartbeat()
	if o == stopping && p.handOver(ctx, msg) {
		return
	}
	if o == settled && !waits.none() {
		p.ackAfterProjection(ctx, msg, waits)
		return
	}
	if err := settle(msg, o, reason, p.opts.RetryDelay); err != nil {
		p.log.WarnContext(ctx, "settle work message", "subject", msg.Subject(), "outcome", o.String(), "err", err)
	}
}

// handOver hands the run of msg, which this worker stopped working on
// because its pool is stopping, to the queue as a wake-up of its own, and
// acknowledges msg. Nakked, msg would spend a delivery on every stop: a
// step longer than the drain, caught by a few rolling restarts, would
// stop a healthy run as a poison message. A task whose run has not
// started is not handed over (a wake-up would find no run): it reports
// false, as when the wake-up cannot be published, and msg is nakked.
func (p *Pool) handOver(ctx context.Context, msg jetstream.Msg) bool {
	kind, tenant, runID, err := events.ParseWorkSubject(msg.Subject())
	meta, merr := msg.Metadata()
	if err != nil || merr != nil {
		return false
	}
	// The pool's context is done: hand over with one of its own.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handOverTimeout)
	defer cancel()
	if kind == "tasks" {
		id := firstTaskID(msg.Data())
		if id == "" {
			return false
		}
		runID = events.RunID(tenant, id)
		if _, started, err := p.journal.Last(hctx, tenant, runID); err != nil || !started {
			return false
		}
	}
	// One wake-up per delivery handed over, however often its publish is
	// tried.
	if err := p.wake(hctx, tenant, runID, fmt.Sprintf("handover/%s/%d/%d", runID, meta.Sequence.Stream, meta.NumDelivered)); err != nil {
		p.log.WarnContext(ctx, "run not handed to the queue; its message is handed back", "run_id", runID, "err", err)
		return false
	}
	if err := msg.Ack(); err != nil {
		// It comes back beside the wake-up: whichever a worker takes
		// first goes on with the run, the other finds it taken or done.
		p.log.WarnContext(ctx, "settle work message", "subject", msg.Subject(), "err", err)
	}
	return true
}

// ackAfterProjection acknowledges msg, whose run is settled, once the
// projection updates its handling queued are written (at most
// ProjectionAckWait), heartbeating it meanwhile, without holding a
// worker. The projector writes every quarter second, and a process killed
// before that loses what it queued: with the message unacknowledged, it
// comes back to another worker, which finds the run where it stands and
// writes its record anew. So a kill -9 does not leave the projection
// behind the events for good.
func (p *Pool) ackAfterProjection(ctx context.Context, msg jetstream.Msg, waits *projectionWaits) {
	p.acks.Go(func() {
		hbCtx, stopHeartbeat := context.WithCancel(ctx)
		defer stopHeartbeat()
		go p.heartbeat(hbCtx, msg)
		givenUp, timedOut := waits.wait(p.opts.ProjectionAckWait)
		stopHeartbeat()
		if timedOut && !givenUp {
			// The bucket has not taken the record yet: it is only in this
			// process's projector, which goes on trying. Acknowledged now,
			// a stop or a kill before the bucket is back would lose it for
			// good. Let the message come back later instead: the worker
			// that takes it finds the run where it stands and writes it.
			_ = msg.NakWithDelay(p.opts.ProjectionAckWait)
			return
		}
		if givenUp {
			// The pool stopped before the record could be written (the
			// bucket not answering): another worker takes the message,
			// finds the run where it stands, and writes it.
			_ = msg.NakWithDelay(time.Second)
			return
		}
		if err := msg.Ack(); err != nil {
			p.log.WarnContext(ctx, "settle message", "subject", msg.Subject(), "err", err)
		}
	})
}

// processSafely is process, turning a panic into a retry: a panic is
// logged and the message retried, never lost.
func (p *Pool) processSafely(ctx context.Context, msg jetstream.Msg) (o outcome, reason string) {
	defer func() {
		if v := recover(); v != nil {
			p.log.ErrorContext(ctx, "worker panicked; message will be redelivered", "subject", msg.Subject(), "panic", v)
			o, reason = retry, fmt.Sprintf("worker panicked: %v", v)
		}
	}()
	return p.process(ctx, msg)
}

// heartbeat keeps the message leased while its run is worked on.
func (p *Pool) heartbeat(ctx context.Context, msg jetstream.Msg) {
	t := time.NewTicker(p.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Already acknowledged: the run was settled as the tick came.
			if err := msg.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
				p.log.WarnContext(ctx, "heartbeat", "subject", msg.Subject(), "err", err)
			}
		}
	}
}

// process routes a work message: a new task, or a wake-up of a run.
func (p *Pool) process(ctx context.Context, msg jetstream.Msg) (outcome, string) {
	kind, tenant, runID, err := events.ParseWorkSubject(msg.Subject())
	if err != nil {
		p.log.ErrorContext(ctx, "unroutable work message dropped", "subject", msg.Subject(), "err", err)
		return rejected, err.Error()
	}
	if kind == "resume" {
		var fired time.Time
		if scheduled(msg) {
			if p.finished(ctx, tenant, runID) {
				return settled, "" // an expiry or a lease end after the run's end
			}
			if meta, err := msg.Metadata(); err == nil {
				fired = meta.Timestamp // stored when JetStream fired it: the server's clock
			}
		}
		return p.resume(ctx, tenant, runID, fired)
	}
	meta, err := msg.Metadata()
	if err != nil {
		p.log.ErrorContext(ctx, "work message without metadata", "subject", msg.Subject(), "err", err)
		return retry, ""
	}
	task, limits, rej := p.decodeTask(tenant, msg.Subject(), msg.Data())
	if rej != nil {
		return p.reject(ctx, tenant, meta.Sequence.Stream, rej)
	}
	runID = events.RunID(task.Tenant, task.TaskID)
	p.crash("before:load")
	_, st, last, err := p.readRun(ctx, tenant, runID)
	if err != nil {
		return failedOn(err)
	}
	if st.Finished != nil || st.Rejection != nil {
		p.log.InfoContext(ctx, "task already has a run; nothing to do", "run_id", runID, "task_id", task.TaskID)
		if st.Finished != nil {
			p.putRun(ctx, st, task, journal.RunFinished) // the finish's own update may have died with its worker
		}
		return settled, ""
	}
	r, err := p.newRun(st, last, task, limits)
	if err != nil {
		p.log.ErrorContext(ctx, "prepare run", "run_id", runID, "err", err)
		return retry, err.Error()
	}
	if st.LastSeq == 0 {
		if err := r.start(ctx); err != nil {
			return p.failed(ctx, r, err)
		}
	}
	return p.drive(ctx, r)
}

// readRun reads a run's events and folds them into its state; last is the
// stream sequence its next append is conditional on. A trail that does not
// fold is logged here, for every path that reads a run: it means a bug or
// a foreign writer, and the run cannot go on until someone looks.
func (p *Pool) readRun(ctx context.Context, tenant, runID string) (evs []events.Event, st *events.RunState, last uint64, err error) {
	evs, last, err = p.journal.Load(ctx, tenant, runID)
	if err != nil {
		level := slog.LevelWarn
		if outage(err) {
			level = slog.LevelDebug // waitOutOutage warns of it, with the cause
		}
		p.log.Log(ctx, level, "load run", "run_id", runID, "err", err)
		return nil, nil, 0, err
	}
	st, err = events.Fold(evs)
	if err != nil {
		p.log.ErrorContext(ctx, "run trail does not fold", "run_id", runID, "err", err)
		return nil, nil, 0, err
	}
	return evs, st, last, nil
}

// scheduled reports whether a wake-up was published by JetStream from one
// of the run's schedules (scheduleWake): the server marks those with the
// schedule's subject.
func scheduled(msg jetstream.Msg) bool {
	return msg.Headers().Get(jetstream.SchedulerHeader) != ""
}

// finished reports whether the run's last event ends it, with one message
// get. A question's expiry schedule can outlive its run (its cancel was
// lost, or the answer came before the worker scheduled it) and fire an
// approval TTL after the run's end: such a wake-up must not read the
// whole run.
//
// Its projection record is checked (one get) and, if it is not the
// finish's, written from the run: the worker that finished the run may
// have died before writing it, leaving this message unacknowledged.
func (p *Pool) finished(ctx context.Context, tenant, runID string) bool {
	e, ok, err := p.journal.Last(ctx, tenant, runID)
	if err != nil || !ok || e.Type != events.TypeFinished {
		return false
	}
	if rec, ok, err := p.journal.Run(ctx, tenant, runID); err == nil && (!ok || rec.Status != journal.RunFinished || rec.LastSeq != e.Seq) {
		if _, st, _, err := p.readRun(ctx, tenant, runID); err == nil && st.Started != nil {
			p.putRun(ctx, st, st.Started.Task, journal.RunFinished)
		}
	}
	return true
}

// resume continues a run woken through loopgate.resume.<tenant>.<run_id>.
func (p *Pool) resume(ctx context.Context, tenant, runID string, fired time.Time) (outcome, string) {
	p.crash("before:load")
	_, st, last, err := p.readRun(ctx, tenant, runID)
	if err != nil {
		return failedOn(err)
	}
	if st.Started == nil {
		return rejected, "no such run"
	}
	return p.goOn(ctx, st, last, fired)
}

// goOn continues a started run from its state, as read: a finished one
// only gets its projection record. fired is when JetStream fired the
// scheduled wake-up that brought the run here, by the server's clock (zero
// for any other message).
func (p *Pool) goOn(ctx context.Context, st *events.RunState, last uint64, fired time.Time) (outcome, string) {
	if st.Finished != nil {
		p.putRun(ctx, st, st.Started.Task, journal.RunFinished) // as in process
		return settled, ""
	}
	r, err := p.newRun(st, last, st.Started.Task, st.Started.Limits)
	if err != nil {
		p.log.ErrorContext(ctx, "prepare run", "run_id", st.RunID, "err", err)
		return retry, err.Error()
	}
	r.fired = fired
	return p.drive(ctx, r)
}

// failed logs a run's error, if any, and classifies it.
func (p *Pool) failed(ctx context.Context, r *run, err error) (outcome, string) {
	var busy *busyError
	if errors.As(err, &busy) {
		// Come back when the lease ends, by a scheduled wake-up: the
		// message is settled, so waiting out a long lease uses up no
		// deliveries and holds no worker.
		serr := p.scheduleWake(ctx, r.task.Tenant, r.st.RunID, busy.callID+leaseSuffix, busy.until)
		if serr == nil {
			r.log.InfoContext(ctx, "run busy; looking again when the attempt's lease ends", "call_id", busy.callID, "until", busy.until)
			return settled, ""
		}
		r.log.WarnContext(ctx, "schedule wake-up at lease end", "call_id", busy.callID, "err", serr)
		if outage(serr) {
			return unavailable, serr.Error()
		}
	}
	o := classify(err)
	switch {
	case errors.Is(err, journal.ErrConflict):
		// Another writer kept appending first, past maxReloads: a second
		// driver of the run (its wake-up and an approval's continuation
		// in one process after a restart, or another worker). Nothing is
		// wrong, and handing the message back would spend one of its
		// deliveries on a healthy run; on its last, the worker would stop
		// the run as a poison message under the writer driving it. The
		// message is settled, and a wake-up looks at the run again
		// shortly, in case that writer stops first.
		at := p.now().Add(p.opts.RetryDelay)
		serr := p.scheduleWake(ctx, r.task.Tenant, r.st.RunID, contendedKey, at)
		if serr == nil {
			r.log.InfoContext(ctx, "run contended: another writer is driving it; looking again shortly", "at", at, "err", err)
			return settled, ""
		}
		r.log.WarnContext(ctx, "run interrupted; it will be continued from its events", "err", err, "schedule_err", serr)
		return o, err.Error()
	case err != nil && o == retry:
		r.log.WarnContext(ctx, "run interrupted; it will be continued from its events", "err", err)
		return o, err.Error()
	case o == unavailable:
		return o, err.Error()
	}
	return o, ""
}

// contendedKey names the schedule of a contended run's wake-up (see
// failed); call ids are s<step>c<n>, so it is no call's.
const contendedKey = "contended"

// maxReloads bounds how often a worker that lost an append race reloads the
// run and goes on before handing the message back.
const maxReloads = 3

// drive runs r and, when another writer appended to the run first (an
// approval handler, or a second worker forced onto the run), reloads its
// events and continues from what they now say, or leaves the run to a
// second driver that asked the model meanwhile (yieldTo). Only the writer
// whose executing append won ever runs the tool.
//
// A model call whose proposed event lost the race was paid for all the
// same: it is recorded (discarded) before the worker goes on or leaves,
// so the run's budgets count it.
func (p *Pool) drive(ctx context.Context, r *run) (outcome, string) {
	err := p.driveOnce(ctx, r)
	var unpaid []events.DiscardedData
	another := false
	for i := 0; i < maxReloads && errors.Is(err, journal.ErrConflict); i++ {
		evs, st, last, lerr := p.readRun(ctx, r.task.Tenant, r.st.RunID)
		if lerr != nil {
			return p.failed(ctx, r, lerr)
		}
		unpaid = r.lostProposals(evs)
		another = another || r.proposedByAnother(evs)
		if len(unpaid) > 0 && st.Finished == nil && st.Started != nil {
			// Recorded by a bare run: it needs no agent profile, which an
			// operator may have removed meanwhile. Cut short by another
			// conflict, the next read says which are still unrecorded.
			rec := p.ender(st, last)
			if err = rec.chargeDiscarded(ctx, unpaid); err != nil {
				continue
			}
			last = rec.last
		}
		if len(unpaid) > 0 && st.Finished != nil {
			// Nothing follows finished, whose totals are already stored:
			// the calls are paid for and on no run's record but this line.
			r.lostToFinished(ctx, unpaid)
		}
		unpaid = nil // recorded, or the run ended: nothing counts any more
		if another && st.Finished == nil && !st.IsParked {
			if o, reason, ok := p.yieldTo(ctx, r); ok {
				return o, reason
			}
		}
		another = false
		nr, nerr := p.newRun(st, last, r.task, r.limits)
		if nerr != nil {
			return p.failed(ctx, r, nerr)
		}
		r.log.DebugContext(ctx, "lost an append race; reloaded the run", "last_seq", st.LastSeq)
		nr.adopt(r)
		nr.fired = r.fired
		r = nr
		err = p.driveOnce(ctx, r)
	}
	if len(unpaid) > 0 {
		r.log.WarnContext(ctx, "model calls lost to another pass at the run could not be recorded; the run's budgets do not count them", "calls", len(unpaid), "err", err)
	}
	return p.failed(ctx, r, err)
}

// yieldTo leaves a run that another worker is driving to that worker: the
// message is settled and a wake-up looks at the run again an AckWait
// later (the contended schedule), by when JetStream would have handed that
// worker's message to another had it died. A driver that went on beside
// it would ask the model at every step it reaches too, a second model call
// per step that the budgets never see: only the winner's proposed event is
// recorded, and usage is counted from those. ok is false when the wake-up
// cannot be scheduled; the caller then goes on driving, as before.
func (p *Pool) yieldTo(ctx context.Context, r *run) (o outcome, reason string, ok bool) {
	at := p.now().Add(max(p.ackWait, p.opts.RetryDelay))
	if err := p.scheduleWake(ctx, r.task.Tenant, r.st.RunID, contendedKey, at); err != nil {
		r.log.WarnContext(ctx, "another worker is driving the run, and a wake-up to look again cannot be scheduled; going on beside it", "err", err)
		return 0, "", false
	}
	r.log.InfoContext(ctx, "another worker is driving the run (it asked the model since this one read the run); leaving it to that worker", "look_again_at", at)
	return settled, "", true
}

// driveOnce drives r, batching its events if the pool does, and makes
// sure nothing staged is left behind when the worker lets go of the run.
func (p *Pool) driveOnce(ctx context.Context, r *run) error {
	r.batch, r.atomic = p.opts.BatchEvents || p.opts.StageEvents, p.opts.BatchEvents
	err := r.drive(ctx)
	if err == nil || errors.Is(err, errParked) {
		if ferr := r.flush(ctx); ferr != nil {
			return ferr
		}
	}
	return err
}

// refusedCopy settles a task that intake refuses but whose run id already
// has events. A started run goes on from the task it started with, as a
// valid copy's would (process): the message may be the run's own,
// redelivered after its worker died, to a worker whose config now refuses
// what it once took (a lower max_input_bytes, a role taken away). Dropped,
// it would leave the run with no message to drive it, running forever.
// Anything else (a rejection recorded, a finished run) stands.
func (p *Pool) refusedCopy(ctx context.Context, tenant, runID string, rej *events.RejectedData) (outcome, string) {
	_, st, last, err := p.readRun(ctx, tenant, runID)
	if err != nil {
		return failedOn(err)
	}
	if st.Started != nil && st.Finished == nil {
		p.log.WarnContext(ctx, "task refused at intake names a started run; going on with the task it started with",
			"run_id", runID, "field", rej.Field, "reason", rej.Reason)
		return p.goOn(ctx, st, last, time.Time{})
	}
	p.log.WarnContext(ctx, "invalid task names an existing run; dropped", "run_id", runID, "field", rej.Field, "reason", rej.Reason)
	return rejected, "invalid copy of an existing task"
}

// reject records a task that cannot become a run, then terminates its
// message so it is never redelivered. A rejection JetStream cannot store
// now (a full store, a cluster electing) keeps the message as a run's
// write would (unavailable): handed back, it would spend a delivery per
// try, and the last one would leave the task with nothing recorded.
func (p *Pool) reject(ctx context.Context, tenant string, streamSeq uint64, rej *events.RejectedData) (outcome, string) {
	runID, err := p.recordRejection(ctx, tenant, streamSeq, rej)
	switch {
	case errors.Is(err, journal.ErrConflict):
		return p.refusedCopy(ctx, tenant, runID, rej)
	case err != nil:
		o, reason := failedOn(err)
		if o == retry { // an outage is logged by the wait for its end
			p.log.WarnContext(ctx, "record rejection", "run_id", runID, "err", err)
		}
		return o, reason
	}
	p.log.WarnContext(ctx, "task rejected", "run_id", runID, "tenant", tenant, "field", rej.Field, "reason", rej.Reason)
	return rejected, fmt.Sprintf("rejected: %s: %s", rej.Field, rej.Reason)
}

// recordRejection appends the rejected event of a task as its run's
// first event: on the task's run id when the task carried a usable
// task_id, otherwise on an id derived from the message's stream sequence.
// It returns that run id, and journal.ErrConflict when the run has events
// already.
func (p *Pool) recordRejection(ctx context.Context, tenant string, streamSeq uint64, rej *events.RejectedData) (string, error) {
	runID := events.RejectedRunID(tenant, streamSeq)
	if rej.TaskID != "" {
		runID = events.RunID(tenant, rej.TaskID)
	}
	data, err := events.EncodeData(rej)
	if err != nil {
		return runID, fmt.Errorf("worker: encode rejection: %w", err)
	}
	data, _ = p.redactor.JSON(data)
	e := events.Event{
		EventID: p.ids.NewEventID(), RunID: runID, Tenant: tenant, Seq: 1,
		Type: events.TypeRejected, Time: p.now().UTC(), Data: data,
	}
	_, err = p.journal.Append(ctx, 0, e)
	return runID, err
}
