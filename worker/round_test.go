package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// An approval message does not name the round it answers. A second
// decision sent while round 1 of a needs_human question was pending (the
// approver sent it again after `approve` timed out on --wait, or two
// supervisors both answered) and decided only after the run asked round 2 (its lane held by another run's decision; in another
// pool, its handler slow or killed and the message redelivered) answers
// round 2, a question no human has seen, and the write ran a third time
// (found by review). The entry now holds the last message on the call's
// subject when its round was asked; an earlier one is not_pending.
//
// Here one pool with one lane: X (retry, run R), Z (approve, run S), Y
// (retry again, run R) are queued in that order; Z's decision is slow
// (held until R has asked round 2), so Y is decided after round 2 exists.
func TestAnAnswerSentBeforeARoundWasAskedDoesNotDecideIt(t *testing.T) {
	t.Parallel()
	var runs, decisions atomic.Int32
	round2 := make(chan struct{})
	m, fns := ungated("create_ticket", &runs, func(ctx context.Context, c tools.Call) (any, error) {
		if runs.Load() <= 2 {
			<-ctx.Done() // times out: the outcome is unknown
			return nil, ctx.Err()
		}
		return map[string]string{"ticket": "T-1"}, nil
	})
	m.Timeout = events.Duration(300 * time.Millisecond)
	o := oneDraft(t, "drafted")
	o.tools, o.builtins, o.roles = []tools.Manifest{m}, fns, writerRoles("create_ticket")
	o.agents["ticketer"] = profile("create_ticket")
	o.scripts["ticketer"] = scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":1}}]}`, `{"final_answer":{"summary":"ok"}}`)
	o.workers = 1 // one lane: R's and S's approvals queue behind each other
	o.crash = func(point string) {
		if point == "before:decision" && decisions.Add(1) == 2 {
			// Z's decision is slow: it ends once R has asked round 2.
			select {
			case <-round2:
			case <-time.After(15 * time.Second):
			}
		}
	}
	b := setup(t, o)

	r := b.submit(task("round-r", "ticketer"))
	b.waitType(r, events.TypeParked, 1)
	q := last[events.ApprovalRequestedData](t, []events.Event{b.waitType(r, events.TypeApprovalRequested, 1)}, events.TypeApprovalRequested)
	s, sq := draftRun(t, b, "round-s")

	x := b.publishApproval(r, "s1c1", q.ArgsHash, "retry", "supervisor@cityops", "checked: no ticket exists")
	b.publishApproval(s, "s1c1", sq.ArgsHash, "approve", "supervisor@cityops", "ok")
	y := b.publishApproval(r, "s1c1", q.ArgsHash, "retry", "supervisor@cityops", "checked: no ticket exists (sent again)")

	b.waitType(r, events.TypeParked, 2) // round 2 asked: no human has seen it
	close(round2)

	// What did Y do?
	e := b.waitFor(r, "a record of the second message", func(e events.Event) bool {
		if e.Type != events.TypeApproved && e.Type != events.TypeApprovalRejected {
			return false
		}
		var d struct {
			ApprovalSeq uint64 `json:"approval_seq"`
		}
		_ = e.Decode(&d)
		return d.ApprovalSeq == y
	})
	if e.Type == events.TypeApproved {
		d := last[events.ApprovedData](t, []events.Event{e}, events.TypeApproved)
		b.waitEnd(r)
		t.Fatalf("round %d of the question was decided (%s) by message %d, published while only round 1 was pending (round 1 decided by message %d); the write ran %d times, want 2",
			d.Round, d.Decision, y, x, runs.Load())
	}
	b.publishApproval(r, "s1c1", q.ArgsHash, "abandon", "supervisor@cityops", "two unknown outcomes: a human will check")
	b.waitEnd(r)
	if n := runs.Load(); n != 2 {
		t.Errorf("the write ran %d times, want 2", n)
	}
}
