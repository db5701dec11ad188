package worker_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kaptinlin/jsonschema"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/schemas"
)

// A task's limits may only tighten the profile's, and every count limit
// of task.schema.json has minimum 1. max_active's pattern admits "0s" (or
// "0.0000000001s", which parses to 0), and max_cost_usd's exclusiveMinimum
// 0 admits 1e-400, which decodes to 0: the worker used to read each as
// "not set" and apply the profile's (looser) limit, so a task that asked
// for no active time, or a cost budget, ran for the profile's 5m,
// unbounded in cost. Each is refused now, naming the field, as max_steps 0
// is.
func TestZeroTaskLimitsAreRefusedNotLoosened(t *testing.T) {
	t.Parallel()
	b := setup(t, options{workers: 1})
	for i, limits := range []string{`"max_active":"0s"`, `"max_active":"0h0m"`, `"max_active":"0.0000000001s"`, `"max_cost_usd":1e-400`} {
		field := "/limits/" + strings.Trim(strings.Split(limits, ":")[0], `"`)
		id := fmt.Sprintf("zero-limit-%d", i)
		zero := limits
		payload := `{"task_id":"` + id + `","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"x","limits":{` + limits + `}}`
		sch, err := schemas.Compile("task")
		if err != nil {
			t.Fatal(err)
		}
		if !sch.ValidateJSON([]byte(payload)).IsValid() {
			// Refused by the published schema: consistent, nothing to check.
			continue
		}
		b.publishRaw("cityops", []byte(payload), "")
		runID := events.RunID("cityops", id)
		b.autoApprove(runID, "supervisor@cityops", "approve", "")
		evs := b.waitEnd(runID)
		if evs[0].Type != events.TypeRejected {
			var st events.StartedData
			_ = evs[0].Decode(&st)
			t.Errorf("%s: the task started with limits max_active %s, max_cost_usd %v (the profile's), task limits recorded as %+v; want it rejected at %s",
				zero, st.Limits.MaxActive.D(), st.Limits.MaxCostUSD, st.Task.Limits, field)
			continue
		}
		var rej events.RejectedData
		_ = evs[0].Decode(&rej)
		if rej.Field != field {
			t.Errorf("%s rejected at %q (%s), want %s", zero, rej.Field, rej.Reason, field)
		}
	}
}

// An approver's client builds its message per approval.schema.json. A
// reason of 2048 characters is within the schema; written the way many
// JSON encoders write non-ASCII by default (Python's json.dumps:
// \uXXXX escapes, a surrogate pair for a character outside the BMP), the
// message is about 25 KB. The worker used to refuse anything over 16 KiB
// as approval_rejected invalid with the detail "the message does not
// match schemas/approval.schema.json", which it did.
func TestApprovalTheSchemaAcceptsIsNotRefusedAsInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "wide-reason")

	const emoji = "\U0001F600" // outside the BMP: \ud83d\ude00 escaped
	m := approvals.Message{RunID: runID, CallID: "s1c1", ArgsHash: q.ArgsHash, Decision: approvals.Approve,
		Approver: approvals.Approver{ID: "supervisor@cityops"}, Reason: strings.Repeat(emoji, 2048)}
	if err := approvals.Sign(&m, exampleKey(t, "supervisor@cityops"), time.Now()); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(strings.ReplaceAll(string(raw), emoji, `\ud83d\ude00`))
	sch, err := schemas.Compile("approval")
	if err != nil {
		t.Fatal(err)
	}
	if res := sch.ValidateJSON(payload); !res.IsValid() {
		t.Fatalf("the test's message (%d bytes) does not match approval.schema.json: %v", len(payload), schemas.Errors(res))
	}
	if _, err := b.env.JS.Publish(t.Context(), events.ApprovalSubject("cityops", runID, "s1c1"), payload); err != nil {
		t.Fatal(err)
	}
	e := b.waitFor(runID, "approved or approval_rejected", func(e events.Event) bool {
		return e.Type == events.TypeApproved || e.Type == events.TypeApprovalRejected
	})
	if e.Type == events.TypeApprovalRejected {
		var d events.ApprovalRejectedData
		_ = e.Decode(&d)
		t.Fatalf("a %d-byte message that matches approval.schema.json was rejected %s: %s %v", len(payload), d.Class, d.Detail, d.Errors)
	}
}

// The harness checks each event re-encoded from its decoded form, with the
// schema's formats as annotations. An audit consumer reads the stored
// bytes, and a strict validator asserts "format": "date-time". Pinned:
// every message on LOOPGATE_EVENTS after a mix of runs (approved, denied,
// stopped by each guard, dry run, invalid decisions, rejected tasks) is,
// byte for byte as stored, an envelope the shipped schema accepts with
// formats asserted, on the subject and with the Nats-Msg-Id the wire
// contract names.
func TestStoredEventsMatchTheSchemaWithFormatsAsserted(t *testing.T) {
	t.Parallel()
	b := setup(t, options{workers: 2})
	src, err := schemas.Bytes("event")
	if err != nil {
		t.Fatal(err)
	}
	strict, err := jsonschema.NewCompiler().SetAssertFormat(true).Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	approve := b.submit(task("wire-approve", "escalation-assistant"))
	b.autoApprove(approve, "supervisor@cityops", "approve", "ok")
	deny := b.submit(task("wire-deny", "escalation-assistant"))
	b.autoApprove(deny, "supervisor@cityops", "deny", "not now")
	runs = append(runs, approve, deny)
	for _, agent := range []string{"runaway-assistant", "correcting-assistant", "repeating-assistant", "confused-assistant"} {
		runs = append(runs, b.submit(task("wire-"+agent, agent)))
	}
	dry := task("wire-dry", "dry-run-assistant")
	dry.DryRun = true
	runs = append(runs, b.submit(dry))
	short := task("wire-deadline", "runaway-assistant")
	short.Limits = &events.Limits{MaxActive: events.Duration(time.Millisecond)}
	runs = append(runs, b.submit(short))
	b.publishRaw("cityops", []byte(`{"task_id":"wire-bad","tenant":"cityops","agent":"escalation-assistant","input":"x"}`), "")
	runs = append(runs, events.RunID("cityops", "wire-bad"))
	ack2 := b.publishRaw("cityops", []byte(`not json`), "")
	runs = append(runs, events.RejectedRunID("cityops", ack2.Sequence))
	for _, r := range runs {
		b.waitEnd(r)
	}

	stream, err := b.env.JS.Stream(t.Context(), journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	types := map[events.Type]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("stream seq %d: %v", seq, err)
		}
		if res := strict.ValidateJSON(m.Data); !res.IsValid() {
			t.Errorf("stream seq %d on %s does not match event.schema.json with formats asserted: %v\n%s", seq, m.Subject, schemas.Errors(res), m.Data)
			continue
		}
		var e events.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatal(err)
		}
		types[e.Type] = true
		if want := events.EventSubject(e.Tenant, e.RunID, e.Type); m.Subject != want {
			t.Errorf("stream seq %d on %s, want %s", seq, m.Subject, want)
		}
		if got, want := m.Header.Get("Nats-Msg-Id"), fmt.Sprintf("%s/%d", e.RunID, e.Seq); got != want {
			t.Errorf("stream seq %d Nats-Msg-Id %q, want %q", seq, got, want)
		}
		var data map[string]any
		if json.Unmarshal(e.Data, &data) != nil {
			t.Errorf("stream seq %d (%s): data is not an object: %s", seq, e.Type, e.Data)
		}
	}
	for _, want := range []events.Type{events.TypeRejected, events.TypeStarted, events.TypeProposed, events.TypeValidated,
		events.TypeApprovalRequested, events.TypeParked, events.TypeApproved, events.TypeExecuting, events.TypeExecuted,
		events.TypeObserved, events.TypeFinished} {
		if !types[want] {
			t.Errorf("no %s event among the runs: the mix does not cover it", want)
		}
	}
}

// A task that repeats a member name is refused (the schema's validator
// reads it as invalid), and the rejected event used to say "is not valid
// JSON" at the root, though it is valid JSON to encoding/json and nothing
// named the repetition. It says now what the decision parser tells the
// model: it "repeats a member name in an object".
func TestRepeatedTaskMemberIsNamedNotCalledInvalidJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, options{workers: 1})
	payload := `{"task_id":"dup-member","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","agent":"runaway-assistant","input":"x"}`
	if !json.Valid([]byte(payload)) {
		t.Fatal("payload is not JSON")
	}
	b.publishRaw("cityops", []byte(payload), "")
	evs := b.waitEnd(events.RunID("cityops", "dup-member"))
	if evs[0].Type != events.TypeRejected {
		t.Fatalf("trail %v: want a rejection", trail(t, evs))
	}
	var rej events.RejectedData
	_ = evs[0].Decode(&rej)
	if strings.Contains(rej.Reason, "not valid JSON") || !strings.Contains(rej.Reason+rej.Field, "repeat") && rej.Field != "/agent" {
		t.Errorf("rejected at %q: %q; want the repeated member named (as the decision parser does), not \"not valid JSON\"", rej.Field, rej.Reason)
	}
}

// An approval message that repeats a member name is refused as invalid
// with a detail that says so; every refusal of the parser used to read
// "the message does not match schemas/approval.schema.json", an oversized
// message's too.
func TestAnApprovalRepeatingAMemberIsRefusedAsSuch(t *testing.T) {
	t.Parallel()
	b := setup(t, oneDraft(t, "drafted"))
	runID, q := draftRun(t, b, "dup-approval")
	payload := `{"run_id":"` + runID + `","call_id":"s1c1","args_hash":"` + q.ArgsHash + `","decision":"deny","decision":"approve","approver":{"id":"supervisor@cityops"}}`
	if _, err := b.env.JS.Publish(t.Context(), events.ApprovalSubject("cityops", runID, "s1c1"), []byte(payload)); err != nil {
		t.Fatal(err)
	}
	e := b.waitType(runID, events.TypeApprovalRejected, 1)
	var d events.ApprovalRejectedData
	if err := e.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Class != approvals.RejectInvalid || !strings.Contains(d.Detail, "repeats a member name") {
		t.Fatalf("approval repeating decision: %s %q, want %s saying it repeats a member name", d.Class, d.Detail, approvals.RejectInvalid)
	}
}
