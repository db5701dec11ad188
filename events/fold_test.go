package events_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
)

const (
	testTenant = "cityops"
	testRun    = "5c1d7a2e-0000-5000-8000-000000000001"
)

// t0 is the time of a trail's first event; ev.at is relative to it.
var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// ev is one event of a test trail: what it is, when it happened after t0,
// and its payload (marshalled by trail; a json.RawMessage is taken as is).
type ev struct {
	at   time.Duration
	typ  events.Type
	step int
	call string
	tool string
	data any
}

// trail builds one run's events with seq 1..n in the given order.
func trail(t *testing.T, given ...ev) []events.Event {
	t.Helper()
	out := make([]events.Event, 0, len(given))
	for i, g := range given {
		raw, ok := g.data.(json.RawMessage)
		if !ok {
			var err error
			if raw, err = json.Marshal(g.data); err != nil {
				t.Fatalf("marshal event %d: %v", i+1, err)
			}
		}
		out = append(out, events.Event{
			EventID: fmt.Sprintf("ev-%d", i+1),
			RunID:   testRun,
			Tenant:  testTenant,
			Seq:     uint64(i + 1),
			Type:    g.typ,
			Time:    t0.Add(g.at),
			Step:    g.step,
			CallID:  g.call,
			Tool:    g.tool,
			Data:    raw,
		})
	}
	return out
}

func mustFold(t *testing.T, evs []events.Event) *events.RunState {
	t.Helper()
	s, err := events.Fold(evs)
	if err != nil {
		t.Fatalf("Fold: %v", err)
	}
	return s
}

// Payload helpers, for brevity in trails.

func started(input string) events.StartedData {
	return events.StartedData{
		Task: events.Task{
			TaskID: "t-1", Tenant: testTenant, Agent: "escalation-assistant",
			Principal: events.Principal{ID: "dev@cityops", Roles: []string{"operator"}},
			Input:     json.RawMessage(input),
		},
		Profile: "escalation-assistant",
		Model:   "scripted",
		Limits:  events.Limits{MaxSteps: 6},
		Tools:   []string{"draft_escalation", "lookup_complaints"},
	}
}

func call(step, i int, tool, args string) events.ToolCall {
	return events.ToolCall{ID: events.CallID(step, i), Tool: tool, Args: json.RawMessage(args)}
}

func proposeCalls(in, out int, calls ...events.ToolCall) events.ProposedData {
	return events.ProposedData{
		Decision: &events.Decision{ToolCalls: calls},
		Usage:    events.Usage{InputTokens: in, OutputTokens: out},
	}
}

func validOK(hash string) events.ValidatedData {
	return events.ValidatedData{Status: events.ValidOK, ArgsHash: hash}
}

func executing(attempt int) events.ExecutingData {
	return events.ExecutingData{OperationID: "op", Attempt: attempt, Deadline: t0.Add(time.Minute), ArgsHash: "h"}
}

func executed(status string) events.ExecutedData {
	return events.ExecutedData{Status: status, OperationID: "op", Attempt: 1}
}

func observed(obs string) events.ObservedData {
	return events.ObservedData{Observation: json.RawMessage(obs), Bytes: len(obs)}
}

// happyTrail: a task, one decision with two calls that both succeed, and a
// final answer.
func happyTrail(t *testing.T) []events.Event {
	t.Helper()
	lookup := call(1, 1, "lookup_complaints", `{"category":"sanitation"}`)
	draft := call(1, 2, "draft_escalation", `{"request_id":"r-7"}`)
	final := &events.FinalAnswer{Summary: "escalated r-7", DraftsCreated: []string{"r-7.md"}}
	return trail(t,
		ev{at: 0, typ: events.TypeStarted, data: started(`"escalate the oldest"`)},
		ev{at: 1 * time.Second, typ: events.TypeProposed, step: 1, data: proposeCalls(100, 20, lookup, draft)},
		ev{at: 2 * time.Second, typ: events.TypeValidated, step: 1, call: "s1c1", tool: "lookup_complaints", data: validOK("h1")},
		ev{at: 3 * time.Second, typ: events.TypeValidated, step: 1, call: "s1c2", tool: "draft_escalation", data: validOK("h2")},
		ev{at: 4 * time.Second, typ: events.TypeExecuting, step: 1, call: "s1c1", tool: "lookup_complaints", data: executing(1)},
		ev{at: 5 * time.Second, typ: events.TypeExecuting, step: 1, call: "s1c2", tool: "draft_escalation", data: executing(1)},
		ev{at: 6 * time.Second, typ: events.TypeExecuted, step: 1, call: "s1c1", tool: "lookup_complaints", data: executed(events.ExecOK)},
		ev{at: 7 * time.Second, typ: events.TypeExecuted, step: 1, call: "s1c2", tool: "draft_escalation", data: executed(events.ExecOK)},
		ev{at: 8 * time.Second, typ: events.TypeObserved, step: 1, call: "s1c1", tool: "lookup_complaints", data: observed(`{"rows":[{"request_id":"r-7"}]}`)},
		ev{at: 9 * time.Second, typ: events.TypeObserved, step: 1, call: "s1c2", tool: "draft_escalation", data: observed(`{"draft":"r-7.md"}`)},
		ev{at: 10 * time.Second, typ: events.TypeProposed, step: 2, data: events.ProposedData{
			Decision: &events.Decision{Final: final},
			Usage:    events.Usage{InputTokens: 150, OutputTokens: 30},
		}},
		ev{at: 12 * time.Second, typ: events.TypeFinished, step: 2, data: events.FinishedData{Reason: events.ReasonDone, Final: final}},
	)
}

func TestFoldHappyTrailRebuildsCountersAndHistory(t *testing.T) {
	t.Parallel()
	s := mustFold(t, happyTrail(t))

	if s.RunID != testRun || s.Tenant != testTenant {
		t.Errorf("run = %s/%s, want %s/%s", s.Tenant, s.RunID, testTenant, testRun)
	}
	if s.Started == nil || s.Started.Task.TaskID != "t-1" || s.Started.Limits.MaxSteps != 6 {
		t.Errorf("Started = %+v, want the started payload", s.Started)
	}
	if s.LastSeq != 12 || s.LastType != events.TypeFinished {
		t.Errorf("last = %d %s, want 12 finished", s.LastSeq, s.LastType)
	}
	if !s.FirstTime.Equal(t0) || !s.LastTime.Equal(t0.Add(12*time.Second)) {
		t.Errorf("times = %v..%v, want %v..%v", s.FirstTime, s.LastTime, t0, t0.Add(12*time.Second))
	}
	if s.Steps != 2 || s.CurrentStep != 2 {
		t.Errorf("Steps = %d, CurrentStep = %d, want 2, 2", s.Steps, s.CurrentStep)
	}
	if s.ToolCalls != 2 {
		t.Errorf("ToolCalls = %d, want 2", s.ToolCalls)
	}
	if want := map[string]int{"lookup_complaints": 1, "draft_escalation": 1}; !reflect.DeepEqual(s.PerTool, want) {
		t.Errorf("PerTool = %v, want %v", s.PerTool, want)
	}
	if want := (events.Usage{InputTokens: 250, OutputTokens: 50}); s.Usage != want {
		t.Errorf("Usage = %+v, want %+v", s.Usage, want)
	}
	if s.InvalidDecisions != 0 || s.Rejected != 0 || len(s.Corrections) != 0 || len(s.Quarantined) != 0 {
		t.Errorf("invalid = %d, rejected = %d, corrections = %v, quarantined = %v, want none",
			s.InvalidDecisions, s.Rejected, s.Corrections, s.Quarantined)
	}
	wantRepeats := map[string]int{
		events.RepeatKey("lookup_complaints", "h1"): 1,
		events.RepeatKey("draft_escalation", "h2"):  1,
	}
	if !reflect.DeepEqual(s.Repeats, wantRepeats) {
		t.Errorf("Repeats = %v, want %v", s.Repeats, wantRepeats)
	}
	if want := len(`{"rows":[{"request_id":"r-7"}]}`) + len(`{"draft":"r-7.md"}`); s.ObservationBytes != want {
		t.Errorf("ObservationBytes = %d, want %d", s.ObservationBytes, want)
	}
	if s.Active != 12*time.Second {
		t.Errorf("Active = %v, want 12s", s.Active)
	}
	if s.Current == nil || s.Current.Final == nil || s.Current.Final.Summary != "escalated r-7" {
		t.Errorf("Current = %+v, want the final answer", s.Current)
	}
	if s.CurrentCalls != nil {
		t.Errorf("CurrentCalls = %v, want none after a final answer", s.CurrentCalls)
	}
	if s.Finished == nil || s.Finished.Reason != events.ReasonDone {
		t.Errorf("Finished = %+v, want done", s.Finished)
	}

	lookup := call(1, 1, "lookup_complaints", `{"category":"sanitation"}`)
	draft := call(1, 2, "draft_escalation", `{"request_id":"r-7"}`)
	wantHistory := []events.Turn{
		{Role: events.RoleUser, Content: json.RawMessage(`"escalate the oldest"`)},
		{Role: events.RoleAssistant, Step: 1, Decision: &events.Decision{ToolCalls: []events.ToolCall{lookup, draft}}},
		{Role: events.RoleObservation, Step: 1, CallID: "s1c1", Tool: "lookup_complaints", Content: json.RawMessage(`{"rows":[{"request_id":"r-7"}]}`)},
		{Role: events.RoleObservation, Step: 1, CallID: "s1c2", Tool: "draft_escalation", Content: json.RawMessage(`{"draft":"r-7.md"}`)},
		{Role: events.RoleAssistant, Step: 2, Decision: &events.Decision{Final: &events.FinalAnswer{Summary: "escalated r-7", DraftsCreated: []string{"r-7.md"}}}},
	}
	if !reflect.DeepEqual(s.History, wantHistory) {
		got, _ := json.MarshalIndent(s.History, "", "  ")
		want, _ := json.MarshalIndent(wantHistory, "", "  ")
		t.Errorf("History =\n%s\nwant\n%s", got, want)
	}
}

func TestFoldHappyTrailTracksEachCallOfTheCurrentDecision(t *testing.T) {
	t.Parallel()
	evs := happyTrail(t)
	// Stop after the observations of step 1, while its calls are current.
	s := mustFold(t, evs[:10])

	if len(s.CurrentCalls) != 2 {
		t.Fatalf("CurrentCalls = %d, want 2", len(s.CurrentCalls))
	}
	for i, id := range []string{"s1c1", "s1c2"} {
		c := s.CurrentCalls[i]
		if c.Call.ID != id || s.Call(id) != c {
			t.Errorf("call %d = %q, want %q found by Call", i, c.Call.ID, id)
		}
		if c.Validated == nil || c.Validated.Status != events.ValidOK {
			t.Errorf("%s Validated = %+v, want ok", id, c.Validated)
		}
		if c.Attempts() != 1 || c.InFlight() || !c.Observed {
			t.Errorf("%s attempts = %d, in flight = %v, observed = %v, want 1, false, true", id, c.Attempts(), c.InFlight(), c.Observed)
		}
		if last := c.LastExecuted(); last == nil || last.Status != events.ExecOK {
			t.Errorf("%s LastExecuted = %+v, want ok", id, last)
		}
		if c.Denied != nil {
			t.Errorf("%s Denied = %+v, want nil", id, c.Denied)
		}
	}
	if s.Call("s1c3") != nil {
		t.Error(`Call("s1c3") is not nil for a decision of two calls`)
	}
}

func TestApplyingEventsOneByOneMatchesAFreshFold(t *testing.T) {
	t.Parallel()
	evs := happyTrail(t)
	want := mustFold(t, evs)

	got := mustFold(t, nil)
	for i := range evs {
		if err := got.Apply(&evs[i]); err != nil {
			t.Fatalf("Apply event %d: %v", i+1, err)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("applied state = %+v\nfolded state = %+v", got, want)
	}
}

func TestFoldOfNoEventsIsAnEmptyUsableState(t *testing.T) {
	t.Parallel()
	s := mustFold(t, nil)
	if s.LastSeq != 0 || s.RunID != "" || s.Started != nil || s.History != nil {
		t.Errorf("state = %+v, want empty", s)
	}
	if s.PerTool == nil || s.Corrections == nil || s.Repeats == nil || s.Quarantined == nil {
		t.Error("maps are nil; Apply would panic writing to them")
	}
	if got := s.Totals().Events; got != 1 {
		t.Errorf("Totals().Events = %d, want 1 (the event about to be appended)", got)
	}
}

func TestFoldRejectsABrokenTrail(t *testing.T) {
	t.Parallel()
	lookup := call(1, 1, "lookup_complaints", `{}`)
	base := func(more ...ev) []events.Event {
		return trail(t, append([]ev{
			{typ: events.TypeStarted, data: started(`"x"`)},
			{at: time.Second, typ: events.TypeProposed, step: 1, data: proposeCalls(1, 1, lookup)},
		}, more...)...)
	}
	edit := func(evs []events.Event, f func([]events.Event)) []events.Event { f(evs); return evs }
	garbage := json.RawMessage(`"not an object"`)

	tests := []struct {
		name    string
		given   []events.Event
		wantErr string
	}{
		{
			name:    "a gap in seq",
			given:   edit(base(), func(e []events.Event) { e[1].Seq = 3 }),
			wantErr: "event seq 3 follows 1: the trail has a gap",
		},
		{
			name:    "a trail that does not start at seq 1",
			given:   edit(base(), func(e []events.Event) { e[0].Seq = 2 }),
			wantErr: "event seq 2 follows 0",
		},
		{
			name:    "a repeated seq",
			given:   edit(base(), func(e []events.Event) { e[1].Seq = 1 }),
			wantErr: "event seq 1 follows 1",
		},
		{
			name:    "an event of another run",
			given:   edit(base(), func(e []events.Event) { e[1].RunID = "other-run" }),
			wantErr: "of run other-run folded into run " + testRun,
		},
		{
			name:    "an unknown type",
			given:   trail(t, ev{typ: events.TypeStarted, data: started(`"x"`)}, ev{typ: "teleported", data: struct{}{}}),
			wantErr: `event 2 has unknown type "teleported"`,
		},
		{name: "undecodable rejected", given: trail(t, ev{typ: events.TypeRejected, data: garbage}), wantErr: "decode rejected event 1 "},
		{name: "undecodable started", given: trail(t, ev{typ: events.TypeStarted, data: garbage}), wantErr: "decode started event 1 "},
		{name: "undecodable proposed", given: base(ev{typ: events.TypeProposed, step: 2, data: json.RawMessage(`{"decision":`)}), wantErr: "decode proposed event 3 "},
		{name: "undecodable validated", given: base(ev{typ: events.TypeValidated, step: 1, call: "s1c1", data: garbage}), wantErr: "decode validated event 3 "},
		{name: "undecodable denied", given: base(ev{typ: events.TypeDenied, step: 1, call: "s1c1", data: garbage}), wantErr: "decode denied event 3 "},
		{name: "undecodable executing", given: base(ev{typ: events.TypeExecuting, step: 1, call: "s1c1", data: garbage}), wantErr: "decode executing event 3 "},
		{name: "undecodable executed", given: base(ev{typ: events.TypeExecuted, step: 1, call: "s1c1", data: garbage}), wantErr: "decode executed event 3 "},
		{name: "undecodable observed", given: base(ev{typ: events.TypeObserved, step: 1, call: "s1c1", data: garbage}), wantErr: "decode observed event 3 "},
		{name: "undecodable finished", given: base(ev{typ: events.TypeFinished, step: 1, data: garbage}), wantErr: "decode finished event 3 "},
		{
			name:    "a validated event for a call not in the current decision",
			given:   base(ev{typ: events.TypeValidated, step: 1, call: "s1c2", data: validOK("h")}),
			wantErr: `validated event 3 names call "s1c2", not in the current decision`,
		},
		{
			name:    "an executing event without a call id",
			given:   base(ev{typ: events.TypeExecuting, step: 1, data: executing(1)}),
			wantErr: `executing event 3 names call "", not in the current decision`,
		},
		{
			name:    "an observed event for a call not in the current decision",
			given:   base(ev{typ: events.TypeObserved, step: 1, call: "s1c9", data: observed(`{}`)}),
			wantErr: `observed event 3 names call "s1c9"`,
		},
		{
			name:    "an executed event for another step",
			given:   base(ev{typ: events.TypeExecuted, step: 2, call: "s1c1", data: executed(events.ExecOK)}),
			wantErr: "executed event 3 is for step 2, current step is 1",
		},
		{
			name:    "a denied event for an earlier step",
			given:   base(ev{typ: events.TypeDenied, step: 0, call: "s1c1", data: events.DeniedData{Check: "tool_allowed"}}),
			wantErr: "denied event 3 is for step 0, current step is 1",
		},
		{
			name: "a call event before any decision",
			given: trail(t,
				ev{typ: events.TypeStarted, data: started(`"x"`)},
				ev{typ: events.TypeValidated, call: "s1c1", data: validOK("h")},
			),
			wantErr: `validated event 2 names call "s1c1", not in the current decision`,
		},
		{
			name: "a call of the previous decision after a new one",
			given: base(
				ev{typ: events.TypeProposed, step: 2, data: proposeCalls(1, 1, call(2, 1, "lookup_complaints", `{}`))},
				ev{typ: events.TypeObserved, step: 2, call: "s1c1", data: observed(`{}`)},
			),
			wantErr: `observed event 4 names call "s1c1", not in the current decision`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := events.Fold(tt.given)
			if err == nil {
				t.Fatalf("Fold = %+v, want error containing %q", s, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Fold error = %q, want it to contain %q", err, tt.wantErr)
			}
			if s != nil {
				t.Errorf("Fold returned a state with its error: %+v", s)
			}
		})
	}
}

func TestFoldInvalidDecisionKeepsWhatTheModelSaid(t *testing.T) {
	t.Parallel()
	invalid := []events.FieldError{{Field: "", Message: "exactly one of tool_calls or final_answer is required"}}
	tests := []struct {
		name        string
		given       events.ProposedData
		wantContent string
	}{
		{
			name:        "raw JSON output is kept verbatim",
			given:       events.ProposedData{Invalid: invalid, Raw: json.RawMessage(`{"tool_calls":[],"final_answer":{"summary":"x"}}`)},
			wantContent: `{"tool_calls":[],"final_answer":{"summary":"x"}}`,
		},
		{
			name:        "raw text output becomes a JSON string",
			given:       events.ProposedData{Invalid: invalid, RawText: `I'll call "lookup" now`},
			wantContent: `"I'll call \"lookup\" now"`,
		},
		{
			name:        "empty output becomes an empty JSON string",
			given:       events.ProposedData{Invalid: invalid},
			wantContent: `""`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.given.Usage = events.Usage{InputTokens: 10, OutputTokens: 5}
			s := mustFold(t, trail(t,
				ev{typ: events.TypeStarted, data: started(`"x"`)},
				ev{typ: events.TypeProposed, step: 1, data: tt.given},
			))
			if s.InvalidDecisions != 1 {
				t.Errorf("InvalidDecisions = %d, want 1", s.InvalidDecisions)
			}
			if !reflect.DeepEqual(s.CurrentInvalid, invalid) {
				t.Errorf("CurrentInvalid = %+v, want %+v", s.CurrentInvalid, invalid)
			}
			if s.Current != nil || s.CurrentCalls != nil || s.DecisionObserved {
				t.Errorf("Current = %+v, calls = %v, observed = %v, want nil, none, false", s.Current, s.CurrentCalls, s.DecisionObserved)
			}
			if s.Steps != 1 || s.CurrentStep != 1 {
				t.Errorf("Steps = %d, CurrentStep = %d, want 1, 1: an invalid decision still uses a step", s.Steps, s.CurrentStep)
			}
			if want := (events.Usage{InputTokens: 10, OutputTokens: 5}); s.Usage != want {
				t.Errorf("Usage = %+v, want %+v", s.Usage, want)
			}
			if len(s.History) != 2 {
				t.Fatalf("History has %d turns, want 2", len(s.History))
			}
			turn := s.History[1]
			if turn.Role != events.RoleAssistant || turn.Step != 1 || turn.Decision != nil {
				t.Errorf("turn = %+v, want an assistant turn of step 1 without a decision", turn)
			}
			if string(turn.Content) != tt.wantContent {
				t.Errorf("turn content = %s, want %s", turn.Content, tt.wantContent)
			}
		})
	}
}

func TestFoldInvalidDecisionObservedThenCorrected(t *testing.T) {
	t.Parallel()
	bad := events.ProposedData{Invalid: []events.FieldError{{Message: "not JSON"}}, RawText: "oops"}
	evs := trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{typ: events.TypeProposed, step: 1, data: bad},
		ev{typ: events.TypeObserved, step: 1, data: observed(`{"error":"invalid_decision"}`)},
		ev{typ: events.TypeProposed, step: 2, data: bad},
		ev{typ: events.TypeObserved, step: 2, data: observed(`{"error":"invalid_decision"}`)},
		ev{typ: events.TypeProposed, step: 3, data: proposeCalls(0, 0, call(3, 1, "lookup_complaints", `{}`))},
	)

	s := mustFold(t, evs[:3])
	if !s.DecisionObserved {
		t.Error("DecisionObserved = false after the invalid decision's observation")
	}
	if last := s.History[len(s.History)-1]; last.Role != events.RoleObservation || last.CallID != "" || string(last.Content) != `{"error":"invalid_decision"}` {
		t.Errorf("last turn = %+v, want the decision's observation", last)
	}

	s = mustFold(t, evs)
	if s.InvalidDecisions != 2 {
		t.Errorf("InvalidDecisions = %d, want 2", s.InvalidDecisions)
	}
	if s.CurrentInvalid != nil || s.DecisionObserved {
		t.Errorf("CurrentInvalid = %+v, DecisionObserved = %v after a valid decision, want nil, false", s.CurrentInvalid, s.DecisionObserved)
	}
	if len(s.CurrentCalls) != 1 || s.CurrentCalls[0].Call.ID != "s3c1" {
		t.Errorf("CurrentCalls = %v, want s3c1", s.CurrentCalls)
	}
	roles := make([]events.Role, len(s.History))
	for i, turn := range s.History {
		roles[i] = turn.Role
	}
	wantRoles := []events.Role{events.RoleUser, events.RoleAssistant, events.RoleObservation, events.RoleAssistant, events.RoleObservation, events.RoleAssistant}
	if !reflect.DeepEqual(roles, wantRoles) {
		t.Errorf("History roles = %v, want %v", roles, wantRoles)
	}
}

func TestFoldRefusedCallsCountAsCorrectionsOfTheirTool(t *testing.T) {
	t.Parallel()
	for _, status := range []string{events.InvalidArguments, events.UnknownTool, events.Quarantined} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			s := mustFold(t, trail(t,
				ev{typ: events.TypeStarted, data: started(`"x"`)},
				ev{typ: events.TypeProposed, step: 1, data: proposeCalls(0, 0,
					call(1, 1, "draft_escalation", `{}`),
					call(1, 2, "draft_escalation", `{"x":1}`),
					call(1, 3, "lookup_complaints", `{}`),
				)},
				ev{typ: events.TypeValidated, step: 1, call: "s1c1", data: events.ValidatedData{Status: status, Errors: []events.FieldError{{Field: "/request_id", Message: "required"}}}},
				ev{typ: events.TypeValidated, step: 1, call: "s1c2", data: events.ValidatedData{Status: status}},
				ev{typ: events.TypeValidated, step: 1, call: "s1c3", data: validOK("h")},
			))
			if s.Rejected != 2 {
				t.Errorf("Rejected = %d, want 2", s.Rejected)
			}
			if want := map[string]int{"draft_escalation": 2}; !reflect.DeepEqual(s.Corrections, want) {
				t.Errorf("Corrections = %v, want %v", s.Corrections, want)
			}
			if want := map[string]int{events.RepeatKey("lookup_complaints", "h"): 1}; !reflect.DeepEqual(s.Repeats, want) {
				t.Errorf("Repeats = %v, want %v: refused calls are not repeats", s.Repeats, want)
			}
			if c := s.Call("s1c1"); c.Validated == nil || c.Validated.Status != status || len(c.Validated.Errors) != 1 {
				t.Errorf("s1c1 Validated = %+v, want %s with its field error", c.Validated, status)
			}
			if s.ToolCalls != 0 {
				t.Errorf("ToolCalls = %d, want 0: validation alone is not a call", s.ToolCalls)
			}
		})
	}
}

func TestFoldValidCallsCountRepeatsByToolAndArgsHash(t *testing.T) {
	t.Parallel()
	s := mustFold(t, trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{typ: events.TypeProposed, step: 1, data: proposeCalls(0, 0,
			call(1, 1, "lookup_complaints", `{"a":1}`),
			call(1, 2, "lookup_complaints", `{"a":2}`),
		)},
		ev{typ: events.TypeValidated, step: 1, call: "s1c1", data: validOK("ha")},
		ev{typ: events.TypeValidated, step: 1, call: "s1c2", data: validOK("hb")},
		ev{typ: events.TypeProposed, step: 2, data: proposeCalls(0, 0,
			call(2, 1, "lookup_complaints", `{"a":1}`),
			call(2, 2, "draft_escalation", `{"a":1}`),
		)},
		ev{typ: events.TypeValidated, step: 2, call: "s2c1", data: validOK("ha")},
		// The same hash of another tool is another call.
		ev{typ: events.TypeValidated, step: 2, call: "s2c2", data: validOK("ha")},
	))
	want := map[string]int{
		events.RepeatKey("lookup_complaints", "ha"): 2,
		events.RepeatKey("lookup_complaints", "hb"): 1,
		events.RepeatKey("draft_escalation", "ha"):  1,
	}
	if !reflect.DeepEqual(s.Repeats, want) {
		t.Errorf("Repeats = %v, want %v", s.Repeats, want)
	}
	if s.Rejected != 0 || len(s.Corrections) != 0 {
		t.Errorf("Rejected = %d, Corrections = %v, want none", s.Rejected, s.Corrections)
	}
}

func TestRepeatKeyDoesNotConfuseToolAndHashBoundaries(t *testing.T) {
	t.Parallel()
	if events.RepeatKey("ab", "c") == events.RepeatKey("a", "bc") {
		t.Error(`RepeatKey("ab", "c") == RepeatKey("a", "bc")`)
	}
	if events.RepeatKey("t", "h") != events.RepeatKey("t", "h") {
		t.Error("RepeatKey is not deterministic")
	}
}

func TestFoldRetriedAttemptCountsOneToolCall(t *testing.T) {
	t.Parallel()
	evs := trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{typ: events.TypeProposed, step: 1, data: proposeCalls(0, 0, call(1, 1, "lookup_complaints", `{}`))},
		ev{typ: events.TypeValidated, step: 1, call: "s1c1", tool: "lookup_complaints", data: validOK("h")},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c1", tool: "lookup_complaints", data: executing(1)},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c1", tool: "lookup_complaints", data: executed(events.ExecTransient)},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c1", tool: "lookup_complaints", data: executing(2)},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c1", tool: "lookup_complaints", data: executed(events.ExecOK)},
	)

	tests := []struct {
		name         string
		given        []events.Event
		wantAttempts int
		wantInFlight bool
		wantLast     string // status of LastExecuted, "" for nil
	}{
		{name: "first attempt begun", given: evs[:4], wantAttempts: 1, wantInFlight: true},
		{name: "first attempt transient", given: evs[:5], wantAttempts: 1, wantLast: events.ExecTransient},
		{name: "retry begun", given: evs[:6], wantAttempts: 2, wantInFlight: true, wantLast: events.ExecTransient},
		{name: "retry succeeded", given: evs, wantAttempts: 2, wantLast: events.ExecOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustFold(t, tt.given)
			if s.ToolCalls != 1 || s.PerTool["lookup_complaints"] != 1 {
				t.Errorf("ToolCalls = %d, PerTool = %v, want one call of lookup_complaints", s.ToolCalls, s.PerTool)
			}
			c := s.Call("s1c1")
			if c.Attempts() != tt.wantAttempts {
				t.Errorf("Attempts = %d, want %d", c.Attempts(), tt.wantAttempts)
			}
			if c.InFlight() != tt.wantInFlight {
				t.Errorf("InFlight = %v, want %v", c.InFlight(), tt.wantInFlight)
			}
			var gotLast string
			if last := c.LastExecuted(); last != nil {
				gotLast = last.Status
			}
			if gotLast != tt.wantLast {
				t.Errorf("LastExecuted status = %q, want %q", gotLast, tt.wantLast)
			}
			if len(c.Executing) > 1 && c.Executing[1].Attempt != 2 {
				t.Errorf("second executing = %+v, want attempt 2", c.Executing[1])
			}
		})
	}
}

func TestFoldExecutingWithoutExecutedIsInFlight(t *testing.T) {
	t.Parallel()
	s := mustFold(t, trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{typ: events.TypeProposed, step: 1, data: proposeCalls(0, 0, call(1, 1, "draft_escalation", `{}`), call(1, 2, "lookup_complaints", `{}`))},
		ev{typ: events.TypeValidated, step: 1, call: "s1c1", data: validOK("h1")},
		ev{typ: events.TypeValidated, step: 1, call: "s1c2", data: validOK("h2")},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c1", data: executing(1)},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c2", data: executing(1)},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c2", data: executed(events.ExecOK)},
	))
	if c := s.Call("s1c1"); !c.InFlight() || c.LastExecuted() != nil || c.Executing[0].OperationID != "op" {
		t.Errorf("s1c1 InFlight = %v, LastExecuted = %+v, want in flight with its write-ahead record", c.InFlight(), c.LastExecuted())
	}
	if c := s.Call("s1c2"); c.InFlight() {
		t.Error("s1c2 is in flight after its executed event")
	}
	if s.ToolCalls != 2 {
		t.Errorf("ToolCalls = %d, want 2: a begun attempt counts", s.ToolCalls)
	}
}

func TestFoldDryRunCountsAToolCallWithoutAnAttempt(t *testing.T) {
	t.Parallel()
	preview := events.ExecutedData{
		Status: events.ExecDryRun, OperationID: "op",
		WouldCall: &events.WouldCall{Tool: "draft_escalation", Args: json.RawMessage(`{"request_id":"r-7"}`), OperationID: "op"},
	}
	s := mustFold(t, trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{typ: events.TypeProposed, step: 1, data: proposeCalls(0, 0, call(1, 1, "draft_escalation", `{"request_id":"r-7"}`))},
		ev{typ: events.TypeValidated, step: 1, call: "s1c1", data: validOK("h")},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c1", data: preview},
	))
	if s.ToolCalls != 1 || s.PerTool["draft_escalation"] != 1 {
		t.Errorf("ToolCalls = %d, PerTool = %v, want one call of draft_escalation", s.ToolCalls, s.PerTool)
	}
	c := s.Call("s1c1")
	if c.Attempts() != 0 || c.InFlight() {
		t.Errorf("Attempts = %d, InFlight = %v, want 0, false", c.Attempts(), c.InFlight())
	}
	if last := c.LastExecuted(); last == nil || last.WouldCall == nil || string(last.WouldCall.Args) != `{"request_id":"r-7"}` {
		t.Errorf("LastExecuted = %+v, want the dry-run preview", last)
	}
	if len(s.Quarantined) != 0 {
		t.Errorf("Quarantined = %v, want none", s.Quarantined)
	}
}

func TestFoldToolFailureQuarantinesTheTool(t *testing.T) {
	t.Parallel()
	failed := events.ExecutedData{Status: events.ExecToolFailed, Attempt: 1, ErrorClass: "tool_failed"}
	s := mustFold(t, trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{typ: events.TypeProposed, step: 1, data: proposeCalls(0, 0, call(1, 1, "draft_escalation", `{}`), call(1, 2, "lookup_complaints", `{}`))},
		ev{typ: events.TypeValidated, step: 1, call: "s1c1", data: validOK("h1")},
		ev{typ: events.TypeValidated, step: 1, call: "s1c2", data: validOK("h2")},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c1", data: executing(1)},
		ev{typ: events.TypeExecuting, step: 1, call: "s1c2", data: executing(1)},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c1", data: failed},
		ev{typ: events.TypeExecuted, step: 1, call: "s1c2", data: executed(events.ExecTimeout)},
	))
	if want := map[string]bool{"draft_escalation": true}; !reflect.DeepEqual(s.Quarantined, want) {
		t.Errorf("Quarantined = %v, want %v: only tool_failed quarantines", s.Quarantined, want)
	}
}

func TestFoldDeniedCallIsRecorded(t *testing.T) {
	t.Parallel()
	s := mustFold(t, trail(t,
		ev{typ: events.TypeStarted, data: started(`"x"`)},
		ev{typ: events.TypeProposed, step: 1, data: proposeCalls(0, 0, call(1, 1, "draft_escalation", `{}`))},
		ev{typ: events.TypeValidated, step: 1, call: "s1c1", data: validOK("h")},
		ev{typ: events.TypeDenied, step: 1, call: "s1c1", data: events.DeniedData{Check: "tool_allowed", Reason: "no"}},
	))
	if c := s.Call("s1c1"); c.Denied == nil || c.Denied.Check != "tool_allowed" {
		t.Errorf("Denied = %+v, want tool_allowed", c.Denied)
	}
	if s.ToolCalls != 0 {
		t.Errorf("ToolCalls = %d, want 0", s.ToolCalls)
	}
}

func TestFoldRejectedTaskKeepsTheRejection(t *testing.T) {
	t.Parallel()
	s := mustFold(t, trail(t, ev{typ: events.TypeRejected, data: events.RejectedData{
		Field: "/tenant", Reason: "differs from the subject's", Subject: "loopgate.tasks.cityops",
	}}))
	if s.Rejection == nil || s.Rejection.Field != "/tenant" {
		t.Errorf("Rejection = %+v, want the /tenant rejection", s.Rejection)
	}
	if s.Started != nil || s.History != nil {
		t.Errorf("Started = %+v, History = %v, want none for a rejected task", s.Started, s.History)
	}
}

func TestFoldActiveTimeExcludesParkedTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		given []ev
		want  time.Duration
	}{
		{
			name: "a single event has no active time",
			given: []ev{
				{at: 0, typ: events.TypeStarted, data: started(`"x"`)},
			},
			want: 0,
		},
		{
			name: "gaps between events add up",
			given: []ev{
				{at: 0, typ: events.TypeStarted, data: started(`"x"`)},
				{at: 1500 * time.Millisecond, typ: events.TypeProposed, step: 1, data: events.ProposedData{RawText: "?"}},
				{at: 4 * time.Second, typ: events.TypeObserved, step: 1, data: observed(`{}`)},
			},
			want: 4 * time.Second,
		},
		{
			name: "the gap after parked is not active",
			given: []ev{
				{at: 0, typ: events.TypeStarted, data: started(`"x"`)},
				{at: 500 * time.Millisecond, typ: events.TypeProposed, step: 1, data: proposeCalls(1, 1, call(1, 1, "draft_escalation", `{}`))},
				{at: 1 * time.Second, typ: events.TypeValidated, step: 1, call: "s1c1", tool: "draft_escalation", data: validOK("h")},
				{at: 2 * time.Second, typ: events.TypeApprovalRequested, step: 1, call: "s1c1", tool: "draft_escalation", data: events.ApprovalRequestedData{Kind: "approval", Round: 1, ArgsHash: "h"}},
				{at: 3 * time.Second, typ: events.TypeParked, step: 1, data: events.ParkedData{Awaiting: []string{"s1c1"}}},
				{at: 3*time.Second + 2*time.Hour, typ: events.TypeApproved, step: 1, call: "s1c1", tool: "draft_escalation", data: events.ApprovedData{Kind: "approval", Round: 1, Decision: "approve", ArgsHash: "h"}},
				{at: 5*time.Second + 2*time.Hour, typ: events.TypeExecuting, step: 1, call: "s1c1", tool: "draft_escalation", data: events.ExecutingData{Attempt: 1}},
			},
			want: 5 * time.Second,
		},
		{
			name: "a clock that steps back adds nothing",
			given: []ev{
				{at: 10 * time.Second, typ: events.TypeStarted, data: started(`"x"`)},
				{at: 4 * time.Second, typ: events.TypeProposed, step: 1, data: events.ProposedData{RawText: "?"}},
				{at: 6 * time.Second, typ: events.TypeObserved, step: 1, data: observed(`{}`)},
			},
			want: 2 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustFold(t, trail(t, tt.given...))
			if s.Active != tt.want {
				t.Errorf("Active = %v, want %v", s.Active, tt.want)
			}
			if got := s.Totals().ActiveMS; got != tt.want.Milliseconds() {
				t.Errorf("Totals().ActiveMS = %d, want %d", got, tt.want.Milliseconds())
			}
		})
	}
}

func TestTotalsReflectTheFoldedState(t *testing.T) {
	t.Parallel()
	evs := trail(t,
		ev{at: 0, typ: events.TypeStarted, data: started(`"x"`)},
		ev{at: time.Second, typ: events.TypeProposed, step: 1, data: events.ProposedData{
			Invalid: []events.FieldError{{Message: "not JSON"}}, RawText: "hm", Usage: events.Usage{InputTokens: 7, OutputTokens: 3},
		}},
		ev{at: 2 * time.Second, typ: events.TypeObserved, step: 1, data: observed(`{"error":"invalid_decision"}`)},
		ev{at: 3 * time.Second, typ: events.TypeProposed, step: 2, data: proposeCalls(11, 4,
			call(2, 1, "lookup_complaints", `{}`), call(2, 2, "draft_escalation", `{}`))},
		ev{at: 4 * time.Second, typ: events.TypeValidated, step: 2, call: "s2c1", data: validOK("h")},
		ev{at: 5 * time.Second, typ: events.TypeValidated, step: 2, call: "s2c2", data: events.ValidatedData{Status: events.InvalidArguments}},
		ev{at: 6 * time.Second, typ: events.TypeExecuting, step: 2, call: "s2c1", data: executing(1)},
		ev{at: 7500 * time.Millisecond, typ: events.TypeExecuted, step: 2, call: "s2c1", data: executed(events.ExecOK)},
		ev{at: 8 * time.Second, typ: events.TypeObserved, step: 2, call: "s2c1", data: observed(`[1,2,3]`)},
		ev{at: 9 * time.Second, typ: events.TypeObserved, step: 2, call: "s2c2", data: observed(`{"error":"invalid_arguments"}`)},
	)
	s := mustFold(t, evs)
	want := events.Totals{
		Steps:            2,
		ToolCalls:        1,
		PerTool:          map[string]int{"lookup_complaints": 1},
		InvalidDecisions: 1,
		Rejected:         1,
		Usage:            events.Usage{InputTokens: 18, OutputTokens: 7},
		ActiveMS:         9000,
		ObservationBytes: len(`{"error":"invalid_decision"}`) + len(`[1,2,3]`) + len(`{"error":"invalid_arguments"}`),
		Events:           len(evs) + 1,
	}
	if got := s.Totals(); !reflect.DeepEqual(got, want) {
		t.Errorf("Totals() = %+v, want %+v", got, want)
	}
}
