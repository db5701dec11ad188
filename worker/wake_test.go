package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// Every question leaves a schedule for its expiry, and JetStream fires it
// even when the question was answered long before: a day after a run's
// end, each of its approvals wakes it once more. Such a wake-up reads the
// run's last event, sees the end, and stops there; reading the whole run
// for each of them would cost, an approval TTL after every busy hour, as
// much as the runs did.
func TestAWakeUpAfterTheRunsEndReadsOnlyItsLastEvent(t *testing.T) {
	t.Parallel()
	m := fakeTool("quick_write", tools.Write, false)
	m.ApprovalTTL = events.Duration(time.Second)
	b := setup(t, options{
		tools:       []tools.Manifest{m},
		builtins:    tools.Builtins{"quick_write": func(context.Context, tools.Call) (any, error) { return "ok", nil }},
		roles:       writerRoles("quick_write"),
		agents:      map[string]config.Profile{"writer": profile("quick_write")},
		scripts:     map[string]model.Model{"writer": scripted(t, `{"tool_calls":[{"tool":"quick_write","args":{"n":1}}]}`, `{"final_answer":{"summary":"written"}}`)},
		coldJournal: true, // a run in the cache is read with one get anyway
	})
	runID := b.submit(task("wake-after-end", "writer"))
	b.autoApprove(runID, "supervisor@cityops", "approve", "")
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, gatedStep("quick_write"), []string{"proposed:final", "finished:done"}))

	schedule := journal.SchedulesPrefix + ".cityops." + runID + ".s1c1"
	work, err := b.env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := work.GetLastMsgForSubject(t.Context(), schedule); err != nil {
		t.Fatalf("the answered question's expiry schedule: %v (want it still there: the test needs it to fire after the end)", err)
	}
	gets, err := b.env.Conn.SubscribeSync("$JS.API.STREAM.MSG.GET." + journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	consumers, err := b.env.Conn.SubscribeSync("$JS.API.CONSUMER.CREATE." + journal.StreamEvents + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}

	// The schedule fires (it is purged as its wake-up is stored), and the
	// wake-up is delivered and settled.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := work.GetLastMsgForSubject(t.Context(), schedule)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expiry schedule did not fire: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		info, err := work.Consumer(t.Context(), journal.ConsumerWorkers)
		if err != nil {
			t.Fatal(err)
		}
		ci, err := info.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wake-up was not settled: %d pending, %d unacknowledged", ci.NumPending, ci.NumAckPending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := b.env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := gets.Pending(); n != 1 {
		t.Errorf("the wake-up after the end made %d message gets on %s, want 1 (the last event)", n, journal.StreamEvents)
	}
	if n, _, _ := consumers.Pending(); n != 0 {
		t.Errorf("the wake-up after the end made %d consumers on %s, want none", n, journal.StreamEvents)
	}
	after, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil || len(after) != len(evs) {
		t.Errorf("after the wake-up the run has %d events (%v), want the same %d", len(after), err, len(evs))
	}
}
