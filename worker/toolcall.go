package worker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// callTool runs fn on call in a goroutine of its own and returns its
// result as JSON. The tool is held to ctx: when ctx is done callTool stops
// waiting and returns ctx's error (whether the tool stops is up to the
// tool, as tools.Func says). The result is encoded in the tool's goroutine,
// under the same recover as the tool, so neither a panicking tool nor a
// result whose encoding panics (a nil pointer's method, say) can take the
// worker down; both are errors of the tool.
func callTool(ctx context.Context, fn tools.Func, call tools.Call) (json.RawMessage, error) {
	type result struct {
		b   json.RawMessage
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("tool panicked: %v", p)}
			}
		}()
		v, err := fn(ctx, call)
		if err != nil {
			done <- result{err: err}
			return
		}
		// As events store it, without HTML escapes: the result is
		// bounded in bytes (maxRecordedResult) before it is stored.
		b, err := events.EncodeData(v)
		if err != nil {
			err = fmt.Errorf("result does not marshal: %w", err)
		}
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		return res.b, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
