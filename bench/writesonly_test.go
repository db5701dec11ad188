package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/idempotency"
	"github.com/loopgate/loopgate/journal"
)

// The writes-only line answers the goal's parenthesis ("host overhead no
// more than the persistence it needs") by measuring that persistence: it
// replays, for every task the driver publishes, the reads and writes a
// recorded happy-path run made, in the worker's order, through the same
// client calls, and nothing else. No model, no validation, redaction,
// authorization or tool: the task is taken from the work consumer, the run
// loaded, each recorded event appended conditionally (its data as stored,
// its id, run and time new), each write's idempotency claim and outcome
// stored around its executing and executed events, the runs projection
// written, the task acknowledged. Its events/s over the raw line's is the
// most any host could reach with these writes, measured rather than assumed
// (x raw max assumes each stored message costs one raw append); a pool's
// events/s over its events/s is the share of the CPU the host leaves to the
// persistence, 0.5 where the host costs as much as the writes.
//
// It is measured where a pool appends each event on its own (no group
// commit, no staging: sync=2m on one server), so the replay's appends are
// the pool's; with group commit the grouping of a step's events would have
// to be replayed too.

// recordedRun is one happy-path run as the replay repeats it.
type recordedRun struct {
	events []events.Event
	// ops are the recorded run's idempotency records by call id: the
	// writes, claimed after their executing event and completed before
	// their executed one.
	ops map[string]idempotency.Record
}

// recordRun reads a finished run of the pool: its events and the
// idempotency records of its writes.
func recordRun(ctx context.Context, b *testing.B, js jetstream.JetStream, runID string) recordedRun {
	b.Helper()
	j, err := journal.New(ctx, js, journal.WithRunCache(0))
	if err != nil {
		b.Fatal(err)
	}
	evs, _, err := j.Load(ctx, lgTenant, runID)
	if err != nil {
		b.Fatalf("record run %s: %v", runID, err)
	}
	kv, err := js.KeyValue(ctx, journal.BucketIdempotency)
	if err != nil {
		b.Fatal(err)
	}
	idem := idempotency.NewStore(kv)
	rec := recordedRun{events: evs, ops: map[string]idempotency.Record{}}
	for _, e := range evs {
		if e.Type != events.TypeExecuting {
			continue
		}
		var d events.ExecutingData
		if err := e.Decode(&d); err != nil {
			b.Fatal(err)
		}
		r, _, err := idem.Get(ctx, d.OperationID)
		if err != nil {
			continue // a read: no record
		}
		rec.ops[e.CallID] = r
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != events.TypeFinished || len(rec.ops) == 0 {
		b.Fatalf("record run %s: %d events, %d writes: not a finished happy-path run", runID, len(evs), len(rec.ops))
	}
	return rec
}

// startReplayers takes tasks from the work consumer with conc replayers
// on a connection of their own, as a pool of conc workers would, and
// replays rec for each. stop stops them.
func startReplayers(b *testing.B, srv *lgServer, rec recordedRun, conc int) (stop func()) {
	b.Helper()
	nc, err := srv.connect("bench replayer")
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
	if err != nil {
		nc.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	fail := func(err error) {
		cancel()
		nc.Close()
		b.Fatal(err)
	}
	j, err := journal.New(ctx, js, srv.journalOptions()...)
	if err != nil {
		fail(err)
	}
	kv, err := js.KeyValue(ctx, journal.BucketIdempotency)
	if err != nil {
		fail(err)
	}
	cons, err := js.Consumer(ctx, journal.StreamWork, journal.ConsumerWorkers)
	if err != nil {
		fail(err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(conc), jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		fail(err)
	}
	rp := &replayer{j: j, idem: idempotency.NewStore(kv), rec: rec}
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				msg, err := iter.Next()
				if err != nil {
					return // stopped
				}
				if err := rp.replay(ctx, msg); err != nil && ctx.Err() == nil {
					b.Errorf("replay %s: %v", msg.Subject(), err)
					_ = msg.Nak()
				}
			}
		})
	}
	return func() {
		iter.Stop()
		cancel()
		wg.Wait()
		nc.Close()
	}
}

// replayer stores a recorded run's writes for each task.
type replayer struct {
	j    *journal.Journal
	idem *idempotency.Store
	rec  recordedRun
}

// replay stores the recorded run's writes as the run of msg's task, then
// acknowledges msg.
func (rp *replayer) replay(ctx context.Context, msg jetstream.Msg) error {
	var task struct {
		TaskID string `json:"task_id"`
		Agent  string `json:"agent"`
	}
	if err := json.Unmarshal(msg.Data(), &task); err != nil {
		return err
	}
	runID := events.RunID(lgTenant, task.TaskID)
	_, last, err := rp.j.Load(ctx, lgTenant, runID)
	if err != nil {
		return err
	}
	revs := map[string]uint64{}
	for _, recorded := range rp.rec.events {
		e := recorded
		e.RunID, e.EventID, e.Time = runID, events.UUIDv7.NewEventID(), time.Now().UTC()
		op, write := rp.rec.ops[e.CallID]
		if write {
			op.RunID, op.OperationID, op.Updated = runID, events.OperationID(runID, e.CallID), e.Time
		}
		if write && e.Type == events.TypeExecuted {
			if _, err := rp.idem.Set(ctx, op, revs[e.CallID]); err != nil {
				return err
			}
		}
		if last, err = rp.j.Append(ctx, last, e); err != nil {
			return err
		}
		if write && e.Type == events.TypeExecuting {
			claim := op
			claim.Result = nil
			_, rev, fresh, err := rp.idem.Claim(ctx, claim)
			if err != nil || !fresh {
				return fmt.Errorf("claim %s: fresh %v: %v", op.OperationID, fresh, err)
			}
			revs[e.CallID] = rev
		}
	}
	final := rp.rec.events[len(rp.rec.events)-1]
	if err := rp.j.PutRun(ctx, journal.RunRecord{
		RunID: runID, Tenant: lgTenant, TaskID: task.TaskID, Agent: task.Agent,
		Status: journal.RunFinished, Reason: string(events.ReasonDone), LastSeq: final.Seq, Updated: time.Now().UTC(),
	}); err != nil {
		return err
	}
	return msg.Ack()
}

// benchWritesOnly records a run of the pool (approval none, the outbox on
// tmpfs), then measures the replay of its writes as benchHappyPath
// measures the pool: warm-up, then b.N rounds of lgRunsPerRound(conc)
// runs, conc at once, each trail checked.
func benchWritesOnly(b *testing.B, srv *lgServer, conc int) lgResult {
	ctx, cancel := context.WithTimeout(b.Context(), 15*time.Minute)
	defer cancel()
	v := lgVariant{name: "writes only", tmpfs: true}
	d := newLGDriver(b, srv)
	defer d.close()

	stop, _ := startLGPools(b, srv, lgConfig(b, false), v.outbox, lgWarmupConc, 1)
	if _, err := d.drive(ctx, "record", 1, 1, nil); err != nil {
		stop()
		b.Fatalf("record: %v", err)
	}
	stop()
	var recorded string
	for id := range d.runs {
		recorded = id
	}
	rec := recordRun(ctx, b, srv.js, recorded)

	stop = startReplayers(b, srv, rec, conc)
	defer stop()
	if _, err := d.drive(ctx, "warm", lgWarmupRuns, min(conc, lgWarmupConc), nil); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	r := measureRounds(ctx, b, srv, d, conc, len(rec.events))
	r.variant, r.writesOnly = "writes only (a recorded approval=none run, replayed)", true
	return r
}
