package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// resolverRun is a run of one call to a read tool whose id argument is
// resolved by owner, with MaxDeliver 2.
func resolverRun(t *testing.T, owner tools.Func) *bundle {
	look := fakeTool("look", tools.Read, false)
	look.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)
	look.Resources = []tools.ResourceArg{{Arg: "id", Resolver: "owner"}}
	return setup(t, options{
		tools: []tools.Manifest{look},
		builtins: tools.Builtins{
			"look":  func(context.Context, tools.Call) (any, error) { return map[string]int{"ok": 1}, nil },
			"owner": owner,
		},
		roles:   operatorMay("look"),
		agents:  map[string]config.Profile{"res-agent": profile("look")},
		scripts: map[string]model.Model{"res-agent": scripted(t, `{"tool_calls":[{"tool":"look","args":{"id":"SR-1"}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{MaxDeliver: 2},
		retry:   20 * time.Millisecond,
	})
}

// A resolver that never answers times out (5s) on each delivery of the
// run's message, and the run is stopped with the cause once they are
// spent. Its timeout used to be taken for JetStream not answering: the
// message was held and the resolver asked again for ever, the run
// neither going on nor ending.
func TestAResolverThatNeverAnswersStopsTheRunAfterItsDeliveries(t *testing.T) {
	t.Parallel()
	b := resolverRun(t, blockUntilCleanup(t, map[string]any{"found": true, "tenant": "cityops"}))
	evs := b.waitEnd(b.submit(task("res-hung", "res-agent")))
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	if fin.Reason != events.ReasonError || !strings.Contains(fin.Detail, `resolver "owner": context deadline exceeded`) {
		t.Errorf("finished %s (%s), want error naming the resolver's timeout", fin.Reason, fin.Detail)
	}
	if logs := b.logs.String(); strings.Contains(logs, "JetStream cannot store") {
		t.Errorf("a resolver's timeout was taken for an outage of JetStream:\n%s", logs)
	}
}

// A resolver's answer that is not {found, tenant} is quoted by its start
// in the error that ends the run, not whole: it is tool output.
func TestAMalformedResolverAnswerIsQuotedByItsStart(t *testing.T) {
	t.Parallel()
	b := resolverRun(t, func(context.Context, tools.Call) (any, error) { return []string{strings.Repeat("x", 200<<10)}, nil })
	evs := b.waitEnd(b.submit(task("res-junk", "res-agent")))
	fin := last[events.FinishedData](t, evs, events.TypeFinished)
	if fin.Reason != events.ReasonError || !strings.Contains(fin.Detail, `resolver "owner" answered "[\"xxx`) || !strings.Contains(fin.Detail, fmt.Sprintf("(%d bytes), not {found, tenant}", 200<<10+len(`[""]`))) {
		t.Errorf("finished %s, detail %.300q: want error quoting the answer's start and its size", fin.Reason, fin.Detail)
	}
	if len(fin.Detail) > 2<<10 {
		t.Errorf("finished detail of %d bytes quotes the resolver's answer whole", len(fin.Detail))
	}
}
