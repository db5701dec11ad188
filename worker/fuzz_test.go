package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/schemas"
)

// intakePool is a Pool with just what task intake uses.
func intakePool(t testing.TB) *Pool {
	t.Helper()
	cfg, err := config.Load(cityops.Files, "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := schemas.Compile("task.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return &Pool{app: cfg, taskSchema: s}
}

// FuzzDecodeTask: any bytes on a task subject are either a task that is
// valid in every way intake promises, or a rejection with a reason. Never
// a panic.
func FuzzDecodeTask(f *testing.F) {
	f.Add([]byte(`{"task_id":"t-1","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},"agent":"escalation-assistant","input":"go"}`))
	f.Add([]byte(`{"task_id":"t-2","tenant":"cityops","principal":{"id":"x","roles":["operator"]},"agent":"runaway-assistant","input":{"q":1},"dry_run":true,"limits":{"max_steps":2,"max_active":"5s"}}`))
	f.Add([]byte(`{"task_id":"t-3","tenant":"cityops","principal":{"id":"x","roles":["guest"]},"agent":"escalation-assistant","input":"go"}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"task_id":5}`))
	f.Add([]byte(`[]`))
	p := intakePool(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		task, limits, rej := p.decodeTask("cityops", "loopgate.tasks.cityops", data)
		if rej != nil {
			if rej.Reason == "" {
				t.Fatalf("rejection without a reason: %+v", rej)
			}
			if _, err := json.Marshal(rej); err != nil {
				t.Fatalf("rejection does not marshal: %v", err)
			}
			return
		}
		profile, ok := p.app.Agents[task.Agent]
		switch {
		case task.Tenant != "cityops":
			t.Fatalf("accepted a task of tenant %q", task.Tenant)
		case !ok:
			t.Fatalf("accepted unknown agent %q", task.Agent)
		case !p.app.MayRun(task.Agent, task.Principal.Roles):
			t.Fatalf("accepted roles %v for %s", task.Principal.Roles, task.Agent)
		case events.RunID(task.Tenant, task.TaskID) == "":
			t.Fatal("no run id")
		case limits.MaxSteps > profile.Limits.MaxSteps || limits.MaxToolCalls > profile.Limits.MaxToolCalls || limits.MaxActive > profile.Limits.MaxActive:
			t.Fatalf("limits %+v looser than the profile's %+v", limits, profile.Limits)
		case len(task.Input) > p.app.Intake.MaxInputBytes:
			t.Fatalf("accepted %d bytes of input", len(task.Input))
		}
	})
}

// FuzzParseDecision: any model output is either a decision of exactly one
// kind, with loopgate's call ids and object arguments, or field errors.
func FuzzParseDecision(f *testing.F) {
	f.Add([]byte(`{"tool_calls":[{"tool":"lookup_complaints","args":{"limit":5}}]}`))
	f.Add([]byte(`{"final_answer":{"summary":"done"}}`))
	f.Add([]byte(`{"tool_calls":[{"tool":"a","args":{}}],"final_answer":{"summary":"both"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`I think {`))
	f.Add([]byte(`{"tool_calls":[]}`))
	f.Add([]byte(`{"tool_calls":[{"tool":"a","args":[]}]}`))
	p, err := newDecisionParser()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		d, errs := p.parse(out, 3)
		if (d == nil) == (len(errs) == 0) {
			t.Fatalf("parse gave decision %v and errors %v: want exactly one", d, errs)
		}
		if d == nil {
			return
		}
		if (d.Final == nil) == (len(d.ToolCalls) == 0) {
			t.Fatalf("decision is not exactly one of tool calls or a final answer: %+v", d)
		}
		for i, c := range d.ToolCalls {
			if c.ID != events.CallID(3, i+1) {
				t.Fatalf("call %d has id %q", i, c.ID)
			}
			var obj map[string]any
			if err := json.Unmarshal(c.Args, &obj); err != nil || obj == nil {
				t.Fatalf("call %d args are not an object: %s", i, c.Args)
			}
		}
	})
}

// FuzzParseApproval: any bytes on an approvals subject either parse into a
// message that satisfies the schema's promises, or give field errors.
func FuzzParseApproval(f *testing.F) {
	f.Add([]byte(`{"run_id":"r1","call_id":"s3c1","args_hash":"sha256:` + strings.Repeat("a", 64) + `","decision":"approve","approver":{"id":"supervisor@cityops"}}`))
	f.Add([]byte(`{"run_id":"r1","call_id":"s3c1","args_hash":"x","decision":"approve","approver":{"id":"a","roles":["admin"]}}`))
	f.Add([]byte(`{"decision":"yes"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`not json`))
	s, err := schemas.Compile("approval.schema.json")
	if err != nil {
		f.Fatal(err)
	}
	p := &Pool{approvalSch: s}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _, errs := p.parseApproval(data)
		if errs != nil {
			for _, e := range errs {
				if e.Message == "" {
					t.Fatalf("field error without a message: %+v", e)
				}
			}
			return
		}
		switch {
		case m == nil:
			t.Fatal("no message and no errors")
		case !events.ValidToken(m.RunID) || !events.ValidToken(m.CallID):
			t.Fatalf("accepted ids %q %q", m.RunID, m.CallID)
		case m.Approver.ID == "":
			t.Fatal("accepted an approval without an approver")
		case !strings.HasPrefix(m.ArgsHash, "sha256:") || len(m.ArgsHash) != 71:
			t.Fatalf("accepted hash %q", m.ArgsHash)
		}
	})
}
