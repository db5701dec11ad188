package worker_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
)

// Two drivers of one run, each a step's events staged
// (StageEvents, as serve runs on its embedded server). Both ask the model
// for step 1; the model (a real one is not deterministic) proposes the
// same tool with other arguments each time. Driver B stores its decision
// (proposed + validated, flushed before the question's entry is written);
// driver A's append of its own then loses, A reloads and adopt() copies the
// arguments A's discarded decision had into the stored call of the same id
// and tool. A then asks the question about B's call with its own arguments:
// the approver is shown (entry, approval_requested) arguments the trail's
// validated event never held, bound to the hash of the others, and
// approving it ran the others (found by review). adopt now takes over
// arguments only within the same stored proposal.
func TestALosingDecisionsArgumentsAreNotTakenIntoTheWinnersCall(t *testing.T) {
	const (
		argsA = `{"request_id":"SR-10421","reason":"AAAA reason of the losing decision"}`
		argsB = `{"request_id":"SR-10421","reason":"BBBB reason of the stored decision"}`
	)
	var (
		calls     atomic.Int32
		releaseA  = make(chan struct{})
		aParked   = make(chan struct{})
		holdOnce  atomic.Bool
		closeOnce sync.Once
	)
	b := setup(t, options{
		groupCommit: 2, // StageEvents, as `loopgate serve` on its embedded server
		workers:     2,
		agents: map[string]config.Profile{"adopt": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints", "draft_escalation"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"adopt": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			if req.Step > 1 {
				return model.Response{Output: []byte(`{"final_answer":{"summary":"done"}}`), Name: "adopt"}, nil
			}
			if calls.Add(1) == 1 { // driver A: answers once B's decision is stored
				select {
				case <-releaseA:
				case <-time.After(20 * time.Second):
				}
				return model.Response{Output: []byte(`{"tool_calls":[{"tool":"draft_escalation","args":` + argsA + `}]}`), Name: "adopt"}, nil
			}
			return model.Response{Output: []byte(`{"tool_calls":[{"tool":"draft_escalation","args":` + argsB + `}]}`), Name: "adopt"}, nil
		})},
		crash: func(point string) {
			// B, once its proposed+validated are stored, is slow to go on
			// (a GC pause, a busy host) until A has parked the run.
			if point == "after:validated" && holdOnce.CompareAndSwap(false, true) {
				select {
				case <-aParked:
				case <-time.After(20 * time.Second):
				}
			}
		},
	})
	runID := b.submit(task("adopt-1", "adopt"))
	b.waitType(runID, events.TypeStarted, 1)
	for calls.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	// A second driver of the run: a duplicate wake-up (the hand-over's
	// wake-up beside a message whose ack was lost, a frozen worker's
	// redelivered message...).
	if _, err := b.env.JS.Publish(t.Context(), events.ResumeSubject("cityops", runID), nil); err != nil {
		t.Fatal(err)
	}
	b.waitType(runID, events.TypeValidated, 1) // B's decision is stored
	close(releaseA)
	b.waitType(runID, events.TypeParked, 1)
	closeOnce.Do(func() { close(aParked) })

	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	v := last[events.ValidatedData](t, evs, events.TypeValidated)
	q := last[events.ApprovalRequestedData](t, evs, events.TypeApprovalRequested)
	e := pendingEntry(t, b, runID, "s1c1")
	t.Logf("validated args %s hash %s", v.Args, v.ArgsHash)
	t.Logf("approval_requested args %s hash %s", q.Args, q.ArgsHash)
	t.Logf("entry args %s hash %s", e.Args, e.ArgsHash)
	if string(q.Args) != string(v.Args) || string(e.Args) != string(v.Args) {
		// The approver is shown q.Args / e.Args; approving runs v.Args.
		b.publishApproval(runID, "s1c1", e.ArgsHash, "approve", "supervisor@cityops", "ok")
		b.waitEnd(runID)
		var drafts []string
		for _, f := range outboxFiles(t, b.outbox) {
			raw, _ := os.ReadFile(b.outbox + "/" + f)
			drafts = append(drafts, string(raw))
		}
		t.Fatalf("the question shows arguments the stored call does not have:\n validated (what runs): %s\n approval_requested:    %s\n entry (loopgate pending): %s\nthe approved draft written:\n%s",
			v.Args, q.Args, e.Args, strings.Join(drafts, "\n---\n"))
	}
}
