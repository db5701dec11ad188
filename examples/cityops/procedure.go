package cityops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/loopgate/loopgate/tools"
)

// procedureArgs are get_procedure's arguments.
type procedureArgs struct {
	Topic string `json:"topic"`
}

// maxTopicLen mirrors schemas/get_procedure.schema.json.
const maxTopicLen = 64

// procedureResult is get_procedure's answer for a known topic.
type procedureResult struct {
	Topic     string `json:"topic"`
	Procedure string `json:"procedure"`
}

// procedureMiss is get_procedure's answer for an unknown topic: data the
// model can act on (pick a listed topic), not a failure.
type procedureMiss struct {
	Topic  string   `json:"topic"`
	Found  bool     `json:"found"`
	Topics []string `json:"topics"`
}

// getProcedure is the get_procedure tool. Topics match ignoring ASCII case
// and surrounding ASCII space, and nothing else: the Node.js service of the
// same tool (examples/node-tool) must give the same answers, and Go's and
// JavaScript's Unicode case and space rules differ ("İ", U+0085, U+FEFF).
func (ts *toolset) getProcedure(_ context.Context, call tools.Call) (any, error) {
	var a procedureArgs
	if err := decodeStrict(call.Args, &a); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", call.Tool, errInvalidArgs, err)
	}
	if n := utf8.RuneCountInString(a.Topic); n < 1 || n > maxTopicLen {
		return nil, fmt.Errorf("%s: %w: topic must be 1..%d characters", call.Tool, errInvalidArgs, maxTopicLen)
	}
	topic := asciiLower(strings.Trim(a.Topic, asciiSpace))
	p, ok := ts.data.procedures[topic]
	if !ok {
		return procedureMiss{Topic: a.Topic, Found: false, Topics: slices.Clone(ts.data.topics)}, nil
	}
	return procedureResult{Topic: topic, Procedure: p.text()}, nil
}

// asciiSpace is the white space a topic is trimmed of.
const asciiSpace = " \t\n\v\f\r"

// asciiLower lower-cases the ASCII letters of s, and only those.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
