package trail_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/trail"
)

// happyRun is the CityOps happy path's 37 events as the stream stored them
// (events/testdata, shared with the fold benchmark), each with the subject
// and Nats-Msg-Id loopgate gives it.
func happyRun(t *testing.T) []trail.Stored {
	t.Helper()
	data, err := os.ReadFile("../events/testdata/happy_run.json")
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		t.Fatal(err)
	}
	out := make([]trail.Stored, len(evs))
	for i, e := range evs {
		out[i] = trail.Stored{Event: e, StreamSeq: uint64(100 + i), Subject: e.Subject(), MsgID: e.MsgID()}
	}
	return out
}

func check(evs []trail.Stored) trail.Verdict {
	c := trail.New(evs[0].Tenant, evs[0].RunID)
	for _, e := range evs {
		c.Add(e)
	}
	return c.Verdict()
}

// renumber gives evs the seqs, subjects and message ids of a trail in
// that order, as loopgate would have stored it.
func renumber(evs []trail.Stored) []trail.Stored {
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
		evs[i].EventID = uuid.Must(uuid.NewV7()).String()
		evs[i].Subject, evs[i].MsgID = evs[i].Event.Subject(), evs[i].Event.MsgID()
	}
	return evs
}

// attempt is an executing event and, unless status is "", its executed
// event, for call of the run of like.
func attempt(t *testing.T, like trail.Stored, call string, n int, status string) []trail.Stored {
	t.Helper()
	mk := func(typ events.Type, data any) trail.Stored {
		raw, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		e := like
		e.Type, e.CallID, e.Tool, e.Data = typ, call, "draft_escalation", raw
		return e
	}
	out := []trail.Stored{mk(events.TypeExecuting, events.ExecutingData{
		OperationID: events.OperationID(like.RunID, call), Attempt: n, Deadline: like.Time.Add(time.Duration(n) * time.Second), ArgsHash: "sha256:x"})}
	if status != "" {
		out = append(out, mk(events.TypeExecuted, events.ExecutedData{Status: status, OperationID: events.OperationID(like.RunID, call), Attempt: n}))
	}
	return out
}

func TestTheHappyPathsTrailHasNoProblem(t *testing.T) {
	v := check(happyRun(t))
	if len(v.Problems) > 0 || v.End != events.TypeFinished || v.Reason != events.ReasonDone || v.Events != 37 || v.Parked {
		t.Fatalf("verdict %+v", v)
	}
	drafts := 0
	for _, c := range v.Calls {
		if c.Tool != "draft_escalation" {
			continue
		}
		drafts++
		if !c.Write || c.FreshOK != 1 || c.Approved != 1 || c.Observed != 1 || c.Executing != 1 || c.TookEffect() != 1 {
			t.Errorf("draft call %+v: want a write approved, run and observed once", *c)
		}
	}
	if drafts != 3 || len(v.Calls) != 5 {
		t.Errorf("%d calls, %d drafts: want 5 and 3", len(v.Calls), drafts)
	}
}

// An approval message that came after the run ended is recorded as its
// rejection, after finished: the audit keeps it, and it breaks nothing.
func TestARejectedAnswerAfterTheEndIsNoProblem(t *testing.T) {
	evs := happyRun(t)
	late := evs[len(evs)-1]
	late.Type, late.CallID, late.Tool = events.TypeApprovalRejected, "s1c1", "draft_escalation"
	late.Data = json.RawMessage(`{"class":"not_pending","detail":"the run has finished"}`)
	late.Time = late.Time.Add(time.Hour)
	evs = renumber(append(evs, late))
	v := check(evs)
	if len(v.Problems) > 0 || v.End != events.TypeFinished || v.Reason != events.ReasonDone || v.Events != 38 {
		t.Fatalf("verdict %+v: want done, no problem", v)
	}
	var before, after []events.Event
	for _, e := range evs {
		after = append(after, e.Event)
	}
	before = after[:len(after)-1]
	sb, err := events.Fold(before)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := events.Fold(after)
	if err != nil {
		t.Fatal(err)
	}
	if sa.Active != sb.Active || sa.Finished == nil {
		t.Errorf("active time %v after the late answer, %v at the end: the hour after the end was counted", sa.Active, sb.Active)
	}
}

// A trail cut short at a park is a run that goes on: no end, parked, no
// problem.
func TestARunThatGoesOnIsUnfinishedNotBroken(t *testing.T) {
	v := check(happyRun(t)[:15]) // … approval_requested, parked
	if len(v.Problems) > 0 || v.Finished() || !v.Parked || v.Events != 15 {
		t.Fatalf("verdict %+v: want unfinished, parked, no problem", v)
	}
}

func TestBrokenTrailsAreNamed(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(t *testing.T, evs []trail.Stored) []trail.Stored
		wants []string
	}{
		{"a gap", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			return slices.Delete(evs, 9, 10)
		}, []string{"event seq 11 (stream seq 110, observed) follows seq 9: a gap"}},
		{"an event stored twice", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			return slices.Insert(evs, 5, evs[4])
		}, []string{"event seq 5 (stream seq 104, executed) again after seq 5: a duplicate", "event 5 has event id"}},
		{"a foreign message id", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			evs[3].MsgID = "t-1"
			return evs
		}, []string{`event 4 has Nats-Msg-Id "t-1"`}},
		{"the wrong subject", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			evs[3].Subject = events.EventSubject("cityops", evs[3].RunID, events.TypeExecuted)
			return evs
		}, []string{"event 4 stored on loopgate.events.cityops." + evs0RunID + ".executed"}},
		{"not a UUID v7", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			evs[2].EventID = uuid.NewString() // v4
			return evs
		}, []string{"event 3 has event id"}},
		{"another run's event", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			evs[6].RunID = events.RunID("cityops", "other")
			return evs
		}, []string{"event 7 belongs to cityops/" + events.RunID("cityops", "other")}},
		{"no started first", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			return renumber(evs[1:])
		}, []string{"first event is proposed, not started"}},
		{"an event after finished", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			return renumber(append(evs, evs[1]))
		}, []string{"event 38 (proposed) follows the run's finished event"}},
		{"an answer after finished other than its rejection", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			approved := slices.IndexFunc(evs, func(e trail.Stored) bool { return e.Type == events.TypeApproved })
			return renumber(append(evs, evs[approved]))
		}, []string{"event 38 (approved) follows the run's finished event"}},
		{"a write that took effect twice", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			// s3c1 ran ok (events 17, 18); a second attempt runs it again.
			return renumber(slices.Insert(evs, 18, attempt(t, evs[17], "s3c1", 2, events.ExecOK)...))
		}, []string{"call s3c1 (draft_escalation, operation " + events.OperationID(evs0RunID, "s3c1") + ") took effect 2 times"}},
		{"a write begun again while its outcome was unknown", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			// Attempt 1 of s3c1 ends unknown; attempt 2 begins with nothing
			// said about whether 1 took effect.
			evs = slices.Delete(evs, 16, 18) // s3c1's executing and executed
			at := slices.Concat(attempt(t, evs[16], "s3c1", 1, events.ExecUnknown), attempt(t, evs[16], "s3c1", 2, events.ExecOK))
			return renumber(slices.Insert(evs, 16, at...))
		}, []string{"write s3c1 (draft_escalation): attempt 2 (event 19) began while an earlier attempt's outcome was unknown"}},
		{"a write begun again after an executing with no end", func(t *testing.T, evs []trail.Stored) []trail.Stored {
			evs = slices.Delete(evs, 16, 18)
			at := slices.Concat(attempt(t, evs[16], "s3c1", 1, ""), attempt(t, evs[16], "s3c1", 2, events.ExecOK))
			return renumber(slices.Insert(evs, 16, at...))
		}, []string{"write s3c1 (draft_escalation): attempt 2 (event 18) began while an earlier attempt's outcome was unknown"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := check(tc.edit(t, happyRun(t)))
			got := strings.Join(v.Problems, "\n")
			for _, want := range tc.wants {
				if !strings.Contains(got, want) {
					t.Errorf("problems:\n%s\nwant one containing %q", got, want)
				}
			}
		})
	}
}

// One fault is named once, not again at every event after it.
func TestAGapOrADuplicateIsNamedOnce(t *testing.T) {
	v := check(slices.Delete(happyRun(t), 9, 10))
	if len(v.Problems) != 1 || !v.Finished() {
		t.Fatalf("a gap: problems %q, finished %v: want the gap alone, and the end still seen", v.Problems, v.Finished())
	}
	evs := happyRun(t)
	v = check(slices.Insert(evs, 18, evs[17])) // s3c1's executed ok, stored twice
	if len(v.Problems) != 2 || v.Calls["s3c1"].FreshOK != 1 || v.Reason != events.ReasonDone {
		t.Fatalf("a duplicate: problems %q, s3c1 %+v: want the duplicate's seq and event id named, the call counted once", v.Problems, *v.Calls["s3c1"])
	}
}

// evs0RunID is the happy run's id (testdata).
var evs0RunID = events.RunID("cityops", "happy-dump")

// An attempt whose outcome was settled — known not to have run, found
// not applied by a reconcile, or answered by a human — may be followed by
// another; the one that ran is the only effect.
func TestAWriteBegunAgainAfterItsOutcomeWasSettledIsFine(t *testing.T) {
	settle := map[string]func(t *testing.T, like trail.Stored) []trail.Stored{
		"deadline passed, not run": func(t *testing.T, like trail.Stored) []trail.Stored {
			at := attempt(t, like, "s3c1", 1, events.ExecTransient)
			at[1].Data = mustJSON(t, events.ExecutedData{Status: events.ExecTransient, ErrorClass: events.DeadlinePassed,
				OperationID: events.OperationID(like.RunID, "s3c1"), Attempt: 1})
			return at
		},
		"reconciled, not applied": func(t *testing.T, like trail.Stored) []trail.Stored {
			at := attempt(t, like, "s3c1", 1, events.ExecUnknown)
			rec := like
			rec.Type, rec.CallID, rec.Tool = events.TypeReconciled, "s3c1", "draft_escalation"
			rec.Data = mustJSON(t, events.ReconciledData{OperationID: events.OperationID(like.RunID, "s3c1"), Attempt: 1, Via: "status_check"})
			return append(at, rec)
		},
		"a human said retry": func(t *testing.T, like trail.Stored) []trail.Stored {
			at := attempt(t, like, "s3c1", 1, events.ExecUnknown)
			ask := like
			ask.Type, ask.CallID, ask.Tool = events.TypeApprovalRequested, "s3c1", "draft_escalation"
			ask.Data = mustJSON(t, events.ApprovalRequestedData{Kind: "needs_human", Round: 2, Tool: "draft_escalation",
				Args: json.RawMessage(`{}`), ArgsHash: "sha256:x", OperationID: events.OperationID(like.RunID, "s3c1"), Attempt: 1})
			at = append(at, ask)
			ans := like
			ans.Type, ans.CallID, ans.Tool = events.TypeApproved, "s3c1", "draft_escalation"
			ans.Data = mustJSON(t, events.ApprovedData{Kind: "needs_human", Round: 2, Decision: "retry", Approver: "supervisor@cityops", ArgsHash: "sha256:x"})
			return append(at, ans)
		},
	}
	for name, first := range settle {
		t.Run(name, func(t *testing.T) {
			evs := happyRun(t)
			evs = slices.Delete(evs, 16, 18) // s3c1's executing and executed
			at := slices.Concat(first(t, evs[16]), attempt(t, evs[16], "s3c1", 2, events.ExecOK))
			v := check(renumber(slices.Insert(evs, 16, at...)))
			for _, p := range v.Problems {
				if strings.Contains(p, "s3c1") {
					t.Errorf("problem %q", p)
				}
			}
			if c := v.Calls["s3c1"]; c.Executing != 2 || c.TookEffect() != 1 {
				t.Errorf("s3c1: %+v, want 2 attempts, one effect", *c)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// idempotent marks call's validated event as a tool that dedupes by
// operation id, as loopgate records it from the tool's manifest.
func idempotent(t *testing.T, evs []trail.Stored, call string) {
	t.Helper()
	i := slices.IndexFunc(evs, func(e trail.Stored) bool { return e.Type == events.TypeValidated && e.CallID == call })
	var d events.ValidatedData
	if err := json.Unmarshal(evs[i].Data, &d); err != nil {
		t.Fatal(err)
	}
	d.Idempotent = true
	evs[i].Data = mustJSON(t, d)
}

// A write of a tool that dedupes by operation id is run again right after
// an attempt whose end was lost (its worker died after the side effect):
// loopgate does so without a reconcile or a human, and the trail is sound.
// An attempt begun over one that has no end at all is still a fault, and
// a tool that is not idempotent still needs its outcome settled first.
func TestAnIdempotentWriteRunAgainAfterAnUnknownOutcomeIsFine(t *testing.T) {
	cases := []struct {
		name       string
		idempotent bool
		first      string // how attempt 1 ended; "" for no executed
		want       string // the problem, "" for none
	}{
		{"idempotent, unknown", true, events.ExecUnknown, ""},
		{"idempotent, no end", true, "", "write s3c1 (draft_escalation): attempt 2 (event 18) began while an earlier attempt's outcome was unknown"},
		{"not idempotent, unknown", false, events.ExecUnknown, "write s3c1 (draft_escalation): attempt 2 (event 19) began while an earlier attempt's outcome was unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs := happyRun(t)
			if tc.idempotent {
				idempotent(t, evs, "s3c1")
			}
			evs = slices.Delete(evs, 16, 18) // s3c1's executing and executed
			at := slices.Concat(attempt(t, evs[16], "s3c1", 1, tc.first), attempt(t, evs[16], "s3c1", 2, events.ExecOK))
			v := check(renumber(slices.Insert(evs, 16, at...)))
			got := strings.Join(v.Problems, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("problems:\n%s\nwant none", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("problems:\n%s\nwant one containing %q", got, tc.want)
			}
			if c := v.Calls["s3c1"]; c.Executing != 2 || c.TookEffect() != 1 {
				t.Errorf("s3c1: %+v, want 2 attempts, one effect", *c)
			}
		})
	}
}
