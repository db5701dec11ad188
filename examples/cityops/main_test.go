package cityops

import (
	"context"
	"encoding/json"
	"testing"

	"go.uber.org/goleak"

	"github.com/loopgate/loopgate/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bundle is what most tests need: the registered tools and their outbox.
type bundle struct {
	builtins tools.Builtins
	outbox   string
}

func setup(t *testing.T, opts Options) bundle {
	t.Helper()
	if opts.Outbox == "" {
		opts.Outbox = t.TempDir() + "/outbox"
	}
	b := tools.Builtins{}
	if err := Register(b, opts); err != nil {
		t.Fatalf("Register: %v", err)
	}
	return bundle{builtins: b, outbox: opts.Outbox}
}

// call runs tool with args (raw JSON) as loopgate would.
func (bu bundle) call(ctx context.Context, t *testing.T, tool, opID, args string) (any, error) {
	t.Helper()
	fn, ok := bu.builtins[tool]
	if !ok {
		t.Fatalf("tool %q not registered", tool)
	}
	return fn(ctx, tools.Call{Tool: tool, OperationID: opID, RunID: "run-1", CallID: "s1c1", Tenant: "cityops", Principal: "dev", Args: json.RawMessage(args)})
}

// asJSON marshals a tool result the way loopgate records it.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal result: %v", err)
	}
	return string(b)
}
