package worker_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
)

// The CityOps scenarios of the seed, each asserting its exact event trail,
// stop reason and side effects.

// happyTrail is the trail of the CityOps happy path: two reads, three
// drafts each approved, the final answer.
func happyTrail() []string {
	return concat(
		[]string{"started"},
		okStep("get_procedure"),
		okStep("lookup_complaints"),
		gatedStep("draft_escalation"),
		gatedStep("draft_escalation"),
		gatedStep("draft_escalation"),
		[]string{"proposed:final", "finished:done"},
	)
}

func TestHappyPathDraftsThreeEscalations(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	runID := b.submit(task("happy-1", "escalation-assistant"))
	b.autoApprove(runID, "supervisor@cityops", "approve", "")
	evs := b.waitEnd(runID)

	// Each draft waits for the supervisor's approval of its exact
	// arguments, then runs once; the model is not asked again in between.
	assertTrail(t, evs, happyTrail())
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	for _, id := range []string{"SR-10421", "SR-10422", "SR-10423"} {
		if !strings.Contains(fin.Final.Summary, id) {
			t.Errorf("final answer does not name %s: %q", id, fin.Final.Summary)
		}
	}
	if fin.Totals.Steps != 6 || fin.Totals.ToolCalls != 5 || fin.Totals.PerTool["draft_escalation"] != 3 {
		t.Errorf("totals = %+v, want 6 steps, 5 tool calls, 3 drafts", fin.Totals)
	}
	if fin.Totals.Usage.InputTokens != 6*420 {
		t.Errorf("input tokens = %d, want %d recorded from the script", fin.Totals.Usage.InputTokens, 6*420)
	}

	// The lookup's observation is the designed view: ids and ages only.
	var lookupObs events.ObservedData
	for _, e := range all(evs, events.TypeObserved) {
		if e.Tool == "lookup_complaints" {
			_ = e.Decode(&lookupObs)
		}
	}
	want := `{"status":"ok","tool":"lookup_complaints","data":{"count":3,"items":[{"days_open":9,"request_id":"SR-10421"},{"days_open":7,"request_id":"SR-10422"},{"days_open":6,"request_id":"SR-10423"}],"truncated":false}}`
	if got := compactJSON(t, lookupObs.Observation); got != compactJSON(t, []byte(want)) {
		t.Errorf("lookup observation:\n got  %s\n want %s", got, want)
	}
	if strings.Contains(string(lookupObs.Observation), "resident") {
		t.Errorf("observation leaks resident fields: %s", lookupObs.Observation)
	}

	// Three drafts, each named by the operation id loopgate minted for its call.
	files := outboxFiles(t, b.outbox)
	if len(files) != 3 {
		t.Fatalf("outbox has %v, want 3 drafts", files)
	}
	for _, e := range all(evs, events.TypeExecuting) {
		if e.Tool != "draft_escalation" {
			continue
		}
		var x events.ExecutingData
		_ = e.Decode(&x)
		if x.OperationID != events.OperationID(runID, e.CallID) {
			t.Errorf("call %s: operation id %s is not derived from run and call", e.CallID, x.OperationID)
		}
		body, err := os.ReadFile(filepath.Join(b.outbox, "escalation-"+x.OperationID+".txt"))
		if err != nil {
			t.Fatalf("draft of call %s: %v", e.CallID, err)
		}
		if !strings.Contains(string(body), "PENDING HUMAN APPROVAL") {
			t.Errorf("draft %s is not marked pending approval:\n%s", x.OperationID, body)
		}
	}
}

func TestRunawayLoopStopsAtMaxSteps(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	evs := b.waitEnd(b.submit(task("runaway-1", "runaway-assistant")))
	assertTrail(t, evs, concat(
		[]string{"started"},
		okStep("lookup_complaints"), okStep("lookup_complaints"),
		okStep("lookup_complaints"), okStep("lookup_complaints"),
		[]string{"finished:max_steps"},
	))
	if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Totals.Steps != 4 {
		t.Errorf("steps = %d, want 4", fin.Totals.Steps)
	}
}

func TestInvalidArgumentsAreCorrectedAndUnknownToolIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	evs := b.waitEnd(b.submit(task("correction-1", "correcting-assistant")))
	assertTrail(t, evs, concat(
		[]string{"started", "proposed", "validated:invalid_arguments(lookup_complaints)", "observed(lookup_complaints)"},
		okStep("lookup_complaints"),
		[]string{"proposed", "validated:unknown_tool(email_resident)", "observed(email_resident)"},
		[]string{"proposed:final", "finished:done"},
	))
	validated := all(evs, events.TypeValidated)
	var invalid events.ValidatedData
	_ = validated[0].Decode(&invalid)
	if len(invalid.Errors) == 0 || invalid.Errors[0].Field != "/older_than_days" {
		t.Errorf("invalid_arguments errors = %+v, want one naming /older_than_days", invalid.Errors)
	}
	var unknown events.ValidatedData
	_ = validated[2].Decode(&unknown)
	if !slices.Equal(unknown.AvailableTools, []string{"draft_escalation", "get_procedure", "lookup_complaints"}) {
		t.Errorf("available tools = %v", unknown.AvailableTools)
	}
	obs := all(evs, events.TypeObserved)
	if !strings.Contains(string(dataOf(t, obs[0])), `"field":"/older_than_days"`) {
		t.Errorf("the model was not told which field was wrong: %s", dataOf(t, obs[0]))
	}
	if !strings.Contains(string(dataOf(t, obs[2])), `"error":"unknown_tool"`) {
		t.Errorf("unknown tool observation: %s", dataOf(t, obs[2]))
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Errorf("outbox = %v, want nothing written", files)
	}
}

func TestSlowToolTimesOutAndTheRunRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	evs := b.waitEnd(b.submit(task("slow-1", "slow-lookup-assistant")))
	assertTrail(t, evs, concat(
		[]string{"started", "proposed", "validated:ok(slow_lookup)", "executing(slow_lookup)", "executed:timeout(slow_lookup)", "observed(slow_lookup)"},
		okStep("lookup_complaints"),
		[]string{"proposed:final", "finished:done"},
	))
	x := all(evs, events.TypeExecuted)[0]
	var ex events.ExecutedData
	_ = x.Decode(&ex)
	if ex.LatencyMS < 1500 || ex.LatencyMS > 5000 {
		t.Errorf("slow_lookup waited %dms, want the 2s tool deadline", ex.LatencyMS)
	}
	obs := string(dataOf(t, all(evs, events.TypeObserved)[0]))
	if !strings.Contains(obs, "stopped waiting") || !strings.Contains(obs, "may still be running") {
		t.Errorf("timeout observation claims more than it knows: %s", obs)
	}
}

func TestDryRunPreviewsTheWriteAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	tk := task("dry-1", "dry-run-assistant")
	tk.DryRun = true
	runID := b.submit(tk)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, []string{
		"started", "proposed", "validated:ok(draft_escalation)", "executed:dry_run(draft_escalation)", "observed(draft_escalation)",
		"proposed:final", "finished:done",
	})
	ex := last[events.ExecutedData](t, evs, events.TypeExecuted)
	if ex.WouldCall == nil || ex.WouldCall.Tool != "draft_escalation" || !strings.Contains(string(ex.WouldCall.Args), "SR-10421") ||
		ex.WouldCall.OperationID != events.OperationID(runID, "s1c1") {
		t.Errorf("dry run preview = %+v, want the exact call it did not make", ex.WouldCall)
	}
	if files := outboxFiles(t, b.outbox); len(files) != 0 {
		t.Errorf("dry run wrote %v", files)
	}
}

func TestRepeatedIdenticalCallsStopTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	evs := b.waitEnd(b.submit(task("repeat-1", "repeating-assistant")))
	assertTrail(t, evs, concat(
		[]string{"started"},
		okStep("lookup_complaints"), okStep("lookup_complaints"),
		[]string{"proposed", "validated:ok(lookup_complaints)", "finished:repeated_call"},
	))
}

func TestInvalidDecisionsAreFedBackThenStopTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	evs := b.waitEnd(b.submit(task("invalid-1", "confused-assistant")))
	assertTrail(t, evs, []string{
		"started",
		"proposed:invalid", "observed",
		"proposed:invalid", "observed",
		"proposed:invalid", "finished:invalid_decisions",
	})
	props := all(evs, events.TypeProposed)
	var second events.ProposedData
	_ = props[1].Decode(&second)
	if second.RawText != "I think I should look things up {" {
		t.Errorf("the trail lost what the model said: raw_text=%q", second.RawText)
	}
	obs := string(dataOf(t, all(evs, events.TypeObserved)[0]))
	if !strings.Contains(obs, "invalid_decision") {
		t.Errorf("observation of an invalid decision: %s", obs)
	}
}

func dataOf(t testing.TB, e events.Event) json.RawMessage {
	t.Helper()
	var d events.ObservedData
	if err := e.Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d.Observation
}

func compactJSON(t testing.TB, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// Token and cost budgets stop a run, with reason budget, before the model
// call that would exceed them; cost comes from the config's pricing table.
func TestBudgetsStopTheRunBeforeTheModelCallThatWouldExceedThem(t *testing.T) {
	t.Parallel()
	// The happy script records 420 input + 60 output tokens per call.
	b := setup(t, options{pricing: map[string]config.Price{"scripted": {InputPerMTok: 10, OutputPerMTok: 30}}})
	for name, limits := range map[string]events.Limits{
		"tokens": {MaxTokens: 1200},   // 2 calls = 960; a third would reach 1440
		"cost":   {MaxCostUSD: 0.015}, // 2 calls = $0.012; a third would reach $0.018
	} {
		tk := task("budget-"+name, "escalation-assistant")
		tk.Limits = &limits
		evs := b.waitEnd(b.submit(tk))
		assertTrail(t, evs, concat([]string{"started"}, okStep("get_procedure"), okStep("lookup_complaints"), []string{"finished:budget"}))
		fin := last[events.FinishedData](t, evs, events.TypeFinished)
		if fin.Totals.Usage.InputTokens != 840 || (name == "cost" && (fin.Totals.CostUSD < 0.0119 || fin.Totals.CostUSD > 0.0121)) {
			t.Errorf("%s: totals %+v", name, fin.Totals)
		}
		if p := last[events.ProposedData](t, evs, events.TypeProposed); p.CostUSD < 0.0059 || p.CostUSD > 0.0061 {
			t.Errorf("%s: proposed cost = %v, want $0.006", name, p.CostUSD)
		}
	}
}

// TestRefusedBatchesAreAppendedOneByOne: a pool that batches a step's
// events has every batch refused; it appends the events one by one
// instead, and the happy path ends as always. Two causes: a stream whose
// limit of open batches (50 by default) other writers hold (at 256 runs in
// flight on a 3-server cluster, refused batches used to interrupt the run:
// the next worker found the step's tool call unfinished and ran it
// again), and a server whose batch max_msgs is below a step's event count
// (that refusal used to be met again on every try of the step).
func TestRefusedBatchesAreAppendedOneByOne(t *testing.T) {
	t.Parallel()
	for _, cause := range []string{"open batches", "max_msgs"} {
		t.Run(cause, func(t *testing.T) {
			t.Parallel()
			o := options{batch: true}
			if cause == "max_msgs" {
				o.batchMaxMsgs = 2
			}
			b := setup(t, o)
			if cause == "open batches" {
				for i := range 50 {
					m := &nats.Msg{Subject: events.EventSubject("other", fmt.Sprintf("open-%d", i), events.TypeStarted), Data: []byte(`{}`), Header: nats.Header{}}
					m.Header.Set("Nats-Batch-Id", fmt.Sprintf("open-%d", i))
					m.Header.Set("Nats-Batch-Sequence", "1")
					if err := b.env.Conn.PublishMsg(m); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.env.Conn.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			runID := b.submit(task("refused-batches", "escalation-assistant"))
			b.autoApprove(runID, "supervisor@cityops", "approve", "")
			evs := b.waitEnd(runID)
			assertTrail(t, evs, happyTrail())
			if got := len(outboxFiles(t, b.outbox)); got != 3 {
				t.Errorf("%d drafts in the outbox, want 3", got)
			}
			logs := b.logs.String()
			if !strings.Contains(logs, "atomic batch refused; appending") {
				t.Errorf("no batch was refused, so the test tested nothing; log:\n%s", logs)
			}
			if strings.Contains(logs, "run interrupted") {
				t.Errorf("a refused batch interrupted the run; log:\n%s", logs)
			}
			for _, e := range evs {
				if e.Type == events.TypeExecuted && !strings.Contains(string(e.Data), `"status":"ok"`) {
					t.Errorf("executed %s: %s, want every call ok and run once", e.Tool, e.Data)
				}
			}
		})
	}
}
