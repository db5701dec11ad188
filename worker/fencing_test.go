package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/idempotency"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/toolsvc"
)

// Fenced reconciliation (docs/reconciliation.md): a write whose first
// attempt hangs past loopgate's timeout and keeps running at the backend,
// landing its effect late. Each test runs the tool in a real tool service
// (toolsvc, on the test's embedded nats-server) and counts the effects
// where they happen, at the backend: exactly one, or a needs_human
// question and no second attempt.

// ticketBackend is a ticket system behind a tool service: create_ticket
// writes, ticket_status reconciles. The first create_ticket call is held
// (it ignores its deadline, as a backend that took the request does)
// until release; every later call lands at once.
type ticketBackend struct {
	idempotent bool // creates dedupe by operation id

	mu      sync.Mutex
	effects []string        // operation ids whose ticket was created, in order
	fenced  map[string]bool // operation ids a reconcile fenced
	refused []string        // writes a fence refused
	checks  []statusCheck   // reconcile requests, in order

	writes atomic.Int32  // create_ticket calls received
	hold   chan struct{} // closed by release
	late   chan string   // how the held call ended: created, deduped or refused
	once   sync.Once
}

// statusCheck is one ticket_status request as the backend received it.
type statusCheck struct {
	at          time.Time
	operationID string
	fence       bool
}

func newTicketBackend(idempotent bool) *ticketBackend {
	return &ticketBackend{idempotent: idempotent, fenced: map[string]bool{},
		hold: make(chan struct{}), late: make(chan string, 1)}
}

func (tb *ticketBackend) release() { tb.once.Do(func() { close(tb.hold) }) }

// create is create_ticket's handler.
func (tb *ticketBackend) create(_ context.Context, req toolsvc.Request) (any, error) {
	first := tb.writes.Add(1) == 1
	if first {
		<-tb.hold // past the deadline: loopgate has stopped waiting
	}
	outcome, err := tb.land(req.OperationID)
	if first {
		tb.late <- outcome
	}
	if err != nil {
		return nil, err
	}
	return map[string]string{"ticket": "T-" + req.OperationID, "outcome": outcome}, nil
}

// land applies one create of operation op.
func (tb *ticketBackend) land(op string) (string, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	switch {
	case tb.fenced[op]:
		tb.refused = append(tb.refused, op)
		return "refused", errors.New("operation " + op + " was fenced")
	case tb.idempotent && tb.created(op):
		return "deduped", nil
	}
	tb.effects = append(tb.effects, op)
	return "created", nil
}

func (tb *ticketBackend) created(op string) bool {
	for _, e := range tb.effects {
		if e == op {
			return true
		}
	}
	return false
}

// status is ticket_status's handler: applied or not, and, asked to fence,
// an absent ticket's operation id is fenced.
func (tb *ticketBackend) status(_ context.Context, req toolsvc.Request) (any, error) {
	var a struct {
		OperationID string `json:"operation_id"`
		Fence       bool   `json:"fence"`
	}
	if err := json.Unmarshal(req.Args, &a); err != nil {
		return nil, toolsvc.BadRequest(err)
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.checks = append(tb.checks, statusCheck{at: time.Now(), operationID: a.OperationID, fence: a.Fence})
	applied := tb.created(a.OperationID)
	if !applied && a.Fence {
		tb.fenced[a.OperationID] = true
	}
	return map[string]any{"applied": applied, "fenced": tb.fenced[a.OperationID]}, nil
}

// counts returns the effects, the refused writes and the checks so far.
func (tb *ticketBackend) counts() ([]string, []string, []statusCheck) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.effects...), append([]string(nil), tb.refused...), append([]statusCheck(nil), tb.checks...)
}

// waitLate waits for the held call to end, once released.
func (tb *ticketBackend) waitLate(t *testing.T) string {
	t.Helper()
	select {
	case outcome := <-tb.late:
		return outcome
	case <-time.After(30 * time.Second):
		t.Fatal("the held create_ticket call never ended")
		return ""
	}
}

// fencingSetup runs loopgate with create_ticket (m changed by change) and
// ticket_status, both served by tb through a real tool service.
func fencingSetup(t *testing.T, tb *ticketBackend, change func(*tools.Manifest)) *bundle {
	t.Helper()
	m := fakeTool("create_ticket", tools.Write, false)
	m.Approval = tools.ApprovalNone
	m.Timeout = events.Duration(1500 * time.Millisecond)
	change(&m)
	var create, status atomic.Pointer[tools.Func]
	b := setup(t, options{
		tools: []tools.Manifest{m, fakeTool("ticket_status", tools.Read, false)},
		// The harness's registry has no connection: each builtin is the
		// nats executor of a registry of its own, calling the service.
		builtins: tools.Builtins{
			"create_ticket": func(ctx context.Context, c tools.Call) (any, error) { return (*create.Load())(ctx, c) },
			"ticket_status": func(ctx context.Context, c tools.Call) (any, error) { return (*status.Load())(ctx, c) },
		},
		roles:   writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)},
	})
	remote := func(name, subject string, h toolsvc.Handler, perm tools.Permission) tools.Func {
		return remoteFunc(t, b, tools.Manifest{Name: name, Description: "d", Permission: perm, ArgsSchema: json.RawMessage(openSchema),
			Executor: tools.Executor{NATS: subject}}, h)
	}
	cf := remote("create_ticket", "test.fencing.create_ticket", tb.create, tools.Write)
	sf := remote("ticket_status", "test.fencing.ticket_status", tb.status, tools.Read)
	create.Store(&cf)
	status.Store(&sf)
	// Before the services stop (cleanups run last first): a held call
	// ends.
	t.Cleanup(tb.release)
	return b
}

// attemptTrail is the trail of a one-call run of create_ticket whose
// call's own events are mid, before the final answer.
func attemptTrail(mid ...string) []string {
	return concat([]string{"started", "proposed", "validated:ok(create_ticket)"}, mid, []string{"proposed:final", "finished:done"})
}

// An idempotent tool is run again at once with the same operation id; its
// late first attempt finds the ticket and creates nothing.
func TestALateAttemptOfAnIdempotentWriteTakesEffectOnce(t *testing.T) {
	t.Parallel()
	tb := newTicketBackend(true)
	b := fencingSetup(t, tb, func(m *tools.Manifest) { m.Idempotent = true })
	evs := b.waitEnd(b.submit(task("fence-idempotent", "ticketer")))
	assertTrail(t, evs, attemptTrail(
		"executing(create_ticket)", "executed:timeout(create_ticket)",
		"executing(create_ticket)", "executed:ok(create_ticket)", "observed(create_ticket)"))
	if v := last[events.ValidatedData](t, evs, events.TypeValidated); !v.Idempotent {
		t.Errorf("validated = %+v: the trail does not say the tool dedupes", v)
	}
	ex := all(evs, events.TypeExecuting)
	var first, second events.ExecutingData
	if err := ex[0].Decode(&first); err != nil {
		t.Fatal(err)
	}
	if err := ex[1].Decode(&second); err != nil {
		t.Fatal(err)
	}
	if first.OperationID != second.OperationID {
		t.Errorf("the retry names operation %s, the first attempt %s: want the same", second.OperationID, first.OperationID)
	}

	tb.release()
	if outcome := tb.waitLate(t); outcome != "deduped" {
		t.Errorf("the late first attempt was %s, want deduped", outcome)
	}
	effects, _, checks := tb.counts()
	if len(effects) != 1 || effects[0] != first.OperationID || len(checks) != 0 || tb.writes.Load() != 2 {
		t.Errorf("backend: effects %v, checks %d, writes %d; want one effect of %s, no check, 2 writes", effects, len(checks), tb.writes.Load(), first.OperationID)
	}
}

// A reconcile that fences is asked at once, told to fence; its "not
// applied, fenced" lets a second attempt run at once under an operation
// id of its own, while the first still runs at the backend; when the
// first lands late, the fence refuses it.
func TestALateAttemptIsRefusedByAFencingReconcile(t *testing.T) {
	t.Parallel()
	tb := newTicketBackend(false)
	b := fencingSetup(t, tb, func(m *tools.Manifest) {
		m.Reconcile, m.ReconcileFences = "ticket_status", true
	})
	runID := b.submit(task("fence-fencing", "ticketer"))
	evs := b.waitEnd(runID)
	assertTrail(t, evs, attemptTrail(
		"executing(create_ticket)", "executed:timeout(create_ticket)", "reconciled(create_ticket)",
		"executing(create_ticket)", "executed:ok(create_ticket)", "observed(create_ticket)"))
	select {
	case <-tb.late:
		t.Fatal("the first attempt ended before the run did: the test shows nothing")
	default:
	}
	rec := last[events.ReconciledData](t, evs, events.TypeReconciled)
	opID := events.OperationID(runID, "s1c1")
	if rec.Applied || !rec.Fenced || rec.OperationID != opID || rec.MaxEffectDelay != 0 || !strings.Contains(rec.Why, "fenced") {
		t.Errorf("reconciled = %+v; want not applied, fenced, about %s, asked without waiting, saying why", rec, opID)
	}
	second := last[events.ExecutingData](t, evs, events.TypeExecuting)
	if want := events.FencedOperationID(runID, "s1c1", 1); second.Attempt != 2 || second.OperationID != want || want == opID {
		t.Errorf("second attempt = %+v; want attempt 2 under operation %s", second, want)
	}
	if r := idemRecord(t, b, opID); r.State != idempotency.Abandoned {
		t.Errorf("the fenced operation's record is %s, want %s", r.State, idempotency.Abandoned)
	}

	tb.release()
	if outcome := tb.waitLate(t); outcome != "refused" {
		t.Errorf("the late first attempt was %s, want refused by the fence", outcome)
	}
	effects, refused, checks := tb.counts()
	if len(effects) != 1 || effects[0] != second.OperationID {
		t.Errorf("backend effects %v; want exactly one, the second attempt's (%s)", effects, second.OperationID)
	}
	if len(refused) != 1 || refused[0] != opID {
		t.Errorf("backend refused %v; want the first attempt's %s", refused, opID)
	}
	if len(checks) != 1 || !checks[0].fence || checks[0].operationID != opID {
		t.Errorf("reconcile requests %+v; want one, told to fence %s", checks, opID)
	}
}

// plainSetup is a write whose reconcile cannot fence and whose effect may
// land up to delay after its deadline.
func plainSetup(t *testing.T, tb *ticketBackend, delay time.Duration) *bundle {
	return fencingSetup(t, tb, func(m *tools.Manifest) {
		m.Reconcile, m.MaxEffectDelay = "ticket_status", events.Duration(delay)
	})
}

// checkedAfterTheDelay asserts that the one reconcile request came once
// the attempt's deadline plus delay had passed, and that the trail says
// it waited.
func checkedAfterTheDelay(t *testing.T, tb *ticketBackend, evs []events.Event, delay time.Duration) events.ReconciledData {
	t.Helper()
	deadline := last[events.ExecutingData](t, evs, events.TypeExecuting).Deadline
	_, _, checks := tb.counts()
	if len(checks) != 1 || checks[0].fence {
		t.Fatalf("reconcile requests %+v; want one, not told to fence", checks)
	}
	if at := checks[0].at; at.Before(deadline.Add(delay)) {
		t.Errorf("the reconcile was asked %s after the attempt's deadline, before its max_effect_delay %s", at.Sub(deadline), delay)
	}
	rec := last[events.ReconciledData](t, evs, events.TypeReconciled)
	if rec.Fenced || rec.MaxEffectDelay.D() != delay || !strings.Contains(rec.Why, "max_effect_delay") {
		t.Errorf("reconciled = %+v; want not fenced, naming the max_effect_delay %s it waited", rec, delay)
	}
	return rec
}

// A reconcile that cannot fence is asked only after the attempt's
// deadline plus max_effect_delay. Its "not applied" is not trusted with a
// second attempt of a write that does not dedupe: a human decides, and
// the late effect that lands later is the only one.
func TestANotAppliedThatCannotFenceGoesToAHuman(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	tb := newTicketBackend(false)
	b := plainSetup(t, tb, delay)
	runID := b.submit(task("fence-plain-human", "ticketer"))
	b.waitType(runID, events.TypeParked, 1)
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(create_ticket)",
		"executing(create_ticket)", "executed:timeout(create_ticket)", "reconciled(create_ticket)",
		"approval_requested(create_ticket)", "parked"})
	rec := checkedAfterTheDelay(t, tb, evs, delay)
	if rec.Applied || !strings.Contains(rec.Why, "cannot fence") || !strings.Contains(rec.Why, "human") {
		t.Errorf("reconciled = %+v; want not applied, saying it cannot fence and a human decides", rec)
	}
	q := last[events.ApprovalRequestedData](t, evs, events.TypeApprovalRequested)
	if q.Kind != "needs_human" || q.OperationID != events.OperationID(runID, "s1c1") {
		t.Errorf("question = %+v; want needs_human about the attempt's operation", q)
	}
	waitLogged(t, b, "waiting out the tool's max_effect_delay", 1)

	// The first attempt lands later than its tool declared it could.
	tb.release()
	if outcome := tb.waitLate(t); outcome != "created" {
		t.Fatalf("the late first attempt was %s, want created", outcome)
	}
	b.publishApproval(runID, "s1c1", q.ArgsHash, "mark_done", "supervisor@cityops", "ticket T-1 is there")
	assertTrail(t, b.waitEnd(runID), attemptTrail(
		"executing(create_ticket)", "executed:timeout(create_ticket)", "reconciled(create_ticket)",
		"approval_requested(create_ticket)", "parked", "approved:mark_done(create_ticket)", "observed(create_ticket)"))
	if effects, _, _ := tb.counts(); len(effects) != 1 || tb.writes.Load() != 1 {
		t.Errorf("backend: effects %v after %d writes; want one effect of one write (no second attempt)", effects, tb.writes.Load())
	}
}

// The same tool, its first attempt landing late but within its
// max_effect_delay: the reconcile asked after the delay finds it, and the
// call is settled with that one effect.
func TestALateEffectWithinMaxEffectDelayIsFoundByTheReconcile(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	tb := newTicketBackend(false)
	b := plainSetup(t, tb, delay)
	runID := b.submit(task("fence-plain-applied", "ticketer"))
	b.waitType(runID, events.TypeExecuted, 1)
	tb.release()
	if outcome := tb.waitLate(t); outcome != "created" {
		t.Fatalf("the late first attempt was %s, want created", outcome)
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, attemptTrail(
		"executing(create_ticket)", "executed:timeout(create_ticket)", "reconciled(create_ticket)", "observed(create_ticket)"))
	if rec := checkedAfterTheDelay(t, tb, evs, delay); !rec.Applied {
		t.Errorf("reconciled = %+v; want applied", rec)
	}
	if effects, _, _ := tb.counts(); len(effects) != 1 || tb.writes.Load() != 1 {
		t.Errorf("backend: effects %v after %d writes; want one effect of one write", effects, tb.writes.Load())
	}
}
