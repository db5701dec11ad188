// Package guard inspects what comes back from tools before a model reads
// it. Tool output is data, never instructions: loopgate hands it to the
// model under "data", and flags content that looks like an attempt to
// steer the model — "ignore previous instructions", chat role markers,
// text shaped like a tool call. A run whose context holds flagged content
// is tainted: from then on every write in it needs a human's approval.
package guard

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// Flag names a kind of suspicious content.
type Flag string

// Flags.
const (
	// Override: text telling the reader to drop its instructions.
	Override Flag = "instruction_override"
	// RoleMarker: chat-template or role markers that try to open a new turn.
	RoleMarker Flag = "role_marker"
	// ToolCall: text shaped like a tool call or a decision.
	ToolCall Flag = "tool_call_shape"
)

var detectors = []struct {
	flag Flag
	re   *regexp.Regexp
}{
	{Override, regexp.MustCompile(`(?i)\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(previous|prior|above|earlier|all|your|the)\b[^.\n]{0,20}\b(instructions?|prompts?|rules|directions)\b`)},
	{Override, regexp.MustCompile(`(?i)\byou are now\b|\bnew instructions?\s*:|\bsystem prompt\b`)},
	{RoleMarker, regexp.MustCompile(`(?i)<\|?(im_start|im_end|system|assistant|user)\|?>|(^|\n)\s*(system|assistant|developer)\s*:|\[/?INST\]|###\s*(instruction|system)`)},
	{ToolCall, regexp.MustCompile(`(?i)"(tool_calls|final_answer|function_call)"\s*:|"tool"\s*:\s*"[a-z_]+"\s*,\s*"(args|arguments)"`)},
}

// InspectJSON returns the flags raised by any string in a JSON document
// (keys and values, decoded as the model would read them). A document that
// is not JSON is inspected as text.
func InspectJSON(raw []byte) []Flag {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return Inspect(string(raw))
	}
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				b.WriteString(k)
				b.WriteByte('\n')
				walk(e)
			}
		}
	}
	walk(v)
	return Inspect(b.String())
}

// Inspect returns the flags raised by text, sorted and without repeats.
func Inspect(text string) []Flag {
	var flags []Flag
	for _, d := range detectors {
		if !slices.Contains(flags, d.flag) && d.re.MatchString(text) {
			flags = append(flags, d.flag)
		}
	}
	slices.Sort(flags)
	return flags
}
