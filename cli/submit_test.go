package cli

import (
	"strings"
	"testing"

	"github.com/loopgate/loopgate/events"
)

// Two tenants that happen to pick the same task_id within the 2-minute
// duplicate window: the run ids differ (tenant + task_id), but the
// Nats-Msg-Id is the bare task_id, deduplicated across the whole
// LOOPGATE_WORK stream. The second tenant's task is dropped as a
// duplicate, yet submit says it was submitted and follows a run that will
// never exist, until --timeout; a retry with the same task id is dropped
// again (found by review). A task's Nats-Msg-Id is now <tenant>/<task_id>.
func TestSubmitSameTaskIDInAnotherTenantIsStored(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	code, out, stderr := run(t, "", "submit", "--nats", srv.url, "--tenant", "acme", "--task-id", "shared-1",
		"--agent", "dry-run-assistant", "--dry-run", "--timeout", "30s")
	t.Logf("acme: exit %d\n%s\n%s", code, out, stderr)

	code, out, stderr = run(t, "", "submit", "--nats", srv.url, "--tenant", "cityops", "--task-id", "shared-1",
		"--agent", "dry-run-assistant", "--dry-run", "--timeout", "10s")
	if code != exitOK || strings.Contains(out, "duplicate task id") {
		t.Errorf("cityops task shared-1: exit %d, want %d (its own run %s)\nstdout:\n%s\nstderr:\n%s",
			code, exitOK, events.RunID("cityops", "shared-1"), out, stderr)
	}
	code, out, _ = run(t, "", "audit", "--nats", srv.url, events.RunID("cityops", "shared-1"))
	if code != exitOK {
		t.Errorf("audit of the cityops run: exit %d: the task was never stored\n%s", code, out)
	}
}
