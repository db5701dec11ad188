package worker_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/sessions"
	"github.com/loopgate/loopgate/tools"
)

// sessionEntry is the raw loopgate_sessions entry of a cityops session.
func sessionEntry(t *testing.T, b *bundle, id string) string {
	t.Helper()
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), "cityops."+id)
	if err != nil {
		t.Fatalf("session %s: %v", id, err)
	}
	return string(e.Value())
}

// chatProfile answers from its script, with session memory of 8 KiB.
func chatProfile() config.Profile {
	return config.Profile{
		Model: config.Model{Provider: "scripted"}, Tools: []string{"lookup_complaints"}, Roles: []string{"operator"},
		SessionBudgetBytes: 8192,
	}
}

// holding lists the events whose stored data holds secret.
func holding(evs []events.Event, secret string) []string {
	var out []string
	for _, e := range evs {
		if strings.Contains(string(e.Data), secret) {
			out = append(out, string(e.Type))
		}
	}
	return out
}

// A task's input may be a JSON object. Its events redact it as JSON (a
// value under a sensitive key becomes [redacted]), and so must the session
// its run joins: the next run's started event (session.turns) shows it to
// the model and stores it in the audit log. The session's user turn used
// to be the object's text run through the string patterns only, which do
// not see "password":"..." as a credential.
func TestSessionMemoryRedactsSensitiveKeysOfAnObjectInput(t *testing.T) {
	t.Parallel()
	const secret = "swordfish-4412"
	b := setup(t, options{
		agents:  map[string]config.Profile{"chat": chatProfile()},
		scripts: map[string]model.Model{"chat": scripted(t, `{"final_answer":{"summary":"checked the vendor portal"}}`)},
	})
	first := task("sess-redact-obj-1", "chat")
	first.Input = json.RawMessage(`{"request":"check the vendor portal","password":"` + secret + `"}`)
	first.SessionID = "desk-redact"
	evs1 := b.waitEnd(b.submit(first))
	if got := holding(evs1, secret); len(got) > 0 {
		t.Fatalf("precondition: the first run's own events hold the secret: %v", got)
	}
	second := task("sess-redact-obj-2", "chat")
	second.SessionID = "desk-redact"
	evs2 := b.waitEnd(b.submit(second))
	if got := holding(evs2, secret); len(got) > 0 {
		t.Errorf("the next run's events hold the first run's password (in %v): the session bypassed redaction", got)
	}
	if entry := sessionEntry(t, b, "desk-redact"); strings.Contains(entry, secret) {
		t.Errorf("the session entry holds the password: %s", entry)
	}
}

// A task's constraints are redacted in its events (a sensitive key's
// value, an e-mail address), and in its session too: they used to be
// stored there as they came.
func TestSessionConstraintsAreRedactedInTheBucket(t *testing.T) {
	t.Parallel()
	const token, email = "tok-77ab12cd34", "jane.roe@example.com"
	b := setup(t, options{
		agents:  map[string]config.Profile{"chat": chatProfile()},
		scripts: map[string]model.Model{"chat": scripted(t, `{"final_answer":{"summary":"ok"}}`)},
	})
	tk := task("sess-redact-cons-1", "chat")
	tk.SessionID = "desk-cons"
	tk.Constraints = map[string]string{"token": token, "notify": email, "district": "north"}
	evs := b.waitEnd(b.submit(tk))
	for _, s := range []string{token, email} {
		if got := holding(evs, s); len(got) > 0 {
			t.Fatalf("precondition: the run's events hold %q: %v", s, got)
		}
	}
	entry := sessionEntry(t, b, "desk-cons")
	for _, s := range []string{token, email} {
		if strings.Contains(entry, s) {
			t.Errorf("the session entry holds %q, which the run's events redact: %s", s, entry)
		}
	}
	if !strings.Contains(entry, "north") {
		t.Errorf("the session lost its constraints: %s", entry)
	}
}

// Coverage: a tool's result under a sensitive key does not reach the
// session (nor, through it, the next run's events), even for an agent
// whose model reads unredacted observations (redact_observations: false):
// the result is redacted as JSON when recorded, before the observation
// the session's tool turn is made from.
func TestSessionToolTurnsAreRedactedLikeTheEvents(t *testing.T) {
	t.Parallel()
	const secret = "tok-99zz88yy77"
	no := false
	p := config.Profile{
		Model: config.Model{Provider: "scripted"}, Tools: []string{"vendor_lookup"}, Roles: []string{"operator"},
		SessionBudgetBytes: 8192, RedactObservations: &no,
	}
	b := setup(t, options{
		tools: []tools.Manifest{fakeTool("vendor_lookup", tools.Read, false)},
		builtins: tools.Builtins{"vendor_lookup": func(context.Context, tools.Call) (any, error) {
			return map[string]string{"vendor": "acme", "token": secret}, nil
		}},
		roles:  map[string]config.Role{"operator": {Call: []string{"vendor_lookup", "lookup_complaints"}}},
		agents: map[string]config.Profile{"vendor": p},
		scripts: map[string]model.Model{"vendor": scripted(t,
			`{"tool_calls":[{"tool":"vendor_lookup","args":{}}]}`,
			`{"final_answer":{"summary":"acme is the vendor"}}`)},
	})
	first := task("sess-redact-tool-1", "vendor")
	first.SessionID = "desk-tool"
	evs1 := b.waitEnd(b.submit(first))
	if fin := last[events.FinishedData](t, evs1, events.TypeFinished); fin.Reason != events.ReasonDone {
		t.Fatalf("first run ended %s: %s", fin.Reason, fin.Detail)
	}
	if got := holding(evs1, secret); len(got) > 0 {
		t.Fatalf("precondition: the first run's own events hold the token: %v", got)
	}
	second := task("sess-redact-tool-2", "vendor")
	second.SessionID = "desk-tool"
	evs2 := b.waitEnd(b.submit(second))
	if got := holding(evs2, secret); len(got) > 0 {
		t.Errorf("the next run's events hold the tool's token (in %v): the session bypassed redaction", got)
	}
	entry := sessionEntry(t, b, "desk-tool")
	if strings.Contains(entry, secret) {
		t.Errorf("the session entry holds the token: %s", entry)
	}
	if !strings.Contains(entry, "vendor_lookup: ") || !strings.Contains(entry, "acme") {
		t.Errorf("the session has no tool turn of the tool's result: %s", entry)
	}
}

// Coverage: a worker that dies after the session recorded the run but
// before the run's finished event is stored leaves the message to be
// redelivered; the next worker finishes the run from its events and
// records nothing twice.
func TestASessionRecordsARunOnceWhenItsWorkerDiesBeforeFinished(t *testing.T) {
	t.Parallel()
	var died atomic.Int32
	b := setup(t, options{
		agents:  map[string]config.Profile{"chat": chatProfile()},
		scripts: map[string]model.Model{"chat": scripted(t, `{"final_answer":{"summary":"the one answer"}}`)},
		crash: func(point string) {
			if point == "before:finished" && died.Add(1) == 1 {
				runtime.Goexit()
			}
		},
		layout:  journal.Layout{AckWait: 500 * time.Millisecond},
		workers: 2,
	})
	tk := task("sess-once-1", "chat")
	tk.SessionID = "desk-once"
	evs := b.waitEnd(b.submit(tk))
	if died.Load() == 0 {
		t.Fatal("no worker died before finished")
	}
	if fin := last[events.FinishedData](t, evs, events.TypeFinished); fin.Reason != events.ReasonDone {
		t.Fatalf("ended %s: %s", fin.Reason, fin.Detail)
	}
	var s sessions.Session
	if err := json.Unmarshal([]byte(sessionEntry(t, b, "desk-once")), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Runs) != 1 || len(s.Turns) != 2 || s.Turns[1].Text != "the one answer" {
		t.Errorf("the session holds runs %v and turns %+v; want the run once", s.Runs, s.Turns)
	}
}

// Coverage: a session entry that does not decode stops a run of the
// session with a cause that names it, once its deliveries are spent; no
// worker crashes.
func TestACorruptSessionEntryStopsItsRunsWithAClearCause(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		agents:  map[string]config.Profile{"chat": chatProfile()},
		scripts: map[string]model.Model{"chat": scripted(t, `{"final_answer":{"summary":"ok"}}`)},
		retry:   20 * time.Millisecond,
		layout:  journal.Layout{AckWait: 300 * time.Millisecond}, // its deliveries' backoff
	})
	kv, err := b.env.JS.KeyValue(t.Context(), journal.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "cityops.desk-bad", []byte(`{"turns":"not a list"`)); err != nil {
		t.Fatal(err)
	}
	tk := task("sess-corrupt-1", "chat")
	tk.SessionID = "desk-bad"
	evs := b.waitEnd(b.submit(tk))
	rej := last[events.RejectedData](t, evs, events.TypeRejected)
	if !strings.Contains(rej.Reason, "decode session desk-bad") {
		t.Errorf("the run was stopped with %q; want the session's decode error named", rej.Reason)
	}
	// A healthy session still works.
	ok := task("sess-corrupt-2", "chat")
	ok.SessionID = "desk-fine"
	if fin := last[events.FinishedData](t, b.waitEnd(b.submit(ok)), events.TypeFinished); fin.Reason != events.ReasonDone {
		t.Errorf("a run of a healthy session ended %s", fin.Reason)
	}
}

// Twelve runs of one session whose answers come at once (twelve workers):
// each run ends done, and the session must remember all twelve.
func TestConcurrentRunsOfOneSessionAreAllRemembered(t *testing.T) {
	t.Parallel()
	const n = 12
	var asked atomic.Int32
	release := make(chan struct{})
	m := model.Func(func(ctx context.Context, req model.Request) (model.Response, error) {
		if asked.Add(1) == n {
			close(release)
		}
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		return model.Response{Output: []byte(`{"final_answer":{"summary":"done"}}`), Name: "barrier"}, nil
	})
	b := setup(t, options{
		agents:  map[string]config.Profile{"chat": chatProfile()},
		scripts: map[string]model.Model{"chat": m},
		workers: n,
	})
	var ids []string
	for i := range n {
		tk := task("sess-conc-"+string(rune('a'+i)), "chat")
		tk.SessionID = "desk-conc"
		ids = append(ids, b.submit(tk))
	}
	for _, id := range ids {
		if fin := last[events.FinishedData](t, b.waitEnd(id), events.TypeFinished); fin.Reason != events.ReasonDone {
			t.Fatalf("run %s ended %s", id, fin.Reason)
		}
	}
	var s sessions.Session
	if err := json.Unmarshal([]byte(sessionEntry(t, b, "desk-conc")), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Runs) != n {
		t.Errorf("the session remembers %d of %d runs that ended done; logs:\n%s", len(s.Runs), n, grepLines(b.logs.String(), "session"))
	}
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
