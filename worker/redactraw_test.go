package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A tool (any language, over NATS or built in) whose JSON result repeats a
// name: the secret under the first "token" used to reach the executed
// event and the model's observation, because redaction decoded into a map
// (last value wins), found nothing to change and handed back the raw
// bytes. Every occurrence is redacted now; the vendor's name still shows.
func TestDuplicateNamesInAToolResultDoNotLeakSecrets(t *testing.T) {
	t.Parallel()
	m := tools.Manifest{
		Name: "vendor_lookup", Description: "test", Permission: tools.Read, Timeout: events.Duration(2 * time.Second),
		ArgsSchema: json.RawMessage(`{"type":"object"}`),
	}
	b := setup(t, options{
		tools: []tools.Manifest{m},
		builtins: tools.Builtins{"vendor_lookup": func(_ context.Context, c tools.Call) (any, error) {
			return json.RawMessage(`{"vendor":"acme","token":"tok-live-abcdef123456","token":null,"note":"mail jane.roe@example.com","note":"x"}`), nil
		}},
		roles:  writerRoles("vendor_lookup"),
		agents: map[string]config.Profile{"vendor": profile("vendor_lookup")},
		scripts: map[string]model.Model{"vendor": scripted(t,
			`{"tool_calls":[{"tool":"vendor_lookup","args":{}}]}`,
			`{"final_answer":{"summary":"looked up"}}`)},
	})
	runID := b.submit(task("dup-names-1", "vendor"))
	evs := loadEnded(t, b, runID)
	if x := all(evs, events.TypeExecuted); len(x) != 1 || !strings.Contains(string(x[0].Data), `"vendor":"acme"`) {
		t.Fatalf("precondition: one executed event with the tool's result: %v", x)
	}
	for _, e := range evs {
		for _, secret := range []string{"tok-live-abcdef123456", "jane.roe@example.com"} {
			if strings.Contains(string(e.Data), secret) {
				t.Errorf("%s event %d holds %q: %s", e.Type, e.Seq, secret, e.Data)
			}
		}
	}
}

// loadEnded is waitEnd without its envelope checks (the stored executed
// event keeps the tool's repeated names, which event.schema.json refuses).
func loadEnded(t *testing.T, b *bundle, runID string) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for e, err := range b.env.Journal.Watch(ctx, events.RunFilter("cityops", runID)) {
		if err != nil {
			t.Fatalf("watch run %s: %v", runID, err)
		}
		if e.Type == events.TypeFinished || e.Type == events.TypeRejected {
			break
		}
	}
	evs, _, err := b.env.Journal.Load(t.Context(), "cityops", runID)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// A malformed decision is kept in the proposed event as raw text, which is
// redacted with the patterns alone: the model's "password":"…" (a value
// under a sensitive key, which every event redacts) used to reach the
// audit stream, because the credential pattern wanted password= or
// password: unquoted. The quoted form is a credential too now.
func TestAMalformedDecisionsSensitiveValuesAreRedacted(t *testing.T) {
	t.Parallel()
	m := tools.Manifest{
		Name: "vendor_login", Description: "test", Permission: tools.Read, Timeout: events.Duration(2 * time.Second),
		ArgsSchema: json.RawMessage(`{"type":"object","properties":{"user":{"type":"string"},"password":{"type":"string"}}}`),
	}
	b := setup(t, options{
		tools: []tools.Manifest{m},
		builtins: tools.Builtins{"vendor_login": func(context.Context, tools.Call) (any, error) {
			return map[string]string{"ok": "yes"}, nil
		}},
		roles:  writerRoles("vendor_login"),
		agents: map[string]config.Profile{"vendor": profile("vendor_login")},
		scripts: map[string]model.Model{"vendor": model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
			if req.Step == 1 { // one brace short
				return model.Response{Output: []byte(`{"tool_calls":[{"tool":"vendor_login","args":{"user":"ops","password":"hunter2-secret"}}]`), Name: "vendor"}, nil
			}
			return model.Response{Output: []byte(`{"final_answer":{"summary":"gave up"}}`), Name: "vendor"}, nil
		})},
	})
	evs := b.waitEnd(b.submit(task("malformed-secret-1", "vendor")))
	if p := all(evs, events.TypeProposed); len(p) == 0 || !strings.Contains(string(p[0].Data), "vendor_login") {
		t.Fatalf("precondition: the first proposal's raw text is not kept: %v", p)
	}
	for _, e := range evs {
		if strings.Contains(string(e.Data), "hunter2-secret") {
			t.Errorf("%s event %d holds the password: %s", e.Type, e.Seq, e.Data)
		}
	}
}
