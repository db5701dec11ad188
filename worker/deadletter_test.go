package worker_test

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// A task intake refuses (here: an agent no profile names) while JetStream
// cannot store its rejection is held as a run's write is, not handed back
// a delivery at a time: with two deliveries and a 20ms retry it used to be
// spent in milliseconds, terminated on the last one with nothing recorded,
// and the task was gone.
func TestARefusedTaskWaitsOutAFullStore(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		maxFileStore: 8 << 20,
		layout:       journal.Layout{MaxDeliver: 2},
		retry:        20 * time.Millisecond,
		workers:      1,
	})
	b.stopPool()
	runID := b.submit(task("refused-full-1", "no-such-agent"))
	store := fillStore(t, b.env.JS, 0)
	if err := store.top(); err != nil {
		t.Fatal(err)
	}
	b.startPool()
	waitLogged(t, b, "keeping its message and trying again", 3)
	assertHeld(t, b, journal.StreamWork, journal.ConsumerWorkers, "while the store is full")
	store.purge(t)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"rejected"})
	if rej := last[events.RejectedData](t, evs, events.TypeRejected); rej.Field != "/agent" {
		t.Errorf("rejected on field %q (%s), want /agent", rej.Field, rej.Reason)
	}
	waitWorkStreamEmpty(t, b)
}

// The stop of a task whose last delivery failed too is the last thing its
// message can record, so it is held through an outage as a run's writes
// are: a full store when the worker gave up used to leave the rejection
// unrecorded and terminate the message, and the task was gone.
func TestTheStopOfAPoisonedTaskWaitsOutAFullStore(t *testing.T) {
	t.Parallel()
	var (
		deliveries atomic.Int32
		store      *storeFiller
		full       = make(chan error, 1)
	)
	b := setup(t, options{
		maxFileStore: 8 << 20,
		layout:       journal.Layout{MaxDeliver: 2},
		retry:        20 * time.Millisecond,
		crash: func(point string) {
			if point != "before:started" {
				return
			}
			if deliveries.Add(1) == 2 {
				full <- store.top() // the last delivery fails into a full store
			}
			panic("worker bug before the run starts")
		},
		workers: 1,
	})
	store = fillStore(t, b.env.JS, 4)
	runID := b.submit(task("poison-full-1", "runaway-assistant"))
	if err := <-full; err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "JetStream cannot store or read the stop of a poisoned run", 3)
	if n := workStreamMsgs(t, b); n != 1 {
		t.Fatalf("%d messages in the work stream while the stop cannot be stored, want the task kept", n)
	}
	store.purge(t)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"rejected"})
	rej := last[events.RejectedData](t, evs, events.TypeRejected)
	if !strings.Contains(rej.Reason, "all 2 deliveries") || !strings.Contains(rej.Reason, "worker bug before the run starts") {
		t.Errorf("rejection reason = %q, want the delivery count and the cause", rej.Reason)
	}
	if n := deliveries.Load(); n != 2 {
		t.Errorf("%d deliveries, want 2 (MaxDeliver)", n)
	}
	waitWorkStreamEmpty(t, b)
}

// A task whose workers die on it before it starts is dead-lettered on the
// max-deliveries advisory. When the rejection cannot be stored then (a
// full store), the message stays and the pool tries again until it can:
// the advisory does not come again. The message used to be deleted with
// nothing recorded, and the task was gone.
func TestADeadLetterWaitsOutAFullStore(t *testing.T) {
	t.Parallel()
	var (
		deaths atomic.Int32
		store  *storeFiller
		full   = make(chan error, 1)
	)
	b := setup(t, options{
		maxFileStore: 8 << 20,
		layout:       journal.Layout{MaxDeliver: 2, AckWait: 300 * time.Millisecond},
		retry:        20 * time.Millisecond,
		crash: func(point string) {
			if point != "before:started" {
				return
			}
			switch deaths.Add(1) {
			case 1:
				runtime.Goexit() // the worker's process died on the task
			case 2:
				full <- store.top()
				runtime.Goexit()
			}
		},
		workers: 3,
	})
	store = fillStore(t, b.env.JS, 4)
	runID := b.submit(task("dead-letter-full-1", "runaway-assistant"))
	if err := <-full; err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "JetStream cannot store or read a work message out of deliveries", 3)
	if n := workStreamMsgs(t, b); n != 1 {
		t.Fatalf("%d messages in the work stream while the rejection cannot be stored, want the task kept", n)
	}
	store.purge(t)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"rejected"})
	rej := last[events.RejectedData](t, evs, events.TypeRejected)
	if !strings.Contains(rej.Reason, "in 2 deliveries") || rej.TaskID != "dead-letter-full-1" {
		t.Errorf("rejected %+v, want the task's id and its deliveries", rej)
	}
	waitWorkStreamEmpty(t, b)
	if n := deaths.Load(); n != 2 {
		t.Errorf("%d workers died on the task, want 2 (MaxDeliver)", n)
	}
}

func workStreamMsgs(t *testing.T, b *bundle) uint64 {
	t.Helper()
	s, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// waitWorkStreamEmpty waits until the work stream holds no message.
func waitWorkStreamEmpty(t *testing.T, b *bundle) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for workStreamMsgs(t, b) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the work stream still holds the message")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An approval message whose handler died on every delivery is decided once
// more from the max-deliveries advisory. When that decision cannot be
// stored then (a full store: the question's entry cannot take it), it is
// held and tried again until it can: the advisory does not come again. It
// used to be given up at once (as undecided), and the run stayed parked on
// a question its approver had answered, for an outage that was none of
// the approval's doing.
func TestADeadLetteredApprovalWaitsOutAFullStore(t *testing.T) {
	t.Parallel()
	var (
		calls atomic.Int32
		store *storeFiller
		full  = make(chan error, 1)
	)
	o := oneDraft(t, "drafted")
	o.maxFileStore = 8 << 20
	o.layout = journal.Layout{MaxDeliver: 2, AckWait: 500 * time.Millisecond}
	o.retry = 20 * time.Millisecond
	o.crash = func(point string) {
		if point != "before:decision" {
			return
		}
		switch calls.Add(1) {
		case 1:
			runtime.Goexit() // the first handler is gone, its message unsettled
		case 2:
			full <- store.top() // the advisory's decision meets a full store
		}
	}
	b := setup(t, o)
	store = fillStore(t, b.env.JS, 4)
	runID, q := draftRun(t, b, "dead-approval-full-1")
	seq := b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	if err := <-full; err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "JetStream cannot store or read the decision of an approval message out of deliveries", 3)
	store.purge(t)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	if d := last[events.ApprovedData](t, evs, events.TypeApproved); d.ApprovalSeq != seq {
		t.Errorf("approved by message %d, want %d", d.ApprovalSeq, seq)
	}
}

// A task whose only delivery parked its run and then lost its
// acknowledgement (here its worker dies just after the parked event; a
// failover loses one the same way) runs out of deliveries with no worker
// settling it. The run is idle on its question, so the dead letter removes
// the message and leaves the run parked: it used to stop it as a poison
// message, and the approver's answer then found a finished run. Answered,
// it ends done.
func TestADeadLetterLeavesARunParkedOnAQuestion(t *testing.T) {
	t.Parallel()
	var died atomic.Bool
	o := oneDraft(t, "drafted")
	o.layout = journal.Layout{MaxDeliver: 1, AckWait: 500 * time.Millisecond}
	o.retry = 20 * time.Millisecond
	o.crash = func(point string) {
		if point == "after:parked" && died.CompareAndSwap(false, true) {
			runtime.Goexit() // parked, never acknowledged
		}
	}
	b := setup(t, o)
	runID, q := draftRun(t, b, "parked-dead-letter-1")
	// The task goes from the work stream; the expiry's schedule stays.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.GetLastMsgForSubject(t.Context(), events.TaskSubject("cityops"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task is still in the work stream (%v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	b.publishApproval(runID, "s1c1", q.ArgsHash, "approve", "supervisor@cityops", "ok")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, oneDraftApproved())
	waitLogged(t, b, "work message out of deliveries for a run parked on a question", 1)
}
