package providers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/providers"
	"github.com/loopgate/loopgate/tools"
)

// A provider under the conformance suite: newModel returns a model that
// answers the k-th Propose with answers[k-1], the last answer repeating,
// and requests says how many requests reached the provider's server
// (always 0 for a model with no server).
type conformanceSubject struct {
	newModel func(t *testing.T, answers ...answer) (m providers.Model, requests func() int)
}

// TestConformance runs the behaviour every Model must share against each
// provider: the scripted model, and the HTTP providers against fake
// servers speaking their wire formats (which check the protocol rules on
// every request).
func TestConformance(t *testing.T) {
	t.Parallel()
	subjects := map[string]conformanceSubject{
		"scripted": {newModel: func(t *testing.T, answers ...answer) (providers.Model, func() int) {
			// A script holds loopgate decisions, which is what the
			// providers translate their answers into.
			var script struct {
				Decisions  []json.RawMessage `json:"decisions"`
				RepeatLast bool              `json:"repeat_last"`
				Usage      events.Usage      `json:"usage"`
			}
			script.RepeatLast = true
			for _, a := range answers {
				script.Decisions = append(script.Decisions, decisionOf(a))
				script.Usage = a.usage // the scripted model has one usage for all
			}
			b, _ := json.Marshal(script)
			s, err := model.NewScripted(b)
			if err != nil {
				t.Fatal(err)
			}
			return s, func() int { return 0 }
		}},
		"openai": {newModel: func(t *testing.T, answers ...answer) (providers.Model, func() int) {
			f := newFakeOpenAI(t, "sk-conformance-key", []tools.Spec{lookupSpec, statusSpec})
			var replies []reply
			for _, a := range answers {
				replies = append(replies, ok(a))
			}
			f.script(replies...)
			m, err := providers.NewOpenAI(&providers.OpenAIConfig{BaseURL: f.baseURL(), Model: "gpt-4.1", APIKey: "sk-conformance-key", Retry: fastRetry(nil)})
			if err != nil {
				t.Fatal(err)
			}
			return m, f.count
		}},
		"anthropic": {newModel: func(t *testing.T, answers ...answer) (providers.Model, func() int) {
			f := newFakeAnthropic(t, "sk-ant-conformance-key", []tools.Spec{lookupSpec, statusSpec})
			var replies []reply
			for _, a := range answers {
				replies = append(replies, ok(a))
			}
			f.script(replies...)
			m, err := providers.NewAnthropic(&providers.AnthropicConfig{BaseURL: f.baseURL(), Model: "claude-sonnet-4-5", APIKey: "sk-ant-conformance-key", Retry: fastRetry(nil)})
			if err != nil {
				t.Fatal(err)
			}
			return m, f.count
		}},
	}
	for name, s := range subjects {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runConformance(t, s)
		})
	}
}

// decisionOf is an answer as loopgate's decision: what every provider
// must turn it into.
func decisionOf(a answer) json.RawMessage {
	if len(a.calls) == 0 {
		b, _ := json.Marshal(map[string]any{"final_answer": map[string]any{"summary": a.text}})
		return b
	}
	var calls []any
	for _, c := range a.calls {
		calls = append(calls, map[string]any{"tool": c.name, "args": json.RawMessage(c.args), "provider_id": c.id})
	}
	b, _ := json.Marshal(map[string]any{"tool_calls": calls})
	return b
}

func conformanceRequest(step int) providers.Request {
	in, _ := json.Marshal("Escalate the oldest open sanitation complaints.")
	return providers.Request{
		RunID: "cityops-t-1", Agent: "helper", Instructions: "You are the CityOps assistant.", Step: step,
		History: []events.Turn{{Role: events.RoleUser, Content: in}},
		Tools:   []tools.Spec{lookupSpec, statusSpec},
	}
}

func runConformance(t *testing.T, s conformanceSubject) {
	oneCall := answer{calls: []answerCall{{id: "call_1", name: "lookup_complaints", args: `{"category":"sanitation","limit":3}`}}, usage: events.Usage{InputTokens: 120, OutputTokens: 18}}
	twoCalls := answer{calls: []answerCall{
		{id: "call_1", name: "complaint_status", args: `{"request_id":"SR-10422"}`},
		{id: "call_2", name: "complaint_status", args: `{"request_id":"SR-10488"}`},
	}}
	final := answer{text: "Drafted two escalations; they await approval.", usage: events.Usage{InputTokens: 300, OutputTokens: 12}}

	t.Run("returns valid decision JSON for a tool call", func(t *testing.T) {
		t.Parallel()
		m, _ := s.newModel(t, oneCall)
		resp, err := m.Propose(t.Context(), conformanceRequest(1))
		if err != nil {
			t.Fatalf("Propose: %v", err)
		}
		d := mustDecision(t, resp.Output)
		if len(d.ToolCalls) != 1 || d.Final != nil {
			t.Fatalf("decision = %+v, want one call", d)
		}
		c := d.ToolCalls[0]
		if c.Tool != "lookup_complaints" || !sameJSON(c.Args, []byte(`{"category":"sanitation","limit":3}`)) || c.ProviderID != "call_1" {
			t.Errorf("call = %s %s %q, want lookup_complaints with the model's arguments and provider id call_1", c.Tool, c.Args, c.ProviderID)
		}
	})

	t.Run("returns every call of a parallel answer in order", func(t *testing.T) {
		t.Parallel()
		m, _ := s.newModel(t, twoCalls)
		resp, err := m.Propose(t.Context(), conformanceRequest(1))
		if err != nil {
			t.Fatalf("Propose: %v", err)
		}
		d := mustDecision(t, resp.Output)
		var got []string
		for _, c := range d.ToolCalls {
			got = append(got, fmt.Sprintf("%s %s %s", c.ProviderID, c.Tool, c.Args))
		}
		want := []string{`call_1 complaint_status {"request_id":"SR-10422"}`, `call_2 complaint_status {"request_id":"SR-10488"}`}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("calls = %q, want %q", got, want)
		}
	})

	t.Run("returns a text answer as the final answer", func(t *testing.T) {
		t.Parallel()
		m, _ := s.newModel(t, final)
		resp, err := m.Propose(t.Context(), conformanceRequest(1))
		if err != nil {
			t.Fatalf("Propose: %v", err)
		}
		d := mustDecision(t, resp.Output)
		if d.Final == nil || d.Final.Summary != final.text || len(d.ToolCalls) != 0 {
			t.Errorf("decision = %s, want the final answer %q", resp.Output, final.text)
		}
	})

	t.Run("reports usage and its name", func(t *testing.T) {
		t.Parallel()
		m, _ := s.newModel(t, final)
		resp, err := m.Propose(t.Context(), conformanceRequest(1))
		if err != nil {
			t.Fatalf("Propose: %v", err)
		}
		if resp.Usage != final.usage {
			t.Errorf("Usage = %+v, want %+v", resp.Usage, final.usage)
		}
		if resp.Name == "" {
			t.Error("Name is empty: the audit trail cannot say which model answered")
		}
	})

	t.Run("answers step after step", func(t *testing.T) {
		t.Parallel()
		m, _ := s.newModel(t, oneCall, final)
		first, err := m.Propose(t.Context(), conformanceRequest(1))
		if err != nil {
			t.Fatalf("Propose step 1: %v", err)
		}
		if d := mustDecision(t, first.Output); len(d.ToolCalls) != 1 {
			t.Errorf("step 1 = %s, want a call", first.Output)
		}
		// Step 2's request carries step 1's turn and its observation.
		req := conformanceRequest(2)
		d := mustDecision(t, first.Output)
		d.ToolCalls[0].ID = events.CallID(1, 1)
		req.History = append(req.History,
			events.Turn{Role: events.RoleAssistant, Step: 1, Decision: d, ProviderMessage: first.Message},
			events.Turn{Role: events.RoleObservation, Step: 1, CallID: "s1c1", Tool: "lookup_complaints", ProviderCallID: d.ToolCalls[0].ProviderID, Content: json.RawMessage(`{"status":"ok","data":[]}`)},
		)
		second, err := m.Propose(t.Context(), req)
		if err != nil {
			t.Fatalf("Propose step 2: %v", err)
		}
		if d := mustDecision(t, second.Output); d.Final == nil {
			t.Errorf("step 2 = %s, want the final answer", second.Output)
		}
	})

	t.Run("honours a cancelled ctx", func(t *testing.T) {
		t.Parallel()
		m, requests := s.newModel(t, final)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		resp, err := m.Propose(ctx, conformanceRequest(1))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Propose with a cancelled ctx: error = %v, want context.Canceled", err)
		}
		if resp.Output != nil {
			t.Errorf("Propose with a cancelled ctx returned output %s", resp.Output)
		}
		if n := requests(); n != 0 {
			t.Errorf("%d requests sent with a cancelled ctx", n)
		}
	})

	t.Run("honours a passed deadline", func(t *testing.T) {
		t.Parallel()
		m, _ := s.newModel(t, final)
		ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := m.Propose(ctx, conformanceRequest(1)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Propose past the deadline: error = %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("is safe for concurrent runs", func(t *testing.T) {
		t.Parallel()
		m, _ := s.newModel(t, oneCall)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for step := 1; step <= 3; step++ {
					req := conformanceRequest(step)
					req.RunID = fmt.Sprint("run-", g)
					resp, err := m.Propose(t.Context(), req)
					if err != nil {
						t.Errorf("run %d step %d: %v", g, step, err)
						return
					}
					mustDecision(t, resp.Output)
				}
			})
		}
		wg.Wait()
	})

	t.Run("gives output that is the caller's", func(t *testing.T) {
		t.Parallel()
		m, _ := s.newModel(t, final)
		first, err := m.Propose(t.Context(), conformanceRequest(1))
		if err != nil {
			t.Fatal(err)
		}
		clear(first.Output)
		second, err := m.Propose(t.Context(), conformanceRequest(1))
		if err != nil {
			t.Fatal(err)
		}
		mustDecision(t, second.Output)
	})
}

// fastRetry is the default policy with its waits recorded instead of
// slept: tests wait on nothing.
func fastRetry(slept *[]time.Duration) providers.Retry {
	var mu sync.Mutex
	return providers.Retry{
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			if slept != nil {
				*slept = append(*slept, d)
			}
			return ctx.Err()
		},
	}
}
