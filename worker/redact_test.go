package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// Sensitive values — in the task, in arguments, in tool results, in a
// rejected message — never reach the audit stream in full, and the model's
// observations are redacted too; the tool still gets the real arguments.
func TestSensitiveValuesNeverReachTheAuditStream(t *testing.T) {
	t.Parallel()
	var gotPassword atomic.Value
	m := tools.Manifest{
		Name: "vendor_login", Description: "test", Permission: tools.Read, Timeout: events.Duration(2 * time.Second),
		ArgsSchema: json.RawMessage(`{"type":"object","properties":{"user":{"type":"string"},"password":{"type":"string"}}}`),
	}
	b := setup(t, options{
		tools: []tools.Manifest{m},
		builtins: tools.Builtins{"vendor_login": func(_ context.Context, c tools.Call) (any, error) {
			var a struct{ Password string }
			_ = json.Unmarshal(c.Args, &a)
			gotPassword.Store(a.Password)
			return map[string]string{"contact": "reach the resident at jane.roe@example.com or 555-0199", "ssn": "123-45-6789", "token": "tok-abcdef123456"}, nil
		}},
		roles:  writerRoles("vendor_login"),
		agents: map[string]config.Profile{"vendor": profile("vendor_login")},
		scripts: map[string]model.Model{"vendor": scripted(t,
			`{"tool_calls":[{"tool":"vendor_login","args":{"user":"ops","password":"hunter2-secret"}}]}`,
			`{"final_answer":{"summary":"logged in"}}`)},
	})
	tk := task("secret-1", "vendor")
	tk.Input = json.RawMessage(`"the resident (jane.roe@example.com, 555-0199) asked; card 4111 1111 1111 1111"`)
	runID := b.submit(tk)
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, okStep("vendor_login"), []string{"proposed:final", "finished:done"}))
	if gotPassword.Load() != "hunter2-secret" {
		t.Errorf("the tool got password %v, want the real one", gotPassword.Load())
	}
	// A rejected message with the same data is redacted too.
	ack := b.publishRaw("cityops", []byte(`not json but a password=hunter2-secret and jane.roe@example.com`), "")
	rejected := b.waitEnd(events.RejectedRunID("cityops", ack.Sequence))
	all := append(evs, rejected...)
	for _, e := range all {
		for _, secret := range []string{"hunter2-secret", "jane.roe@example.com", "555-0199", "123-45-6789", "4111 1111", "tok-abcdef123456"} {
			if strings.Contains(string(e.Data), secret) {
				t.Errorf("%s event %d holds %q: %s", e.Type, e.Seq, secret, e.Data)
			}
		}
	}
	v := last[events.ValidatedData](t, evs, events.TypeValidated)
	if !v.Redacted || !strings.Contains(string(v.Args), "[redacted]") {
		t.Errorf("validated = %+v, want redacted args", v)
	}
	obs := string(last[events.ObservedData](t, evs, events.TypeObserved).Observation)
	if !strings.Contains(obs, "[email]") || !strings.Contains(obs, "[phone]") {
		t.Errorf("the model's observation is not redacted: %s", obs)
	}
}
