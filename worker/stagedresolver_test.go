package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// With a step's events staged (StageEvents, as serve runs on its
// embedded server; BatchEvents on a cluster), the proposed event is still
// only in memory when the call's resource resolver is asked (authorization,
// runCalls). A resolver that fails once (a remote tool service restarting)
// makes the worker hand the message back with the staged events dropped:
// the next delivery asks the model again for the same step. Its first
// answer, and the tokens it cost, are in no event: the token budget never
// sees them, and the run goes on with a different decision than the one
// the model first made (found by review). The staged events are now
// stored before the error hands the run back, as without staging, where
// the proposal is stored before the resolver is asked and the redelivery
// goes on from it.
func TestAStagedProposalIsStoredBeforeAFailedResolverHandsTheRunBack(t *testing.T) {
	for _, staged := range []bool{false, true} {
		name := map[bool]string{false: "one-by-one", true: "staged"}[staged]
		t.Run(name, func(t *testing.T) {
			var proposals, resolves atomic.Int32
			look := fakeTool("look", tools.Read, false)
			look.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)
			look.Resources = []tools.ResourceArg{{Arg: "id", Resolver: "owner"}}
			o := options{
				tools: []tools.Manifest{look},
				builtins: tools.Builtins{
					"look": func(context.Context, tools.Call) (any, error) { return map[string]int{"ok": 1}, nil },
					"owner": func(context.Context, tools.Call) (any, error) {
						if resolves.Add(1) == 1 {
							return nil, errors.New("owner service restarting")
						}
						return map[string]any{"found": true, "tenant": "cityops"}, nil
					},
				},
				roles:  operatorMay("look"),
				agents: map[string]config.Profile{"res-agent": profile("look")},
				scripts: map[string]model.Model{"res-agent": model.Func(func(_ context.Context, req model.Request) (model.Response, error) {
					out := `{"final_answer":{"summary":"ok"}}`
					if req.Step == 1 {
						proposals.Add(1)
						out = `{"tool_calls":[{"tool":"look","args":{"id":"SR-1"}}]}`
					}
					return model.Response{Output: []byte(out), Name: "res-agent", Usage: events.Usage{InputTokens: 100, OutputTokens: 10}}, nil
				})},
				layout: journal.Layout{MaxDeliver: 3},
				retry:  20 * time.Millisecond,
			}
			if staged {
				o.groupCommit = 2
			}
			b := setup(t, o)
			evs := b.waitEnd(b.submit(task("res-staged-"+name, "res-agent")))
			fin := last[events.FinishedData](t, evs, events.TypeFinished)
			n := len(all(evs, events.TypeProposed))
			t.Logf("finished %s; model asked %d times for step 1; %d proposed events; tokens recorded %+v", fin.Reason, proposals.Load(), n, fin.Totals.Usage)
			if got := proposals.Load(); got != 1 {
				t.Errorf("the model was asked %d times for step 1 (one decision recorded for it); tokens charged %d of %d spent",
					got, fin.Totals.Usage.InputTokens+fin.Totals.Usage.OutputTokens, int(got+1)*110)
			}
		})
	}
}
