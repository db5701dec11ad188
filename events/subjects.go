package events

import (
	"fmt"
	"strings"
)

// Subject prefixes of the v1 wire contract.
const (
	TasksPrefix     = "loopgate.tasks"
	ResumePrefix    = "loopgate.resume"
	EventsPrefix    = "loopgate.events"
	ApprovalsPrefix = "loopgate.approvals"
	// PendingPrefix lists the questions awaiting a human:
	// loopgate.pending.<tenant>.<run_id>.<call_id> (see PendingSubject).
	PendingPrefix = "loopgate.pending"
)

// PendingSubject is where a question awaiting a human is listed, from its
// request to its decision.
func PendingSubject(tenant, runID, callID string) string {
	return PendingPrefix + "." + tenant + "." + runID + "." + callID
}

// ValidToken reports whether s can stand as one subject token: 1 to 64 of
// [A-Za-z0-9_-] (no dots, wildcards or whitespace). It is checked for every
// event appended, hence a loop rather than a regular expression.
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// TaskSubject is where upstream systems publish a tenant's tasks.
func TaskSubject(tenant string) string { return TasksPrefix + "." + tenant }

// ResumeSubject is where a parked run of a tenant is woken.
func ResumeSubject(tenant, runID string) string {
	return ResumePrefix + "." + tenant + "." + runID
}

// EventSubject is where an event of a run is stored.
func EventSubject(tenant, runID string, t Type) string {
	return EventsPrefix + "." + tenant + "." + runID + "." + string(t)
}

// RunFilter matches every event of one run: the subject filter for loading
// it and the expected-last-subject-sequence subject for appending to it.
func RunFilter(tenant, runID string) string {
	return EventsPrefix + "." + tenant + "." + runID + ".*"
}

// AnyTenantRunFilter matches every event of one run when its tenant is not
// known (loopgate audit RUN_ID).
func AnyTenantRunFilter(runID string) string {
	return EventsPrefix + ".*." + runID + ".*"
}

// ApprovalSubject is where approvers publish a decision on one call.
func ApprovalSubject(tenant, runID, callID string) string {
	return ApprovalsPrefix + "." + tenant + "." + runID + "." + callID
}

// ParseWorkSubject splits a subject of the work stream into its kind
// ("tasks" or "resume"), tenant and, for resume, run id.
func ParseWorkSubject(subject string) (kind, tenant, runID string, err error) {
	parts := strings.Split(subject, ".")
	switch {
	case len(parts) == 3 && parts[0] == "loopgate" && parts[1] == "tasks" && ValidToken(parts[2]):
		return "tasks", parts[2], "", nil
	case len(parts) == 4 && parts[0] == "loopgate" && parts[1] == "resume" && ValidToken(parts[2]) && ValidToken(parts[3]):
		return "resume", parts[2], parts[3], nil
	}
	return "", "", "", fmt.Errorf("not a loopgate work subject: %q", subject)
}

// ValidTaskID reports whether id may be a task_id (schemas/task.schema.json):
// 1 to 128 letters, digits and, after the first, '.', '_', ':' or '-'. It
// names the task's Nats-Msg-Id and its run.
func ValidTaskID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			i > 0 && strings.ContainsRune("._:-", r)
		if !ok {
			return false
		}
	}
	return true
}
