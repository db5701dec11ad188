package model

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/loopgate/loopgate/events"
)

// Scripted replays recorded decisions: decision i answers step i. It keeps
// no state between calls, so a run resumed by another worker, or replayed,
// gets the same answers.
type Scripted struct {
	decisions  [][]byte
	repeatLast bool
	usage      events.Usage
}

// scriptFile is the on-disk form of a script.
type scriptFile struct {
	// Decisions are raw model outputs: a JSON object is returned verbatim; a
	// JSON string is returned as its text, to script malformed output.
	Decisions []json.RawMessage `json:"decisions"`
	// RepeatLast answers every step past the end with the last decision.
	RepeatLast bool `json:"repeat_last"`
	// Usage is recorded for each decision.
	Usage events.Usage `json:"usage"`
}

// NewScripted parses a script file.
func NewScripted(script []byte) (*Scripted, error) {
	dec := json.NewDecoder(bytes.NewReader(script))
	dec.DisallowUnknownFields()
	var f scriptFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse script: %w", err)
	}
	// Decode stops after the first value; a second one, or garbage, means
	// the file is not the script it looks like.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("parse script: unexpected data after the script at offset %d", dec.InputOffset())
	}
	if len(f.Decisions) == 0 {
		return nil, fmt.Errorf("parse script: /decisions: at least one decision is required")
	}
	s := &Scripted{repeatLast: f.RepeatLast, usage: f.Usage}
	for i, d := range f.Decisions {
		var text string
		if err := json.Unmarshal(d, &text); err == nil {
			s.decisions = append(s.decisions, []byte(text))
			continue
		}
		if !json.Valid(d) {
			return nil, fmt.Errorf("parse script: /decisions/%d: not JSON", i)
		}
		s.decisions = append(s.decisions, bytes.Clone(d))
	}
	return s, nil
}

// Propose returns the decision recorded for req.Step.
func (s *Scripted) Propose(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	i := req.Step - 1
	if i < 0 {
		return Response{}, fmt.Errorf("scripted model: step %d: steps start at 1", req.Step)
	}
	if i >= len(s.decisions) {
		if !s.repeatLast {
			return Response{}, fmt.Errorf("scripted model: step %d of a %d-decision script: %w", req.Step, len(s.decisions), ErrScriptExhausted)
		}
		i = len(s.decisions) - 1
	}
	return Response{Output: bytes.Clone(s.decisions[i]), Usage: s.usage, Name: "scripted"}, nil
}
