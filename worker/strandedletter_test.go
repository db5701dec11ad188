package worker_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// A worker dies on a message's last delivery, and no pool is listening
// when JetStream gives the message up: its max-deliveries advisory is core
// NATS, sent once, to nobody (a single `loopgate serve` killed and started
// again after the last ack deadline, or stopping: Stop unsubscribes from
// the advisories first). JetStream never delivers the message again and
// keeps it in the work queue. The next pool must still stop the run (or
// reject the task) and remove the message, not leave the run running for
// ever with nothing to drive it.
func TestAMessageOutOfDeliveriesWhileNoPoolListensIsDeadLettered(t *testing.T) {
	t.Parallel()
	var deaths atomic.Int32
	died := make(chan struct{})
	b := setup(t, options{
		layout: journal.Layout{MaxDeliver: 1, AckWait: 300 * time.Millisecond},
		crash: func(point string) {
			if point == "before:proposed" && deaths.Add(1) == 1 {
				close(died)
				runtime.Goexit() // this worker is gone, its message unsettled
			}
		},
		workers: 1,
	})
	runID := b.submit(task("stranded-1", "runaway-assistant"))
	select {
	case <-died:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker never reached the model")
	}
	b.stopPool() // the process is gone too
	// The message's last ack deadline passes with no pool subscribed:
	// the server sends its advisory to nobody.
	time.Sleep(1500 * time.Millisecond)

	b.startPool() // the process is back
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	ended := false
	for e, err := range b.env.Journal.Watch(ctx, events.RunFilter("cityops", runID)) {
		if err != nil {
			break
		}
		if e.Type == events.TypeFinished {
			ended = true
			break
		}
	}
	if !ended {
		t.Fatalf("run %s did not end: its work message sits in the stream past MaxDeliver (%d messages there) and nothing stops it\nlogs:\n%s",
			runID, workStreamMsgs(t, b), b.logs.String())
	}
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{"started", "finished:error"})
	waitWorkStreamEmpty(t, b)
}
