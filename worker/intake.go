package worker

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/schemas"
)

// excerptBytes bounds how much of a rejected message the trail keeps.
const excerptBytes = 256

// decodeTask validates a task message published on the subject of tenant.
// It returns the task and its effective limits, or the rejection to record.
// Every check names the field it failed on.
func (p *Pool) decodeTask(tenant, subject string, data []byte) (events.Task, events.Limits, *events.RejectedData) {
	var task events.Task
	reject := func(field, reason string, errs []events.FieldError) (events.Task, events.Limits, *events.RejectedData) {
		return task, events.Limits{}, &events.RejectedData{
			Field: field, Reason: reason, Errors: errs, TaskID: task.TaskID,
			Subject: subject, PayloadExcerpt: excerpt(data),
		}
	}
	if n := p.app.Intake.MaxTaskBytes; len(data) > n {
		// Still on the task's run id, where its submitter waits: a
		// message is at most the server's max_payload, cheap to scan.
		lenientTaskID(data, &task)
		return reject("", fmt.Sprintf("task is %d bytes, over the limit of %d", len(data), n), nil)
	}
	if why := notStrictJSON("task", data); why != "" {
		// A repeated name used to be rejected as "not valid JSON".
		lenientTaskID(data, &task)
		return reject("", why, nil)
	}
	if res := p.taskSchema.ValidateJSON(data); !res.IsValid() {
		errs := schemas.Errors(res)
		if len(errs) == 0 {
			return reject("", "task does not match schemas/task.schema.json", nil)
		}
		lenientTaskID(data, &task)
		return reject(errs[0].Field, errs[0].Message, errs)
	}
	if err := json.Unmarshal(data, &task); err != nil {
		// The schema took it, Go's types do not: 3.0 for a count, a
		// number past int64, a duration past 290 years.
		task = events.Task{}
		lenientTaskID(data, &task)
		e := schemas.DecodeErrorIn(data, err)
		return reject(e.Field, e.Message, []events.FieldError{e})
	}
	if errs := zeroTaskLimits(data, task.Limits); len(errs) > 0 {
		return reject(errs[0].Field, errs[0].Message, errs)
	}
	if task.Tenant != tenant {
		return reject("/tenant", fmt.Sprintf("tenant %q does not match the subject's tenant %q", task.Tenant, tenant), nil)
	}
	if n := p.app.Intake.MaxInputBytes; len(task.Input) > n {
		return reject("/input", fmt.Sprintf("input is %d bytes, over the limit of %d", len(task.Input), n), nil)
	}
	profile, ok := p.app.Agents[task.Agent]
	if !ok {
		return reject("/agent", fmt.Sprintf("unknown agent %q", task.Agent), nil)
	}
	if !p.app.MayRun(task.Agent, task.Principal.Roles) {
		return reject("/principal/roles", fmt.Sprintf("none of the roles %v may run agent %q (allowed: %v)", task.Principal.Roles, task.Agent, profile.Roles), nil)
	}
	limits, errs := config.EffectiveLimits(profile.Limits, task.Limits)
	if len(errs) > 0 {
		return reject(errs[0].Field, errs[0].Message, errs)
	}
	if limits.MaxCostUSD > 0 && !p.app.CostCounted(profile) {
		return reject("/limits/max_cost_usd", fmt.Sprintf("cannot be counted: agent %q's model %q has no pricing entry, so this budget would never stop the run", task.Agent, profile.Model.PricedAs()), nil)
	}
	return task, limits, nil
}

// zeroTaskLimits refuses a task limit given as a value that reads as zero
// (config.ZeroLimits): the run used to get the profile's looser limit.
func zeroTaskLimits(data []byte, l *events.Limits) []events.FieldError {
	if l == nil || (l.MaxActive != 0 && l.MaxCostUSD != 0) {
		return nil // most tasks: nothing to read again
	}
	var given struct {
		Limits map[string]json.RawMessage `json:"limits"`
	}
	if json.Unmarshal(data, &given) != nil {
		return nil
	}
	return config.ZeroLimits(given.Limits, *l, "/limits", "the profile's")
}

// lenientTaskID picks a usable task_id out of an otherwise invalid task, so
// the rejection lands on the run id the submitter will look for.
func lenientTaskID(data []byte, task *events.Task) {
	var probe struct {
		TaskID any `json:"task_id"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return
	}
	if id, ok := probe.TaskID.(string); ok && validTaskID(id) {
		task.TaskID = id
	}
}

// validTaskID mirrors the task_id pattern of schemas/task.schema.json.
func validTaskID(id string) bool { return events.ValidTaskID(id) }

// excerpt is the start of a message, as text an operator can read.
func excerpt(data []byte) string {
	if len(data) > excerptBytes {
		data = data[:excerptBytes]
	}
	return strings.ToValidUTF8(string(data), string(utf8.RuneError))
}
