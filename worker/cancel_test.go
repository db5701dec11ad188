package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// publishCancel publishes a cancel of runID on its subject, as any NATS
// client would, and returns its sequence in LOOPGATE_CANCELS.
func (b *bundle) publishCancel(runID string, payload []byte) uint64 {
	b.t.Helper()
	ack, err := b.env.JS.Publish(b.t.Context(), events.CancelSubject("cityops", runID), payload)
	if err != nil {
		b.t.Fatalf("publish cancel: %v", err)
	}
	return ack.Sequence
}

func cancelPayload(t testing.TB, runID, by, reason string) []byte {
	t.Helper()
	raw, err := json.Marshal(events.CancelMessage{RunID: runID, RequestedBy: events.Requester{ID: by}, Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// cancelRoles lets supervisors cancel one-draft runs; interns cancel
// nothing.
func cancelRoles() map[string]config.Role {
	return map[string]config.Role{"supervisor": {Approve: []string{"draft_escalation"}, Cancel: []string{"one-draft", "slow"}}}
}

// slowRead is a read tool that blocks until its context ends, and says
// when it has begun and how its context ended.
type slowRead struct {
	began chan struct{}
	ended chan error // its context's error
}

func newSlowRead() *slowRead {
	return &slowRead{began: make(chan struct{}, 1), ended: make(chan error, 1)}
}

func (s *slowRead) options(t *testing.T) options {
	m := fakeTool("slow_read", tools.Read, false)
	m.Timeout = events.Duration(30 * time.Second)
	return options{
		tools: []tools.Manifest{m},
		builtins: tools.Builtins{"slow_read": func(ctx context.Context, _ tools.Call) (any, error) {
			s.began <- struct{}{}
			<-ctx.Done()
			s.ended <- ctx.Err()
			return nil, ctx.Err()
		}},
		roles: map[string]config.Role{
			"operator":   {Call: []string{"slow_read"}},
			"supervisor": {Cancel: []string{"slow"}},
		},
		agents: map[string]config.Profile{"slow": profile("slow_read")},
		scripts: map[string]model.Model{"slow": scripted(t,
			`{"tool_calls":[{"tool":"slow_read","args":{}}]}`,
			`{"final_answer":{"summary":"read"}}`)},
	}
}

// A running run's cancel stops it at its next boundary: the read tool in
// flight has its context cancelled (not its 30 s deadline), its outcome
// is never recorded, and the run finishes cancelled, naming who asked,
// why, and the call left in flight.
func TestCancelStopsARunningRunAndCancelsTheToolInFlight(t *testing.T) {
	t.Parallel()
	s := newSlowRead()
	b := setup(t, s.options(t))
	runID := b.submit(task("cancel-running-1", "slow"))
	<-s.began
	seq := b.publishCancel(runID, cancelPayload(t, runID, "dev@cityops", "wrong complaints"))
	select {
	case err := <-s.ended:
		if err != context.Canceled {
			t.Errorf("the tool's context ended with %v, want context.Canceled (cancelled, not past its deadline)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the tool in flight was not cancelled\nlogs:\n%s", b.logs.String())
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(slow_read)", "executing(slow_read)", "cancel_requested", "finished:cancelled"})
	req := last[events.CancelRequestedData](t, evs, events.TypeCancelRequested)
	if req.RequestedBy.ID != "dev@cityops" || req.Reason != "wrong complaints" || req.CancelSeq != seq || req.Parked {
		t.Errorf("cancel_requested = %+v, want dev@cityops's running cancel %d", req, seq)
	}
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	for _, want := range []string{"cancelled by dev@cityops: wrong complaints", "call s1c1 (slow_read) was in flight", "its outcome is unknown"} {
		if !strings.Contains(fin.Detail, want) {
			t.Errorf("finished detail %q does not say %q", fin.Detail, want)
		}
	}
}

// A cancel that comes while the model is deciding stops the run once the
// model answers: its decision is not stored (another event came first),
// its usage is charged (discarded), and no tool runs.
func TestCancelWhileTheModelDecidesStopsTheRunBeforeAnyCall(t *testing.T) {
	t.Parallel()
	s := newSlowRead()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	o := s.options(t)
	decide := scripted(t, `{"tool_calls":[{"tool":"slow_read","args":{}}]}`)
	o.scripts["slow"] = model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
		entered <- struct{}{}
		<-release
		return decide.Propose(ctx, req)
	})
	b := setup(t, o)
	runID := b.submit(task("cancel-model-1", "slow"))
	<-entered
	b.publishCancel(runID, cancelPayload(t, runID, "supervisor@cityops", "duplicate task"))
	b.waitType(runID, events.TypeCancelRequested, 1)
	close(release)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "cancel_requested", "discarded", "finished:cancelled"})
	if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Detail != "cancelled by supervisor@cityops: duplicate task" {
		t.Errorf("finished detail %q", fin.Detail)
	}
	select {
	case <-s.began:
		t.Error("the tool ran after the cancel")
	default:
	}
}

// A parked run is finished at once, its question withdrawn: an approval
// sent afterwards is recorded as not_pending, and the write never runs.
func TestCancelFinishesAParkedRunAndALaterApprovalIsNotPending(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.roles = cancelRoles()
	b := setup(t, o)
	runID, q := draftRun(t, b, "cancel-parked-1")
	seq := b.publishCancel(runID, cancelPayload(t, runID, "supervisor@cityops", "no longer needed"))
	b.waitEnd(runID)
	if e := pendingEntry(t, b, runID, "s1c1"); e.State != "withdrawn" {
		t.Errorf("the question's entry is %q, want withdrawn", e.State)
	}
	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	b.waitType(runID, events.TypeApprovalRejected, 1)
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	checkEnvelopes(t, runID, evs)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
		"cancel_requested", "finished:cancelled", "approval_rejected:not_pending(draft_escalation)"})
	req := last[events.CancelRequestedData](t, evs, events.TypeCancelRequested)
	if !req.Parked || req.CancelSeq != seq {
		t.Errorf("cancel_requested = %+v, want the parked run's cancel %d", req, seq)
	}
	if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Detail != "cancelled by supervisor@cityops: no longer needed" {
		t.Errorf("finished detail %q", fin.Detail)
	}
	consumerSettled(t, b, "LOOPGATE_WORK", "loopgate-workers")
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Errorf("the write ran after the run was cancelled: the outbox holds %v", files)
	}
}

// A finished run ignores a cancel, and records it after its end.
func TestCancelOfAFinishedRunIsIgnoredAndRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		agents:  map[string]config.Profile{"quick": profile("lookup_complaints")},
		scripts: map[string]model.Model{"quick": scripted(t, `{"final_answer":{"summary":"nothing to do"}}`)},
	})
	runID := b.submit(task("cancel-finished-1", "quick"))
	b.waitEnd(runID)
	b.publishCancel(runID, cancelPayload(t, runID, "dev@cityops", "too late"))
	e := b.waitType(runID, events.TypeCancelRejected, 1)
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	checkEnvelopes(t, runID, evs)
	assertTrail(t, evs, []string{"started", "proposed:final", "finished:done", "cancel_rejected:finished"})
	var d events.CancelRejectedData
	if err := e.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.RequestedBy == nil || d.RequestedBy.ID != "dev@cityops" || d.Reason != "too late" || !strings.Contains(d.Detail, "the run had finished (done)") {
		t.Errorf("cancel_rejected = %+v", d)
	}
}

// A cancel from someone the policy does not allow is refused and recorded,
// and the run goes on to its end; so is a malformed cancel, naming the
// field, and the worker keeps working.
func TestCancelsThatMayNotStopTheRunAreRecordedAndTheRunGoesOn(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.roles = cancelRoles()
	b := setup(t, o)
	runID, _ := draftRun(t, b, "cancel-refused-1")
	b.publishCancel(runID, cancelPayload(t, runID, "intern@cityops", "let me stop it"))
	b.waitType(runID, events.TypeCancelRejected, 1)
	b.publishCancel(runID, []byte(`{"run_id":"`+runID+`","requested_by":{"id":"dev@cityops"}}`))
	b.waitType(runID, events.TypeCancelRejected, 2)
	b.publishCancel(runID, cancelPayload(t, "other-run", "dev@cityops", "wrong subject"))
	b.waitType(runID, events.TypeCancelRejected, 3)
	b.publishCancel(runID, []byte(`not json`))
	b.waitType(runID, events.TypeCancelRejected, 4)
	b.autoApprove(runID, "supervisor@cityops", "approve", "fine")
	evs := b.waitEnd(runID)
	want := concat([]string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
		"cancel_rejected:not_authorized", "cancel_rejected:invalid", "cancel_rejected:invalid", "cancel_rejected:invalid",
		"approved:approve(draft_escalation)", "executing(draft_escalation)", "executed:ok(draft_escalation)", "observed(draft_escalation)",
		"proposed:final", "finished:done"})
	assertTrail(t, evs, want)
	rejected := all(evs, events.TypeCancelRejected)
	details := make([]string, len(rejected))
	for i, e := range rejected {
		var d events.CancelRejectedData
		if err := e.Decode(&d); err != nil {
			t.Fatal(err)
		}
		details[i] = d.Detail
	}
	for i, want := range []string{"intern@cityops may not cancel this run", "reason", "run_id: the message names run other-run", "not valid JSON"} {
		if !strings.Contains(details[i], want) {
			t.Errorf("cancel_rejected %d says %q, want it to name %q", i+1, details[i], want)
		}
	}
	consumerSettled(t, b, "LOOPGATE_CANCELS", "loopgate-cancels")
}

// A cancel published while no worker runs waits in its stream and stops
// the run once a pool starts.
func TestCancelPublishedWhileNoWorkerRunsArrivesWhenAPoolStarts(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.roles = cancelRoles()
	b := setup(t, o)
	runID, _ := draftRun(t, b, "cancel-offline-1")
	b.stopPool()
	b.publishCancel(runID, cancelPayload(t, runID, "dev@cityops", "sent while the workers were down"))
	b.startPool()
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(draft_escalation)", "approval_requested(draft_escalation)", "parked",
		"cancel_requested", "finished:cancelled"})
	if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Detail != "cancelled by dev@cityops: sent while the workers were down" {
		t.Errorf("finished detail %q", fin.Detail)
	}
}

// A write in flight when its run is cancelled has its context cancelled
// too; its outcome is never recorded (executing without executed), and
// the finished event names the operation whose outcome is unknown. The
// run does not run it again.
func TestCancelOfARunWhoseWriteIsInFlightLeavesItsOutcomeUnknownAndSaysSo(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	began, ended := make(chan struct{}, 1), make(chan error, 1)
	m := fakeTool("file_ticket", tools.Write, false)
	m.Approval = tools.ApprovalNone
	m.Timeout = events.Duration(30 * time.Second)
	b := setup(t, options{
		tools: []tools.Manifest{m},
		builtins: tools.Builtins{"file_ticket": func(ctx context.Context, _ tools.Call) (any, error) {
			runs.Add(1)
			began <- struct{}{}
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		}},
		roles:  map[string]config.Role{"operator": {Call: []string{"file_ticket"}}},
		agents: map[string]config.Profile{"filer": profile("file_ticket")},
		scripts: map[string]model.Model{"filer": scripted(t,
			`{"tool_calls":[{"tool":"file_ticket","args":{"n":1}}]}`,
			`{"final_answer":{"summary":"filed"}}`)},
	})
	runID := b.submit(task("cancel-write-1", "filer"))
	<-began
	b.publishCancel(runID, cancelPayload(t, runID, "dev@cityops", "filed by hand"))
	select {
	case err := <-ended:
		if err != context.Canceled {
			t.Errorf("the write's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the write in flight was not cancelled\nlogs:\n%s", b.logs.String())
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(file_ticket)", "executing(file_ticket)", "cancel_requested", "finished:cancelled"})
	ex := last[events.ExecutingData](t, evs, events.TypeExecuting)
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	want := "cancelled by dev@cityops: filed by hand; call s1c1 (file_ticket) was in flight (operation " + ex.OperationID + ", attempt 1): its outcome is unknown, and it is not retried"
	if fin.Detail != want {
		t.Errorf("finished detail:\n got  %q\n want %q", fin.Detail, want)
	}
	consumerSettled(t, b, "LOOPGATE_WORK", "loopgate-workers")
	if n := runs.Load(); n != 1 {
		t.Errorf("the write ran %d times, want once (never again after the cancel)", n)
	}
}

// A call in flight in another process than the one that handled the
// cancel is cancelled too, by the halt notice: pool A runs the read and
// never handles a cancel (its hook fails every try), pool B handles it.
// Without the notice the read would run to its 30 s deadline.
func TestCancelHandledByAnotherPoolCancelsTheToolInFlight(t *testing.T) {
	t.Parallel()
	s := newSlowRead()
	o := s.options(t)
	o.retry = 20 * time.Millisecond
	o.layout = journal.Layout{MaxDeliver: 100} // pool A refuses each delivery it gets
	o.crash = func(point string) {
		if point == "before:cancel" {
			panic("this pool does not handle cancels")
		}
	}
	b := setup(t, o)
	runID := b.submit(task("cancel-elsewhere-1", "slow"))
	<-s.began
	b.nextCrash = func(string) {}
	b.secondPool()
	b.publishCancel(runID, cancelPayload(t, runID, "dev@cityops", "stop it everywhere"))
	select {
	case err := <-s.ended:
		if err != context.Canceled {
			t.Errorf("the tool's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the tool in flight in the other pool was not cancelled\nlogs:\n%s", b.logs.String())
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "proposed", "validated:ok(slow_read)", "executing(slow_read)", "cancel_requested", "finished:cancelled"})
	if !strings.Contains(b.logs.String(), "calls of a run cancelled by another pool were cancelled here") {
		t.Errorf("the tool was not cancelled by the halt notice\nlogs:\n%s", b.logs.String())
	}
}
