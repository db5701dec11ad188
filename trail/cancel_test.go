package trail_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/trail"
)

// A cancel of a finished run is recorded after its end (cancel_rejected,
// a record): no problem, and the run's state is as it was. A
// cancel_requested after the end would be a step of a run that is over:
// named.
func TestACancelAfterTheEndIsARecordOnly(t *testing.T) {
	evs := happyRun(t)
	late := evs[len(evs)-1]
	late.Type, late.CallID, late.Tool = events.TypeCancelRejected, "", ""
	late.Data = json.RawMessage(`{"class":"finished","detail":"the run had finished (done): the cancel is ignored","cancel_seq":3}`)
	late.Time = late.Time.Add(time.Hour)
	v := check(renumber(append(evs, late)))
	if len(v.Problems) > 0 || v.End != events.TypeFinished || v.Reason != events.ReasonDone || v.Events != 38 {
		t.Fatalf("verdict %+v: want done, no problem", v)
	}

	evs = happyRun(t)
	late = evs[len(evs)-1]
	late.Type = events.TypeCancelRequested
	late.Data = json.RawMessage(`{"requested_by":{"id":"dev@cityops"},"reason":"late","cancel_seq":4,"received":"2026-11-30T10:00:00Z"}`)
	v = check(renumber(append(evs, late)))
	if len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "(cancel_requested) follows the run's finished event") {
		t.Fatalf("problems %q: want the cancel_requested after the end named", v.Problems)
	}
}

// A run cancelled while parked folds to a finished run that holds the
// cancel, with no time counted while it was parked.
func TestACancelledParkedRunFolds(t *testing.T) {
	evs := happyRun(t)
	var cut int
	for i, e := range evs {
		if e.Type == events.TypeParked {
			cut = i + 1
			break
		}
	}
	parked := evs[cut-1]
	mk := func(typ events.Type, data string, after time.Duration) trail.Stored {
		e := parked
		e.Type, e.CallID, e.Tool, e.Data, e.Time = typ, "", "", json.RawMessage(data), parked.Time.Add(after)
		return e
	}
	evs = renumber(append(evs[:cut:cut],
		mk(events.TypeCancelRequested, `{"requested_by":{"id":"dev@cityops"},"reason":"stop","cancel_seq":5,"received":"2026-11-30T10:00:00Z","parked":true}`, time.Hour),
		mk(events.TypeFinished, `{"reason":"cancelled","detail":"cancelled by dev@cityops: stop","totals":{}}`, time.Hour)))
	v := check(evs)
	if len(v.Problems) > 0 || v.Reason != events.ReasonCancelled || v.Detail != "cancelled by dev@cityops: stop" {
		t.Fatalf("verdict %+v", v)
	}
	var all []events.Event
	for _, e := range evs {
		all = append(all, e.Event)
	}
	st, err := events.Fold(all)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cancel == nil || st.Cancel.RequestedBy.ID != "dev@cityops" || !st.Cancel.Parked || st.Cancel.CancelSeq != 5 {
		t.Errorf("folded cancel %+v", st.Cancel)
	}
	if st.Active >= time.Hour {
		t.Errorf("active %v: the hour parked before the cancel was counted", st.Active)
	}
}
