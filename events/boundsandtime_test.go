package events_test

import (
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
)

// An approval message that decides nothing is recorded by whichever worker
// handles it, even while the run's worker drives the run; that worker does
// not fold the record, it only moves its seq past it (worker/room.go
// makeRoom: r.st.LastSeq += len(records)) and renumbers its own events,
// whose times were minted before the record was stored. Apply's doc says
// the worker's state "is always exactly what a fresh fold would give", and
// README says approval_rejected "changes nothing". A fresh fold used to
// let the record move LastTime forward and then back, and charge the
// overlap twice: a restarted run got more active time than the run had.
func TestAnApprovalRecordDoesNotChangeActiveTime(t *testing.T) {
	t.Parallel()
	draft := call(1, 1, "draft_escalation", `{"request_id":"r-7"}`)
	req := events.ApprovalRequestedData{Kind: "approval", Round: 1, Tool: "draft_escalation", ArgsHash: "h"}
	h := time.Hour
	evs := trail(t,
		ev{at: 0, typ: events.TypeStarted, data: started(`"x"`)},
		ev{at: 1 * time.Second, typ: events.TypeProposed, step: 1, data: proposeCalls(1, 1, draft)},
		ev{at: 2 * time.Second, typ: events.TypeValidated, step: 1, call: "s1c1", tool: "draft_escalation", data: validOK("h")},
		ev{at: 3 * time.Second, typ: events.TypeApprovalRequested, step: 1, call: "s1c1", tool: "draft_escalation", data: req},
		ev{at: 4 * time.Second, typ: events.TypeParked, step: 1, data: events.ParkedData{Awaiting: []string{"s1c1"}}},
		ev{at: h, typ: events.TypeApproved, step: 1, call: "s1c1", tool: "draft_escalation", data: events.ApprovedData{Kind: "approval", Round: 1, Decision: "approve", ArgsHash: "h"}},
		ev{at: h + 1*time.Second, typ: events.TypeExecuting, step: 1, call: "s1c1", tool: "draft_escalation", data: executing(1)},
		// A second approver's click, recorded (seq 8) by another worker
		// while the write ran...
		ev{at: h + 3*time.Second, typ: events.TypeApprovalRejected, step: 1, call: "s1c1", tool: "draft_escalation", data: events.ApprovalRejectedData{Class: "already_decided", ApprovalSeq: 2}},
		// ...before the run's worker stored its executed event, minted
		// earlier and renumbered to follow the record.
		ev{at: h + 2*time.Second, typ: events.TypeExecuted, step: 1, call: "s1c1", tool: "draft_escalation", data: executed(events.ExecOK)},
		ev{at: h + 4*time.Second, typ: events.TypeObserved, step: 1, call: "s1c1", tool: "draft_escalation", data: observed(`{}`)},
	)

	// The run's worker: it folds its own events and steps over the record.
	worker := mustFold(t, evs[:7])
	worker.LastSeq++ // makeRoom
	for i := 8; i < len(evs); i++ {
		if err := worker.Apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	fresh := mustFold(t, evs)

	const want = 8 * time.Second // 0..4s, then h..h+4s
	if worker.Active != want {
		t.Fatalf("precondition: the worker's active time = %v, want %v", worker.Active, want)
	}
	if fresh.Active != worker.Active {
		t.Errorf("a fresh fold's active time = %v, the worker's = %v (want %v): the approval record is charged", fresh.Active, worker.Active, want)
	}
}

// Fold's doc: "It fails on a gap, a foreign event or an undecodable
// payload". An event of another tenant used to be folded into the run as
// long as it carried the run's id (only RunID was compared).
func TestFoldRefusesAnEventOfAnotherTenant(t *testing.T) {
	t.Parallel()
	evs := trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{at: time.Second, typ: events.TypeProposed, step: 1, data: proposeCalls(1, 1, call(1, 1, "lookup_complaints", `{}`))},
	)
	evs[1].Tenant = "othertenant"
	if s, err := events.Fold(evs); err == nil {
		t.Errorf("Fold folded an event of tenant %q into run %s/%s: %+v", evs[1].Tenant, s.Tenant, s.RunID, s.Totals())
	}
}

// DESIGN bounds a run's write actions: the fold counts them as it counts
// tool calls, once per call of a write tool at its first executing event
// (a retry is the same action) or at its dry run preview; reads are not
// write actions.
func TestFoldCountsWriteActionsOncePerCall(t *testing.T) {
	t.Parallel()
	write := func(hash string) events.ValidatedData {
		v := validOK(hash)
		v.Permission = "write"
		return v
	}
	read := validOK("r")
	read.Permission = "read"
	evs := trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{at: time.Second, typ: events.TypeProposed, step: 1, data: proposeCalls(1, 1,
			call(1, 1, "draft", `{"n":1}`), call(1, 2, "lookup", `{}`), call(1, 3, "draft", `{"n":2}`))},
		ev{typ: events.TypeValidated, step: 1, call: "s1c1", tool: "draft", data: write("a")},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c1", tool: "draft", data: executing(1)},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c1", tool: "draft", data: executed(events.ExecTransient)},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c1", tool: "draft", data: executing(2)},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c1", tool: "draft", data: executed(events.ExecOK)},
		ev{typ: events.TypeValidated, step: 1, call: "s1c2", tool: "lookup", data: read},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c2", tool: "lookup", data: executing(1)},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c2", tool: "lookup", data: executed(events.ExecOK)},
		ev{typ: events.TypeValidated, step: 1, call: "s1c3", tool: "draft", data: write("b")},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c3", tool: "draft", data: executed(events.ExecDryRun)},
	)
	s := mustFold(t, evs)
	if s.WriteActions != 2 || s.ToolCalls != 3 {
		t.Errorf("write actions %d of %d calls, want 2 of 3 (a retry is the same action; a preview counts)", s.WriteActions, s.ToolCalls)
	}
	if got := s.Totals().WriteActions; got != 2 {
		t.Errorf("totals' write actions = %d, want 2", got)
	}
}

// A model call another pass at the run paid for in vain (its proposed
// event lost the race to the driver's) is recorded as discarded: its
// tokens and cost count toward the run's totals, as a proposed event's
// do, while the run's steps, its decision, its parked state and its
// active time stay what the driver's events make them. The driver steps
// over the record (makeRoom) and charges it (RunState.Charge); a fresh
// fold gives the same state.
func TestADiscardedModelCallIsChargedAndChangesNothingElse(t *testing.T) {
	t.Parallel()
	draft := call(1, 1, "draft_escalation", `{"request_id":"r-7"}`)
	req := events.ApprovalRequestedData{Kind: "approval", Round: 1, Tool: "draft_escalation", ArgsHash: "h"}
	lost := events.DiscardedData{Proposal: "ev-lost", Usage: events.Usage{InputTokens: 300, OutputTokens: 40}, CostUSD: 0.25, LatencyMS: 900}
	evs := trail(t,
		ev{at: 0, typ: events.TypeStarted, data: started(`"x"`)},
		ev{at: 1 * time.Second, typ: events.TypeProposed, step: 1, data: proposeCalls(100, 10, draft)},
		ev{at: 2 * time.Second, typ: events.TypeValidated, step: 1, call: "s1c1", tool: "draft_escalation", data: validOK("h")},
		// The losing pass records its call, with its own clock, late.
		ev{at: 9 * time.Second, typ: events.TypeDiscarded, step: 1, data: lost},
		ev{at: 3 * time.Second, typ: events.TypeApprovalRequested, step: 1, call: "s1c1", tool: "draft_escalation", data: req},
		ev{at: 4 * time.Second, typ: events.TypeParked, step: 1, data: events.ParkedData{Awaiting: []string{"s1c1"}}},
		// Recorded after the run parked: it stays parked.
		ev{at: 20 * time.Second, typ: events.TypeDiscarded, step: 1, data: lost},
	)
	fresh := mustFold(t, evs)
	if !fresh.IsParked {
		t.Error("a discarded record unparked the run")
	}
	if fresh.Usage.InputTokens != 700 || fresh.Usage.OutputTokens != 90 {
		t.Errorf("usage %+v, want the proposed call's 100+10 and the two discarded ones' 300+40 each", fresh.Usage)
	}
	if fresh.CostUSD != 0.5 {
		t.Errorf("cost %v, want the two discarded calls' 0.25 each", fresh.CostUSD)
	}
	if fresh.Steps != 1 || fresh.Current == nil || len(fresh.Current.ToolCalls) != 1 {
		t.Errorf("steps %d, decision %+v: a discarded call is no step and no decision", fresh.Steps, fresh.Current)
	}
	if want := 4 * time.Second; fresh.Active != want {
		t.Errorf("active time %v, want %v: a record's clock is no part of the run's", fresh.Active, want)
	}

	// The driver: it folds its own events and steps over the record,
	// charging it.
	worker := mustFold(t, evs[:3])
	worker.LastSeq++
	worker.Charge(lost)
	for i := 4; i < 6; i++ {
		if err := worker.Apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := worker.Apply(&evs[6]); err != nil {
		t.Fatal(err)
	}
	if worker.Usage != fresh.Usage || worker.CostUSD != fresh.CostUSD || worker.Active != fresh.Active || worker.IsParked != fresh.IsParked {
		t.Errorf("the driver's state (usage %+v, cost %v, active %v, parked %v) differs from a fresh fold's (%+v, %v, %v, %v)",
			worker.Usage, worker.CostUSD, worker.Active, worker.IsParked, fresh.Usage, fresh.CostUSD, fresh.Active, fresh.IsParked)
	}
}
