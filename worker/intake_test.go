package worker_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

func TestMalformedTasksAreRejectedAndTheWorkerGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t, options{workers: 1})

	cases := []struct {
		name      string
		payload   string
		taskID    string // the run id the rejection lands on, if any
		wantField string
		wantIn    string
	}{
		{name: "garbage", payload: "this is not json {", wantField: "", wantIn: "not valid JSON"},
		{name: "missing principal", payload: `{"task_id":"bad-1","tenant":"cityops","agent":"escalation-assistant","input":"x"}`, taskID: "bad-1", wantField: "/principal", wantIn: "required"},
		{name: "unknown agent", payload: `{"task_id":"bad-2","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"nope","input":"x"}`, taskID: "bad-2", wantField: "/agent", wantIn: "unknown agent"},
		{name: "input too big", payload: `{"task_id":"bad-3","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"` + strings.Repeat("x", 20000) + `"}`, taskID: "bad-3", wantField: "/input", wantIn: "over the limit"},
		{name: "wrong tenant", payload: `{"task_id":"bad-4","tenant":"other","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"x"}`, taskID: "bad-4", wantField: "/tenant", wantIn: "does not match"},
		{name: "guest may not run", payload: `{"task_id":"bad-5","tenant":"cityops","principal":{"id":"visitor","roles":["guest"]},"agent":"escalation-assistant","input":"x"}`, taskID: "bad-5", wantField: "/principal/roles", wantIn: "may run"},
		{name: "a cost budget its model has no price for", payload: `{"task_id":"bad-cost","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"x","limits":{"max_cost_usd":0.5}}`, taskID: "bad-cost", wantField: "/limits/max_cost_usd", wantIn: "no pricing entry"},
		{name: "task too big", payload: `{"task_id":"bad-big","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"` + strings.Repeat("x", 70000) + `"}`, taskID: "bad-big", wantField: "", wantIn: "over the limit of 65536"},
		{name: "a fraction for a count", payload: `{"limits":{"max_steps":3.0},"task_id":"bad-frac","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"x"}`, taskID: "bad-frac", wantField: "/limits/max_steps", wantIn: "whole number"},
		{name: "a duration past its range", payload: `{"limits":{"max_active":"9999999999h"},"task_id":"bad-dur","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"x"}`, taskID: "bad-dur", wantField: "/limits/max_active", wantIn: "usable duration"},
		{name: "looser limits", payload: `{"task_id":"bad-6","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"x","limits":{"max_steps":100}}`, taskID: "bad-6", wantField: "/limits/max_steps", wantIn: "tighten"},
		{name: "smuggled field", payload: `{"task_id":"bad-7","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator","admin"]},"agent":"escalation-assistant","input":"x","sudo":true}`, taskID: "bad-7", wantField: "/sudo", wantIn: "not allowed"},
	}
	for _, c := range cases {
		ack := b.publishRaw("cityops", []byte(c.payload), "")
		runID := events.RejectedRunID("cityops", ack.Sequence)
		if c.taskID != "" {
			runID = events.RunID("cityops", c.taskID)
		}
		evs := b.waitEnd(runID)
		if len(evs) != 1 || evs[0].Type != events.TypeRejected {
			t.Fatalf("%s: trail %v, want one rejected event", c.name, trail(t, evs))
		}
		var rej events.RejectedData
		_ = evs[0].Decode(&rej)
		if rej.Field != c.wantField || !strings.Contains(rej.Reason, c.wantIn) {
			t.Errorf("%s: rejected field %q reason %q, want field %q and a reason containing %q", c.name, rej.Field, rej.Reason, c.wantField, c.wantIn)
		}
	}

	// The worker is still there, and the next good task runs.
	good := b.submit(task("good-after-bad", "escalation-assistant"))
	b.autoApprove(good, "supervisor@cityops", "approve", "")
	evs := b.waitEnd(good)
	if got := trail(t, evs); got[len(got)-1] != "finished:done" {
		t.Fatalf("good task after bad ones: %v", got)
	}
	// Rejected messages were terminated, not left to be redelivered: the
	// work queue drains (the good task's ack may trail its finished event).
	consumerSettled(t, b, journal.StreamWork, journal.ConsumerWorkers)
}

func TestRepublishingATaskYieldsOneRun(t *testing.T) {
	t.Parallel()
	b := setup(t, options{workers: 1}) // one worker: messages are handled in order
	tk := task("once", "escalation-assistant")
	runID := b.submit(tk)
	b.autoApprove(runID, "supervisor@cityops", "approve", "")
	// Within the duplicate window JetStream drops the copy outright.
	payload, _ := json.Marshal(tk)
	if ack := b.publishRaw("cityops", payload, tk.TaskID); !ack.Duplicate {
		t.Errorf("republish with the same Nats-Msg-Id was not flagged duplicate")
	}
	first := b.waitEnd(runID)
	// A copy that escapes deduplication (another msg id, or after the
	// window) finds the finished run and starts nothing.
	b.publishRaw("cityops", payload, "")
	b.autoApprove(b.submit(task("marker", "escalation-assistant")), "supervisor@cityops", "approve", "")
	b.waitEnd(events.RunID("cityops", "marker"))
	again, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(first) || len(all(again, events.TypeStarted)) != 1 {
		t.Fatalf("republished task changed its run: %d events before, %d after", len(first), len(again))
	}
	if files := outboxFiles(t, b.outbox); len(files) != 6 {
		t.Errorf("outbox has %d drafts, want 3 per run for 2 runs", len(files))
	}
}

// A run's own task message, redelivered after its worker died, to a pool
// whose config now refuses the task at intake (an operator lowered
// max_input_bytes meanwhile), goes on with the run from the task it
// started with. Refused as an invalid copy, the message would be
// terminated and the started run left with nothing to drive it.
func TestATaskRefusedOnRedeliveryGoesOnWithItsStartedRun(t *testing.T) {
	t.Parallel()
	died := make(chan struct{})
	var crashed atomic.Bool
	b := setup(t, options{
		workers: 1,
		layout:  journal.Layout{AckWait: 500 * time.Millisecond},
		crash: func(point string) {
			if point == "after:started" && crashed.CompareAndSwap(false, true) {
				close(died)
				runtime.Goexit() // this worker is gone, the task unsettled
			}
		},
	})
	runID := b.submit(task("refused-on-redelivery", "escalation-assistant"))
	<-died
	b.stopPool()
	b.cfg.Intake.MaxInputBytes = 4 // the task's input is longer
	b.startPool()
	b.autoApprove(runID, "supervisor@cityops", "approve", "")

	evs := b.waitEnd(runID)
	got := trail(t, evs)
	if got[len(got)-1] != "finished:done" || len(all(evs, events.TypeStarted)) != 1 {
		t.Fatalf("trail %v, want one started and finished:done", got)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 3 {
		t.Errorf("outbox has %d drafts, want 3", len(files))
	}
	if !strings.Contains(b.logs.String(), "task refused at intake names a started run") {
		t.Errorf("the refusal of the copy was not logged:\n%s", b.logs.String())
	}
	// A task that never started is still refused by the new bound.
	refused := b.submit(task("refused-fresh", "escalation-assistant"))
	if evs := b.waitEnd(refused); len(evs) != 1 || evs[0].Type != events.TypeRejected {
		t.Fatalf("a new task over the bound: trail %v, want one rejected event", trail(t, evs))
	}
	consumerSettled(t, b, journal.StreamWork, journal.ConsumerWorkers)
}
