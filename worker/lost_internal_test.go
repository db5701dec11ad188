package worker

import (
	"testing"

	"github.com/loopgate/loopgate/events"
)

// A loser's recording of its lost model calls can be cut short by
// another conflict; the run read again then holds some of them as
// discarded events. Only the others may be recorded next, or the run's
// budgets would count a call twice.
func TestLostProposalsLeaveOutCallsAlreadyOnRecord(t *testing.T) {
	t.Parallel()
	r := &run{proposals: []events.DiscardedData{
		{Proposal: "kept", Usage: events.Usage{InputTokens: 1}},
		{Proposal: "recorded", Usage: events.Usage{InputTokens: 2}},
		{Proposal: "unrecorded", Usage: events.Usage{InputTokens: 4}},
	}}
	record, err := events.EncodeData(events.DiscardedData{Proposal: "recorded"})
	if err != nil {
		t.Fatal(err)
	}
	evs := []events.Event{
		{Seq: 1, Type: events.TypeStarted, EventID: "s"},
		{Seq: 2, Type: events.TypeProposed, EventID: "kept"},
		{Seq: 3, Type: events.TypeProposed, EventID: "the other driver's"},
		{Seq: 4, Type: events.TypeDiscarded, EventID: "d", Data: record},
	}
	lost := r.lostProposals(evs)
	if len(lost) != 1 || lost[0].Proposal != "unrecorded" || lost[0].Usage.InputTokens != 4 {
		t.Errorf("lost %+v, want only the call neither proposed nor discarded on record, with its usage", lost)
	}
}
