package model_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
)

func mustScripted(t *testing.T, script string) *model.Scripted {
	t.Helper()
	s, err := model.NewScripted([]byte(script))
	if err != nil {
		t.Fatalf("NewScripted: %v", err)
	}
	return s
}

func propose(t *testing.T, m model.Model, step int) (model.Response, error) {
	t.Helper()
	return m.Propose(t.Context(), model.Request{RunID: "r-1", Agent: "escalation-assistant", Step: step})
}

func TestNewScriptedKeepsEachDecisionAsTheModelWouldWriteIt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		given string // one entry of "decisions"
		want  string // the output Propose returns for it
	}{
		{
			name:  "an object is returned verbatim, spacing and key order included",
			given: `{ "final_answer" : {"summary": "done"},  "tool_calls": null }`,
			want:  `{ "final_answer" : {"summary": "done"},  "tool_calls": null }`,
		},
		{
			name:  "an empty object is returned verbatim",
			given: `{}`,
			want:  `{}`,
		},
		{
			name:  "a string is returned as its raw text",
			given: `"I think I should look things up {"`,
			want:  `I think I should look things up {`,
		},
		{
			name:  "escapes in a string are decoded",
			given: `"line one\nsaid \"hi\" \u00e9"`,
			want:  "line one\nsaid \"hi\" é",
		},
		{
			name:  "an empty string is empty output",
			given: `""`,
			want:  ``,
		},
		{
			name:  "a string holding JSON is returned as that JSON text",
			given: `"{\"final_answer\":{\"summary\":\"x\"}}"`,
			want:  `{"final_answer":{"summary":"x"}}`,
		},
		{
			name:  "an array is returned verbatim, to script a wrong shape",
			given: `[1, 2]`,
			want:  `[1, 2]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustScripted(t, `{"decisions": [`+tt.given+`]}`)
			resp, err := propose(t, s, 1)
			if err != nil {
				t.Fatalf("Propose: %v", err)
			}
			if string(resp.Output) != tt.want {
				t.Errorf("Output = %q, want %q", resp.Output, tt.want)
			}
		})
	}
}

func TestNewScriptedRejectsMalformedScripts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		given   string
		wantErr string
	}{
		{name: "no decisions key", given: `{"repeat_last": true}`, wantErr: "/decisions: at least one decision is required"},
		{name: "empty decisions", given: `{"decisions": []}`, wantErr: "/decisions: at least one decision is required"},
		{name: "null decisions", given: `{"decisions": null}`, wantErr: "/decisions: at least one decision is required"},
		{name: "unknown top-level key", given: `{"decisions": ["x"], "repeat": true}`, wantErr: `unknown field "repeat"`},
		{name: "misspelt decisions", given: `{"decision": ["x"]}`, wantErr: `unknown field "decision"`},
		{name: "not JSON", given: `decisions: [x]`, wantErr: "parse script"},
		{name: "empty file", given: ``, wantErr: "parse script"},
		{name: "truncated JSON", given: `{"decisions": [{"final_answer":`, wantErr: "parse script"},
		{name: "a top-level array", given: `[{"final_answer":{"summary":"x"}}]`, wantErr: "parse script"},
		{name: "decisions not an array", given: `{"decisions": {"final_answer":{}}}`, wantErr: "parse script"},
		{name: "repeat_last not a boolean", given: `{"decisions": ["x"], "repeat_last": "yes"}`, wantErr: "parse script"},
		{name: "unknown usage key", given: `{"decisions": ["x"], "usage": {"tokens": 1}}`, wantErr: `unknown field "tokens"`},
		{name: "trailing data after the script", given: `{"decisions": ["x"]} {"decisions": ["y"]}`, wantErr: "after the script"},
		{name: "trailing garbage after the script", given: `{"decisions": ["x"]} ]`, wantErr: "after the script"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := model.NewScripted([]byte(tt.given))
			if err == nil {
				t.Fatalf("NewScripted(%s) = %+v, want error containing %q", tt.given, s, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewScripted(%s) error = %q, want it to contain %q", tt.given, err, tt.wantErr)
			}
		})
	}
}

func TestNewScriptedAcceptsTrailingWhitespace(t *testing.T) {
	t.Parallel()
	mustScripted(t, "{\"decisions\": [\"x\"]}\n\n\t ")
}

func TestScriptedProposeAnswersStepIWithDecisionI(t *testing.T) {
	t.Parallel()
	const script = `{
		"decisions": [{"tool_calls":[{"tool":"lookup","args":{}}]}, "two", {"final_answer":{"summary":"three"}}],
		"usage": {"input_tokens": 350, "output_tokens": 25}
	}`
	tests := []struct {
		name       string
		repeatLast bool
		step       int
		want       string
		wantErr    error
	}{
		{name: "step 1 is the first decision", step: 1, want: `{"tool_calls":[{"tool":"lookup","args":{}}]}`},
		{name: "step 2 is the second decision", step: 2, want: `two`},
		{name: "step 3 is the last decision", step: 3, want: `{"final_answer":{"summary":"three"}}`},
		{name: "past the end the script is exhausted", step: 4, wantErr: model.ErrScriptExhausted},
		{name: "far past the end the script is exhausted", step: 100, wantErr: model.ErrScriptExhausted},
		{name: "repeat_last: the last step is unchanged", repeatLast: true, step: 3, want: `{"final_answer":{"summary":"three"}}`},
		{name: "repeat_last: past the end repeats the last", repeatLast: true, step: 4, want: `{"final_answer":{"summary":"three"}}`},
		{name: "repeat_last: far past the end repeats the last", repeatLast: true, step: 100, want: `{"final_answer":{"summary":"three"}}`},
		{name: "repeat_last: earlier steps are unchanged", repeatLast: true, step: 2, want: `two`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			given := script
			if tt.repeatLast {
				given = strings.Replace(script, `"usage"`, `"repeat_last": true, "usage"`, 1)
			}
			resp, err := propose(t, mustScripted(t, given), tt.step)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Propose(step %d) error = %v, want %v", tt.step, err, tt.wantErr)
				}
				if want := fmt.Sprintf("step %d of a 3-decision script", tt.step); !strings.Contains(err.Error(), want) {
					t.Errorf("Propose(step %d) error = %q, want it to say %q", tt.step, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Propose(step %d): %v", tt.step, err)
			}
			if string(resp.Output) != tt.want {
				t.Errorf("Propose(step %d) = %q, want %q", tt.step, resp.Output, tt.want)
			}
			if want := (events.Usage{InputTokens: 350, OutputTokens: 25}); resp.Usage != want {
				t.Errorf("Usage = %+v, want %+v", resp.Usage, want)
			}
			if resp.Name != "scripted" {
				t.Errorf("Name = %q, want scripted", resp.Name)
			}
		})
	}
}

func TestScriptedProposeRejectsStepsBeforeOne(t *testing.T) {
	t.Parallel()
	s := mustScripted(t, `{"decisions": ["only"], "repeat_last": true}`)
	for _, step := range []int{0, -1} {
		_, err := propose(t, s, step)
		if err == nil || !strings.Contains(err.Error(), "steps start at 1") {
			t.Errorf("Propose(step %d) error = %v, want one saying steps start at 1", step, err)
		}
		if errors.Is(err, model.ErrScriptExhausted) {
			t.Errorf("Propose(step %d) error %v is ErrScriptExhausted", step, err)
		}
	}
}

func TestScriptedProposeHonoursACancelledContext(t *testing.T) {
	t.Parallel()
	s := mustScripted(t, `{"decisions": ["only"]}`)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	resp, err := s.Propose(ctx, model.Request{Step: 1})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Propose with a cancelled ctx error = %v, want context.Canceled", err)
	}
	if resp.Output != nil {
		t.Errorf("Propose with a cancelled ctx returned output %q", resp.Output)
	}
}

func TestScriptedUsageDefaultsToZero(t *testing.T) {
	t.Parallel()
	resp, err := propose(t, mustScripted(t, `{"decisions": ["x"]}`), 1)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage != (events.Usage{}) {
		t.Errorf("Usage = %+v, want zero", resp.Usage)
	}
}

func TestScriptedOutputIsTheCallersToChange(t *testing.T) {
	t.Parallel()
	script := []byte(`{"decisions": [{"final_answer":{"summary":"x"}}]}`)
	s, err := model.NewScripted(script)
	if err != nil {
		t.Fatal(err)
	}
	// Neither the script's bytes nor a returned output are shared.
	clear(script)
	first, err := propose(t, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	clear(first.Output)
	second, err := propose(t, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"final_answer":{"summary":"x"}}`; string(second.Output) != want {
		t.Errorf("Output after the caller changed an earlier one = %q, want %q", second.Output, want)
	}
}

func TestScriptedIsSafeForConcurrentRuns(t *testing.T) {
	t.Parallel()
	s := mustScripted(t, `{"decisions": ["one", "two"], "repeat_last": true}`)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for step := 1; step <= 20; step++ {
				resp, err := s.Propose(t.Context(), model.Request{RunID: fmt.Sprint("r-", g), Step: step})
				want := "two"
				if step == 1 {
					want = "one"
				}
				if err != nil || string(resp.Output) != want {
					t.Errorf("run %d step %d = %q, %v, want %q", g, step, resp.Output, err, want)
				}
			}
		})
	}
	wg.Wait()
}

func TestBuild(t *testing.T) {
	t.Parallel()
	const good = `{"decisions": [{"final_answer":{"summary":"ok"}}]}`
	files := map[string]string{
		"scripts/happy.json": good,
		"scripts/bad.json":   `{"decisions": []}`,
	}
	tests := []struct {
		name      string
		given     config.Model
		wantRead  []string
		wantErr   string
		wantErrIs error
	}{
		{
			name:     "scripted reads its script through readFile",
			given:    config.Model{Provider: "scripted", Script: "scripts/happy.json"},
			wantRead: []string{"scripts/happy.json"},
		},
		{
			name:      "scripted with a missing script",
			given:     config.Model{Provider: "scripted", Script: "scripts/missing.json"},
			wantRead:  []string{"scripts/missing.json"},
			wantErr:   `model: read script "scripts/missing.json"`,
			wantErrIs: fs.ErrNotExist,
		},
		{
			name:      "scripted without a script",
			given:     config.Model{Provider: "scripted"},
			wantRead:  []string{""},
			wantErr:   `model: read script ""`,
			wantErrIs: fs.ErrNotExist,
		},
		{
			name:     "scripted with a malformed script",
			given:    config.Model{Provider: "scripted", Script: "scripts/bad.json"},
			wantRead: []string{"scripts/bad.json"},
			wantErr:  `model: script "scripts/bad.json": parse script: /decisions`,
		},
		{
			name:    "an unknown provider",
			given:   config.Model{Provider: "oracle", Script: "scripts/happy.json"},
			wantErr: `model: unknown provider "oracle"`,
		},
		{
			name:    "no provider",
			given:   config.Model{},
			wantErr: `model: unknown provider ""`,
		},
		{
			name:    "provider names are case-sensitive",
			given:   config.Model{Provider: "Scripted", Script: "scripts/happy.json"},
			wantErr: `model: unknown provider "Scripted"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var read []string
			readFile := func(path string) ([]byte, error) {
				read = append(read, path)
				b, ok := files[path]
				if !ok {
					return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
				}
				return []byte(b), nil
			}
			m, err := model.Build(tt.given, readFile)
			if fmt.Sprint(read) != fmt.Sprint(tt.wantRead) {
				t.Errorf("readFile calls = %q, want %q", read, tt.wantRead)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Build error = %v, want it to contain %q", err, tt.wantErr)
				}
				if tt.wantErrIs != nil && !errors.Is(err, tt.wantErrIs) {
					t.Errorf("Build error = %v, want it to wrap %v", err, tt.wantErrIs)
				}
				if m != nil {
					t.Errorf("Build returned a model with its error: %v", m)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			resp, err := propose(t, m, 1)
			if err != nil {
				t.Fatalf("Propose: %v", err)
			}
			if string(resp.Output) != `{"final_answer":{"summary":"ok"}}` {
				t.Errorf("Output = %q, want the script's decision", resp.Output)
			}
		})
	}
}

func TestFuncIsAModel(t *testing.T) {
	t.Parallel()
	var m model.Model = model.Func(func(_ context.Context, req model.Request) (model.Response, error) {
		return model.Response{Output: []byte(fmt.Sprint("step ", req.Step)), Name: "func"}, nil
	})
	resp, err := propose(t, m, 7)
	if err != nil || string(resp.Output) != "step 7" {
		t.Errorf("Propose = %q, %v, want %q", resp.Output, err, "step 7")
	}
}
