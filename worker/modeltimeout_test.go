package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
)

// A model client's own request timeout (an SDK's per-request deadline)
// matches context.DeadlineExceeded though the run's active time is far
// from spent. It was recorded as the run's deadline, a stop the README
// gives only for a spent budget; it is the model failing (found by review).
func TestAModelClientTimeoutIsAnErrorNotTheRunsDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		agents: map[string]config.Profile{"timeout": {
			Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints"}, Roles: []string{"operator"},
		}},
		scripts: map[string]model.Model{"timeout": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			return model.Response{}, fmt.Errorf("POST /v1/responses: request timed out: %w", context.DeadlineExceeded)
		})},
	})
	runID := b.submit(task("timeout-1", "timeout"))
	evs := b.waitEnd(runID)
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	if fin.Reason != events.ReasonError || !strings.Contains(fin.Detail, "model failed") {
		t.Errorf("finished %s (%q), want error naming the model's failure", fin.Reason, fin.Detail)
	}
}
