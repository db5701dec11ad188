package sessions_test

import (
	"strings"
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/sessions"
)

func TestCompactDropsToolResultsFirstThenSummarizesAndKeepsConstraints(t *testing.T) {
	t.Parallel()
	s := &sessions.Session{ID: "s1", Constraints: map[string]string{"district": "north", "never": "contact residents"}}
	for i, text := range []string{"escalate sanitation", "drafted SR-10421", "now the noise ones", "none are old enough"} {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		s.Turns = append(s.Turns, events.SessionTurn{RunID: "r", Role: role, Text: text})
		s.Turns = append(s.Turns, events.SessionTurn{RunID: "r", Role: "tool", Text: strings.Repeat("x", 400)})
	}
	budget := s.Size() - 500 // must drop at least two tool turns
	if err := s.Compact(t.Context(), budget, sessions.Clip); err != nil {
		t.Fatal(err)
	}
	if s.Size() > budget {
		t.Fatalf("size %d over budget %d", s.Size(), budget)
	}
	if s.Summary != "" || s.Turns[0].Role != "user" {
		t.Errorf("with tool turns to drop, nothing should be summarized yet: %q, %+v", s.Summary, s.Turns[0])
	}
	if err := s.Compact(t.Context(), 300, sessions.Clip); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Summary, "escalate sanitation") {
		t.Errorf("the oldest exchange was not summarized: %q", s.Summary)
	}
	for _, tt := range s.Turns {
		if tt.Role == "tool" {
			t.Errorf("a tool turn survived compaction before summarizing: %+v", tt)
		}
	}
	if s.Constraints["district"] != "north" || s.Constraints["never"] != "contact residents" {
		t.Errorf("constraints changed: %v", s.Constraints)
	}
}
