package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
)

// A three-turn session: each run starts from the compacted memory of the
// earlier ones (what they were asked, what their tools said, what they
// answered), kept apart from the runs' events; constraints stay fields.
func TestASessionCarriesMemoryAcrossThreeRuns(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]events.SessionContext{} // by task input, what the model was shown
	answers := map[string]string{
		"which sanitation complaints are old?": "SR-10421, SR-10422 and SR-10423 are past 5 days.",
		"and the oldest of them?":              "SR-10421, open 9 days.",
		"draft for that one":                   "I would draft SR-10421 (the oldest, from earlier in this session).",
	}
	memory := model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
		var input string
		for _, turn := range req.History {
			switch turn.Role {
			case events.RoleSession:
				var s events.SessionContext
				_ = json.Unmarshal(turn.Content, &s)
				mu.Lock()
				defer mu.Unlock()
				defer func() { seen[input] = s }()
			case events.RoleUser:
				_ = json.Unmarshal(turn.Content, &input)
			}
		}
		if req.Step == 1 {
			return model.Response{Output: []byte(`{"tool_calls":[{"tool":"lookup_complaints","args":{"older_than_days":5}}]}`), Name: "memory"}, nil
		}
		out, _ := json.Marshal(map[string]any{"final_answer": map[string]string{"summary": answers[input]}})
		return model.Response{Output: out, Name: "memory"}, nil
	})
	b := setup(t, options{
		agents: map[string]config.Profile{"chat": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints"}, Roles: []string{"operator"},
			SessionBudgetBytes: 450, // small: the third run sees a summary
		}},
		scripts: map[string]model.Model{"chat": memory},
	})
	order := []string{"which sanitation complaints are old?", "and the oldest of them?", "draft for that one"}
	for i, input := range order {
		tk := task("sess-turn-"+string(rune('1'+i)), "chat")
		tk.Input, _ = json.Marshal(input)
		tk.SessionID = "desk-42"
		if i == 0 {
			tk.Constraints = map[string]string{"district": "north", "channel": "drafts only"}
		}
		evs := b.waitEnd(b.submit(tk))
		if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Reason != events.ReasonDone {
			t.Fatalf("run %d ended %s", i+1, fin.Reason)
		}
		st := last[events.StartedData](t, evs, events.TypeStarted)
		if st.Session == nil || st.Session.ID != "desk-42" {
			t.Fatalf("run %d started without its session: %+v", i+1, st.Session)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if s := seen[order[0]]; len(s.Turns) != 0 || s.Summary != "" {
		t.Errorf("the first run saw memory: %+v", s)
	}
	second := seen[order[1]]
	text := func(s events.SessionContext) string { b, _ := json.Marshal(s); return string(b) }
	if !strings.Contains(text(second), order[0]) || !strings.Contains(text(second), answers[order[0]]) {
		t.Errorf("the second run did not see the first exchange: %s", text(second))
	}
	if second.Constraints["district"] != "north" {
		t.Errorf("constraints not kept as fields: %v", second.Constraints)
	}
	third := seen[order[2]]
	if third.Summary == "" || !strings.Contains(text(third), answers[order[1]]) {
		t.Errorf("the third run should see a summary of old turns and the latest exchange: %s", text(third))
	}
	if third.Constraints["district"] != "north" || third.Constraints["channel"] != "drafts only" {
		t.Errorf("compaction touched the constraints: %v", third.Constraints)
	}
	if n := len(text(third)); n > 450 {
		t.Errorf("session memory of %d bytes is far over its budget", n)
	}
}

// With a step's events staged (serve's default), the final answer is
// durable before the session remembers it. A worker that dies in between
// leaves the model to be asked again; the session must hold the answer
// the run's trail holds, not one the trail never got.
func TestASessionRemembersOnlyAFinalAnswerTheTrailHolds(t *testing.T) {
	t.Parallel()
	var calls, died atomic.Int32
	answer := func(n int32) string { return fmt.Sprintf("answer %d", n) }
	m := model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
		out, _ := json.Marshal(map[string]any{"final_answer": map[string]string{"summary": answer(calls.Add(1))}})
		return model.Response{Output: out, Name: "memory"}, nil
	})
	b := setup(t, options{
		agents: map[string]config.Profile{"chat": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints"}, Roles: []string{"operator"},
		}},
		scripts:     map[string]model.Model{"chat": m},
		groupCommit: 2,
		crash: func(point string) {
			// Staged, the final decision's proposed is stored by the flush
			// its finish makes: die just before it, the first time.
			if point == "before:proposed" && died.Add(1) == 1 {
				runtime.Goexit()
			}
		},
		layout:  journal.Layout{AckWait: 500 * time.Millisecond},
		workers: 2,
	})
	tk := task("sess-crash-1", "chat")
	tk.SessionID = "desk-77"
	evs := b.waitEnd(b.submit(tk))
	if died.Load() == 0 {
		t.Fatal("no worker died before the final answer was stored")
	}
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	if fin.Final == nil || fin.Final.Summary != answer(calls.Load()) {
		t.Fatalf("finished with %+v after %d model calls", fin.Final, calls.Load())
	}
	kv, err := b.env.JS.KeyValue(t.Context(), "loopgate_sessions")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), "cityops.desk-77")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(e.Value()); !strings.Contains(got, fin.Final.Summary) || strings.Count(got, "answer ") != 1 {
		t.Errorf("the session remembers %s; want only the trail's final answer %q", got, fin.Final.Summary)
	}
}
