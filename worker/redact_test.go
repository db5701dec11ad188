package worker_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
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

// A call whose arguments hold sensitive values is stored with them
// replaced, so only the worker that proposed it knows them. That worker
// must run the call with the real ones even when it has to reload the
// run first (another writer, here the approvals handler recording a
// message it rejects, appended between its proposed and validated); a
// worker that takes the run up after it died must not validate (or run,
// or have approved) the placeholders: it asks the model to propose again.
func TestAProposalsSensitiveArgumentsAreNeverRunAsPlaceholders(t *testing.T) {
	t.Parallel()
	const call = `{"tool_calls":[{"tool":"create_ticket","args":{"notify":"alice@example.com","password":"hunter2"}}]}`
	for _, crash := range []bool{false, true} {
		name := map[bool]string{false: "another writer between proposed and validated", true: "the proposer dies after proposed"}[crash]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var (
				runs, passed atomic.Int32
				mu           sync.Mutex
				got          []string
			)
			m, fns := ungated("create_ticket", &runs, func(ctx context.Context, c tools.Call) (any, error) {
				mu.Lock()
				got = append(got, string(c.Args))
				mu.Unlock()
				return map[string]string{"ticket": "T-1"}, nil
			})
			m.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"notify":{"type":"string"},"password":{"type":"string"}}}`)
			tk := task("placeholders-"+map[bool]string{false: "race", true: "crash"}[crash], "ticketer")
			runID := events.RunID(tk.Tenant, tk.TaskID)
			var b *bundle
			b = setup(t, options{
				tools: []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
				agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
				scripts: map[string]model.Model{"ticketer": scripted(t, call, `{"final_answer":{"summary":"ok"}}`)},
				layout:  journal.Layout{AckWait: 500 * time.Millisecond},
				crash: func(point string) {
					if point != "after:proposed" || passed.Add(1) != 1 {
						return
					}
					if crash {
						runtime.Goexit()
					}
					b.publishMessage(map[string]string{"junk": "x"}, runID, "s1c1")
					b.waitType(runID, events.TypeApprovalRejected, 1)
				},
				workers: 2,
			})
			b.submit(tk)
			evs := b.waitEnd(runID)
			if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Reason != events.ReasonDone {
				t.Fatalf("finished %s: %s", fin.Reason, fin.Detail)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, args := range got {
				if !strings.Contains(args, "alice@example.com") || !strings.Contains(args, "hunter2") {
					t.Errorf("the tool ran with %s, not the proposed arguments", args)
				}
			}
			if p := last[events.ProposedData](t, []events.Event{all(evs, events.TypeProposed)[0]}, events.TypeProposed); !p.Decision.ToolCalls[0].Redacted {
				t.Errorf("the stored proposal does not say its arguments were redacted: %+v", p.Decision.ToolCalls[0])
			}
			switch {
			case !crash && runs.Load() != 1:
				t.Errorf("the write ran %d times, want once", runs.Load())
			case crash && runs.Load() != 0:
				t.Errorf("the write ran %d times after its proposer died, want never", runs.Load())
			}
		})
	}
}
