package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// requestLog records what a model was sent, each request as JSON.
type requestLog struct {
	mu   sync.Mutex
	sent []string
}

// recording wraps m so that l records its requests.
func (l *requestLog) recording(t testing.TB, m model.Model) model.Model {
	return model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
		b, err := json.Marshal(req)
		if err != nil {
			t.Errorf("encode the model's request: %v", err)
		}
		l.mu.Lock()
		l.sent = append(l.sent, string(b))
		l.mu.Unlock()
		return m.Propose(ctx, req)
	})
}

func (l *requestLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.sent...)
}

// An agent with redact_observations: false has its model read the tool's
// result as the tool returned it, while every event stored, its observed
// event too, stays redacted; an agent with the default reads it redacted.
func TestRedactObservationsFalseShowsTheModelTheClearResultAndStoresItRedacted(t *testing.T) {
	t.Parallel()
	const (
		email = "jane.roe@example.com"
		phone = "+49 30 12345678"
		token = "tok-abcdef123456"
	)
	var calls atomic.Int32
	no := false
	clearProfile := profile("contact_lookup")
	clearProfile.RedactObservations = &no
	script := func() model.Model {
		return scripted(t, `{"tool_calls":[{"tool":"contact_lookup","args":{}}]}`, `{"final_answer":{"summary":"found the contact"}}`)
	}
	var clearLog, redactedLog requestLog
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("contact_lookup", tools.Read, false)},
		builtins: tools.Builtins{"contact_lookup": func(context.Context, tools.Call) (any, error) {
			calls.Add(1)
			return map[string]string{"contact": "write to " + email + " or call " + phone, "token": token, "status": "open"}, nil
		}},
		roles:  map[string]config.Role{"operator": {Call: []string{"contact_lookup", "lookup_complaints"}}},
		agents: map[string]config.Profile{"clear": clearProfile, "redacted": profile("contact_lookup")},
		scripts: map[string]model.Model{
			"clear":    clearLog.recording(t, script()),
			"redacted": redactedLog.recording(t, script()),
		},
	})
	for _, c := range []struct {
		agent     string
		log       *requestLog
		modelSees []string
		modelNot  []string
	}{
		{"clear", &clearLog, []string{email, phone, token}, []string{"[email]", "[phone]", "[redacted]"}},
		{"redacted", &redactedLog, []string{"[email]", "[phone]", "[redacted]"}, []string{email, phone, token}},
	} {
		evs := b.waitEnd(b.submit(task("redact-obs-"+c.agent, c.agent)))
		assertTrail(t, evs, concat([]string{"started"}, okStep("contact_lookup"), []string{"proposed:final", "finished:done"}))
		for _, secret := range []string{email, phone, token} {
			if got := holding(evs, secret); len(got) > 0 {
				t.Errorf("%s: the stored events %v hold %q", c.agent, got, secret)
			}
		}
		obs := string(last[events.ObservedData](t, evs, events.TypeObserved).Observation)
		if !strings.Contains(obs, "[email]") || !strings.Contains(obs, "[phone]") || !strings.Contains(obs, `"status":"open"`) {
			t.Errorf("%s: the stored observation is not the redacted result: %s", c.agent, obs)
		}
		reqs := c.log.requests()
		if len(reqs) != 2 {
			t.Fatalf("%s: the model was asked %d times, want 2", c.agent, len(reqs))
		}
		for _, s := range c.modelSees {
			if !strings.Contains(reqs[1], s) {
				t.Errorf("%s: the model's second request does not hold %q: %s", c.agent, s, reqs[1])
			}
		}
		for _, s := range c.modelNot {
			if strings.Contains(reqs[1], s) {
				t.Errorf("%s: the model's second request holds %q: %s", c.agent, s, reqs[1])
			}
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the tool ran %d times, want once per run", n)
	}
	for _, secret := range []string{email, phone, token} {
		if strings.Contains(b.logs.String(), secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
}
