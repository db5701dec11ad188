package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaptinlin/jsonschema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/schemas"
	"github.com/loopgate/loopgate/seal"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/worker"
)

// bundle is a running loopgate for one test: a real embedded nats-server,
// the CityOps config and tools (plus any the test adds), and a pool.
type bundle struct {
	t      testing.TB
	env    *natstest.Env
	cfg    *config.Config
	outbox string
	logs   *logBuffer

	cluster *natstest.Cluster // with options.cluster

	pool    *worker.Pool
	keyring *seal.Keyring    // with options.sealKey
	journal *journal.Journal // the last pool's (env.Journal unless the options give pools their own)
	// nextCrash, when set, is the next pool's fault-injection hook
	// instead of the options' (then cleared): a test of two pools that
	// each do their own thing.
	nextCrash func(string)
	startPool func()
	newPool   func() *worker.Pool // another pool on the same server, as another process
}

// options let a test add tools, profiles and scripts to the CityOps config.
type options struct {
	tools    []tools.Manifest
	builtins tools.Builtins
	agents   map[string]config.Profile
	scripts  map[string]model.Model // by agent
	roles    map[string]config.Role
	workers  int
	layout   journal.Layout   // natstest's defaults when zero
	crash    func(string)     // the pool's fault-injection hook
	clock    func() time.Time // the pools' clock (time.Now when nil)
	// maxFileStore caps the server's JetStream disk use (not with cluster).
	maxFileStore int64
	// batchMaxMsgs caps an atomic batch's messages on the server (its
	// jetstream { limits { batch { max_msgs } } }; not with cluster).
	batchMaxMsgs int
	retry        time.Duration // the pool's redelivery delay after an error
	// projectionAckWait is the pool's ProjectionAckWait (30s when zero).
	projectionAckWait time.Duration
	// apiTimeout is the pool's JetStream request timeout (natstest's 30s
	// when zero), for tests of a JetStream that does not answer.
	apiTimeout time.Duration
	pricing    map[string]config.Price
	metrics    worker.Metrics // every pool's Metrics (none when nil)

	// cluster runs the test on three clustered servers (R3) instead of
	// one; b.cluster can stop and restart them.
	cluster bool
	// batch appends each step's events in atomic batches, as on a
	// cluster (also set for every test by LOOPGATE_TEST_BATCH=1).
	batch bool
	// groupCommit gives each pool a journal with group commit, batching
	// from this many waiting appends, and stages each step's events
	// (StageEvents), as serve does (LOOPGATE_TEST_GROUP=1 sets 2 for every
	// test).
	groupCommit int

	// coldJournal gives the pools a journal without a run cache, as a
	// process that did not write the run: every read goes to the server.
	coldJournal bool

	// sealKey gives every pool a seal.Keyring under this key-encryption
	// key (each pool its own, as processes have), so redacted arguments
	// are sealed; b.keyring is one more on the same bucket.
	sealKey *seal.LocalKey

	// configFile loads the CityOps config from this file instead of the
	// copy embedded in cityops.Files (the same bytes, when it is
	// ../examples/cityops/loopgate.yaml).
	configFile string
}

func setup(t testing.TB, o options) *bundle {
	t.Helper()
	var env *natstest.Env
	var cluster *natstest.Cluster
	if o.cluster {
		cluster = natstest.StartClusterWith(t, natstest.ClusterOptions{Layout: o.layout})
		j, err := journal.New(t.Context(), cluster.JS)
		if err != nil {
			t.Fatal(err)
		}
		// The pool's JetStream context as loopgate's own: nats.go's 5s
		// request timeout (the cluster's admin context waits 30s).
		js, err := jetstream.New(cluster.Conn)
		if err != nil {
			t.Fatal(err)
		}
		env = &natstest.Env{Conn: cluster.Conn, JS: js, Journal: j}
	} else {
		env = natstest.StartWith(t, natstest.Options{Layout: o.layout, MaxFileStore: o.maxFileStore, BatchMaxMsgs: o.batchMaxMsgs})
	}
	cfg, err := config.Load(cityops.Files, cityops.ConfigFile)
	if o.configFile != "" {
		cfg, err = config.LoadFile(o.configFile)
	}
	if err != nil {
		t.Fatalf("load cityops config: %v", err)
	}
	b := &bundle{t: t, env: env, cluster: cluster, cfg: cfg, outbox: t.TempDir(), logs: &logBuffer{}}
	builtins := tools.Builtins{}
	if err := cityops.Register(builtins, cityops.Options{Outbox: b.outbox}); err != nil {
		t.Fatal(err)
	}
	for name, fn := range o.builtins {
		builtins.MustRegister(name, fn)
	}
	cfg.Tools = append(cfg.Tools, o.tools...)
	if o.pricing != nil {
		cfg.Pricing = o.pricing
	}
	for name, r := range o.roles {
		cfg.Policy.Roles[name] = r
	}
	models := map[string]model.Model{}
	for name, p := range cfg.Agents {
		m, err := model.Build(p.Model, cfg.ReadFile)
		if err != nil {
			t.Fatal(err)
		}
		models[name] = m
	}
	for name, p := range o.agents {
		p.Limits = withDefaults(p.Limits)
		cfg.Agents[name] = p
		models[name] = o.scripts[name]
	}
	reg, err := tools.NewRegistry(cfg.Tools, builtins)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.newPool = func() *worker.Pool {
		crash := o.crash
		if b.nextCrash != nil {
			crash, b.nextCrash = b.nextCrash, nil
		}
		poolJS, poolJournal := env.JS, env.Journal // as they are now: restart replaces them
		if o.apiTimeout > 0 {
			js, err := jetstream.New(env.Conn, jetstream.WithDefaultTimeout(o.apiTimeout))
			if err != nil {
				t.Fatal(err)
			}
			poolJS = js
		}
		// LOOPGATE_TEST_GROUP=1 runs every scenario with group commit, as
		// `loopgate serve` does on its embedded server, batching from two
		// waiting appends (a test has few runs at once).
		group := o.groupCommit
		if group == 0 && os.Getenv("LOOPGATE_TEST_GROUP") == "1" {
			group = 2
		}
		if o.coldJournal || o.apiTimeout > 0 || group > 0 {
			cache := journal.DefaultRunCacheBytes
			if o.coldJournal {
				cache = 0
			}
			opts := []journal.Option{journal.WithRunCache(cache)}
			if group > 0 {
				opts = append(opts, journal.WithGroupCommit(group))
			}
			j, err := journal.New(t.Context(), poolJS, opts...)
			if err != nil {
				t.Fatal(err)
			}
			poolJournal = j
		}
		var sealer worker.Sealer
		if o.sealKey != nil {
			kv, err := poolJS.KeyValue(t.Context(), journal.BucketKeys)
			if err != nil {
				t.Fatal(err)
			}
			kr := seal.NewKeyring(kv, o.sealKey)
			sealer, b.keyring = kr, kr
		}
		pool, err := worker.New(worker.Deps{JS: poolJS, Journal: poolJournal, App: cfg, Registry: reg, Models: models, Sealer: sealer},
			&worker.Config{Workers: cmp.Or(o.workers, 2), Logger: log, TransientBackoff: 10 * time.Millisecond, Crash: crash, RetryDelay: o.retry, Clock: o.clock, ProjectionAckWait: o.projectionAckWait,
				// LOOPGATE_TEST_BATCH=1 runs every scenario with a step's
				// events appended in atomic batches, as on a cluster.
				BatchEvents: o.batch || os.Getenv("LOOPGATE_TEST_BATCH") == "1",
				// With group commit, as serve has it: a step's events in one Append.
				StageEvents: group > 0, Metrics: o.metrics})
		if err != nil {
			t.Fatal(err)
		}
		if err := pool.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.journal = poolJournal
		return pool
	}
	b.startPool = func() { b.pool = b.newPool() }
	b.startPool()
	t.Cleanup(func() { b.stopPool() })
	return b
}

// secondPool starts another pool on the bundle's server, as a second
// worker process would be, stopped when the test ends.
func (b *bundle) secondPool() *worker.Pool {
	other := b.newPool()
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = other.Stop(ctx)
	})
	return other
}

func (b *bundle) stopPool() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.pool.Stop(ctx)
}

// restart stops the workers and the server and starts both again on the
// same data, as after the whole process died.
func (b *bundle) restart() {
	b.t.Helper()
	b.stopPool()
	b.env.Restart(b.t)
	b.startPool()
}

// withDefaults fills a test profile's unset limits like the config loader.
func withDefaults(l events.Limits) events.Limits {
	d := config.DefaultLimits
	if l.MaxSteps == 0 {
		l.MaxSteps = d.MaxSteps
	}
	if l.MaxToolCalls == 0 {
		l.MaxToolCalls = d.MaxToolCalls
	}
	if l.MaxActive == 0 {
		l.MaxActive = d.MaxActive
	}
	if l.MaxInvalidDecisions == 0 {
		l.MaxInvalidDecisions = d.MaxInvalidDecisions
	}
	if l.MaxCorrections == 0 {
		l.MaxCorrections = d.MaxCorrections
	}
	if l.MaxRepeatedCalls == 0 {
		l.MaxRepeatedCalls = d.MaxRepeatedCalls
	}
	if l.MaxObservationBytes == 0 {
		l.MaxObservationBytes = d.MaxObservationBytes
	}
	if l.MaxRunObservationKiB == 0 {
		l.MaxRunObservationKiB = d.MaxRunObservationKiB
	}
	return l
}

// task is a CityOps task by dev@cityops, an operator.
func task(id, agent string) events.Task {
	return events.Task{
		TaskID:    id,
		Tenant:    "cityops",
		Principal: events.Principal{ID: "dev@cityops", Roles: []string{"operator"}},
		Agent:     agent,
		Input:     json.RawMessage(`"escalate the oldest open sanitation complaints"`),
	}
}

// submit publishes a task the way any upstream system would and returns
// its run id.
func (b *bundle) submit(tk events.Task) string {
	b.t.Helper()
	payload, err := json.Marshal(tk)
	if err != nil {
		b.t.Fatal(err)
	}
	b.publishRaw(tk.Tenant, payload, tk.TaskID)
	return events.RunID(tk.Tenant, tk.TaskID)
}

// publishRaw publishes bytes on a tenant's task subject; msgID may be empty.
func (b *bundle) publishRaw(tenant string, payload []byte, msgID string) *jetstream.PubAck {
	b.t.Helper()
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	ack, err := b.env.JS.Publish(b.t.Context(), events.TaskSubject(tenant), payload, opts...)
	if err != nil {
		b.t.Fatalf("publish task: %v", err)
	}
	return ack
}

// waitEnd waits for the run's finished or rejected event and returns all
// its events, checked for a gapless, well-formed trail.
func (b *bundle) waitEnd(runID string) []events.Event {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.t.Context(), 30*time.Second)
	defer cancel()
	ended := false
	for e, err := range b.env.Journal.Watch(ctx, events.RunFilter("cityops", runID)) {
		if err != nil {
			b.t.Fatalf("watch run %s: %v", runID, err)
		}
		if e.Type == events.TypeFinished || e.Type == events.TypeRejected {
			ended = true
			break
		}
	}
	if !ended {
		b.t.Fatalf("run %s did not end: %v\nlogs:\n%s", runID, ctx.Err(), b.logs.String())
	}
	evs, _, err := b.env.Journal.Load(b.t.Context(), "cityops", runID)
	if err != nil {
		b.t.Fatal(err)
	}
	checkEnvelopes(b.t, runID, evs)
	return evs
}

// eventSchema is schemas/event.schema.json, compiled once for every test.
var eventSchema = sync.OnceValues(func() (*jsonschema.Schema, error) { return schemas.Compile("event") })

// checkEnvelopes asserts the wire contract of a run's events: seq 1..n with
// no gap, unique UUID v7 event ids, the run and tenant on each, and each
// event, as stored, valid against the event schema loopgate ships, the
// document a reader of the stream checks it with.
func checkEnvelopes(t testing.TB, runID string, evs []events.Event) {
	t.Helper()
	schema, err := eventSchema()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, e := range evs {
		stored, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if res := schema.ValidateJSON(stored); !res.IsValid() {
			t.Fatalf("event %d (%s) does not match event.schema.json: %v\n%s", e.Seq, e.Type, schemas.Errors(res), stored)
		}
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: the trail has a gap", i, e.Seq)
		}
		if e.RunID != runID || e.Tenant != "cityops" {
			t.Fatalf("event %d belongs to %s/%s", e.Seq, e.Tenant, e.RunID)
		}
		if len(e.EventID) != 36 || e.EventID[14] != '7' || seen[e.EventID] {
			t.Fatalf("event %d has event id %q: want a unique UUID v7", e.Seq, e.EventID)
		}
		seen[e.EventID] = true
		if !json.Valid(e.Data) {
			t.Fatalf("event %d data is not JSON", e.Seq)
		}
	}
}

// trail renders events as "type" or "type:status" for exact comparison.
func trail(t testing.TB, evs []events.Event) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		s := string(e.Type)
		var status struct {
			Status   string        `json:"status"`
			Reason   events.Reason `json:"reason"`
			Decision string        `json:"decision"`
			Class    string        `json:"class"`
		}
		_ = json.Unmarshal(e.Data, &status)
		switch e.Type {
		case events.TypeValidated, events.TypeExecuted:
			s += ":" + status.Status
		case events.TypeFinished:
			s += ":" + string(status.Reason)
		case events.TypeApproved:
			s += ":" + status.Decision
		case events.TypeApprovalRejected, events.TypeCancelRejected:
			s += ":" + status.Class
		case events.TypeProposed:
			var p events.ProposedData
			_ = e.Decode(&p)
			switch {
			case p.Decision == nil:
				s += ":invalid"
			case p.Decision.Final != nil:
				s += ":final"
			}
		}
		if e.Tool != "" {
			s += "(" + e.Tool + ")"
		}
		out = append(out, s)
	}
	return out
}

// step is the trail of one successful call of tool.
func okStep(tool string) []string {
	return []string{"proposed", "validated:ok(" + tool + ")", "executing(" + tool + ")", "executed:ok(" + tool + ")", "observed(" + tool + ")"}
}

// lostThenOKStep is okStep for a write whose first attempt's worker died
// (or gave the run up) before it started the tool: that attempt is
// recorded as not run (transient, deadline_passed), and a new attempt
// runs the tool.
func lostThenOKStep(tool string) []string {
	return []string{"proposed", "validated:ok(" + tool + ")", "executing(" + tool + ")", "executed:transient(" + tool + ")",
		"executing(" + tool + ")", "executed:ok(" + tool + ")", "observed(" + tool + ")"}
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func assertTrail(t testing.TB, evs []events.Event, want []string) {
	t.Helper()
	got := trail(t, evs)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("event trail:\n got  %s\n want %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}

// last returns the data of the last event of type typ.
func last[T any](t testing.TB, evs []events.Event, typ events.Type) T {
	t.Helper()
	var v T
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ {
			if err := evs[i].Decode(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s event", typ)
	return v
}

// all returns the events of type typ.
func all(evs []events.Event, typ events.Type) []events.Event {
	var out []events.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func outboxFiles(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func scripted(t testing.TB, decisions ...string) model.Model {
	t.Helper()
	raw := make([]json.RawMessage, len(decisions))
	for i, d := range decisions {
		raw[i] = json.RawMessage(d)
	}
	b, _ := json.Marshal(map[string]any{"decisions": raw})
	m, err := model.NewScripted(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// logBuffer collects a pool's logs for failure messages.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// exampleKey is a CityOps example approver's key pair, from the seed
// embedded in cityops.Files (examples/cityops/keys/<id>.nk).
func exampleKey(t testing.TB, id string) nkeys.KeyPair {
	t.Helper()
	seed, err := cityops.ApproverSeed(id)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := approvals.ParseSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// approverKey is the key approver signs with: their example key when the
// example has one, else a new key that no policy knows (so an approver
// missing from the policy still sends a well-formed signed message).
func approverKey(t testing.TB, approver string) nkeys.KeyPair {
	t.Helper()
	if _, err := cityops.ApproverSeed(approver); err == nil {
		return exampleKey(t, approver)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// approvalPayload is a decision as approver's client publishes it: signed
// with approverKey as of now when sign is set (the config under test
// requires signatures, as the CityOps example does), unsigned otherwise.
func approvalPayload(t testing.TB, sign bool, runID, callID, hash, decision, approver, reason string) []byte {
	t.Helper()
	m := approvals.Message{RunID: runID, CallID: callID, ArgsHash: hash, Decision: approvals.Decision(decision),
		Approver: approvals.Approver{ID: approver}, Reason: reason}
	if sign {
		if err := approvals.Sign(&m, approverKey(t, approver), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	payload, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return payload
}

// publishApproval publishes a decision on the approvals subject, like any
// approver would — signed when the config requires signatures, see
// approvalPayload — and returns its sequence in LOOPGATE_APPROVALS.
func (b *bundle) publishApproval(runID, callID, hash, decision, approver, reason string) uint64 {
	b.t.Helper()
	payload := approvalPayload(b.t, b.cfg.Policy.RequireSignatures, runID, callID, hash, decision, approver, reason)
	ack, err := b.env.JS.Publish(b.t.Context(), events.ApprovalSubject("cityops", runID, callID), payload)
	if err != nil {
		b.t.Fatalf("publish approval: %v", err)
	}
	return ack.Sequence
}

// waitFor waits until the run has an event matching pred and returns it.
func (b *bundle) waitFor(runID string, what string, pred func(events.Event) bool) events.Event {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.t.Context(), 30*time.Second)
	defer cancel()
	for e, err := range b.env.Journal.Watch(ctx, events.RunFilter("cityops", runID)) {
		if err != nil {
			b.t.Fatalf("watch run %s: %v", runID, err)
		}
		if pred(e) {
			return e
		}
	}
	b.t.Fatalf("run %s: no %s event: %v\nlogs:\n%s", runID, what, ctx.Err(), b.logs.String())
	return events.Event{}
}

// waitType waits for the n-th (1-based) event of type typ.
func (b *bundle) waitType(runID string, typ events.Type, n int) events.Event {
	b.t.Helper()
	seen := 0
	return b.waitFor(runID, string(typ), func(e events.Event) bool {
		if e.Type == typ {
			seen++
		}
		return e.Type == typ && seen == n
	})
}

// autoApprove answers every question the run asks with decision, as
// approver, through the real approvals subject, until the run ends —
// signed when the config requires signatures, as publishApproval. It
// answers once the run is parked, so the trail is always requested →
// parked → approved (an answer that beats the parked event is fine too,
// but makes the trail depend on timing).
func (b *bundle) autoApprove(runID, approver, decision, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sign := b.cfg.Policy.RequireSignatures
	key := approverKey(b.t, approver)
	go func() {
		defer cancel()
		var q events.ApprovalRequestedData
		var callID string
		for e, err := range b.env.Journal.Watch(ctx, events.RunFilter("cityops", runID)) {
			if err != nil {
				return
			}
			switch e.Type {
			case events.TypeApprovalRequested:
				_ = e.Decode(&q)
				callID = e.CallID
			case events.TypeParked:
				m := approvals.Message{RunID: runID, CallID: callID, ArgsHash: q.ArgsHash, Decision: approvals.Decision(decision),
					Approver: approvals.Approver{ID: approver}, Reason: reason}
				if sign && approvals.Sign(&m, key, time.Now()) != nil {
					return // the run's wait for a decision fails the test
				}
				payload, _ := json.Marshal(m)
				_, _ = b.env.JS.Publish(ctx, events.ApprovalSubject("cityops", runID, callID), payload)
			case events.TypeFinished:
				return
			}
		}
	}()
}

// consumerSettled waits until the consumer's messages have all been
// delivered and settled (acknowledged or terminated).
func consumerSettled(t *testing.T, b *bundle, stream, consumer string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		c, err := b.env.JS.Consumer(ctx, stream, consumer)
		if err != nil {
			t.Fatalf("consumer %s on %s: %v", consumer, stream, err)
		}
		info := c.CachedInfo()
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s still holds %d messages not delivered and %d unacknowledged\nlogs:\n%s", stream, info.NumPending, info.NumAckPending, b.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// gatedStep is the trail of one approved write.
func gatedStep(tool string) []string {
	return []string{"proposed", "validated:ok(" + tool + ")", "approval_requested(" + tool + ")", "parked", "approved:approve(" + tool + ")",
		"executing(" + tool + ")", "executed:ok(" + tool + ")", "observed(" + tool + ")"}
}

// jsonRaw is a JSON value in a policy literal.
type jsonRaw = json.RawMessage
