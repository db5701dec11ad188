package events_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/loopgate/loopgate/events"
)

// The README's wire contract documents how a run id is derived, so that an
// upstream system can compute a task's run id before it publishes the task
// (to follow its events, or to address an approval). These vectors pin the
// documented namespace and name bytes: a change to either breaks them, and
// the README with them.
func TestRunIDMatchesTheDocumentedDerivation(t *testing.T) {
	t.Parallel()
	// The namespace as the README writes it, never events' own variable.
	const documentedNamespace = "6f1c8a52-3d0e-4b7a-9a51-0c2d6e7f4b10"
	ns := uuid.MustParse(documentedNamespace)
	tests := []struct {
		tenant, taskID string
		want           string // computed with Python's uuid.uuid5, outside Go
	}{
		{tenant: "cityops", taskID: "t-1", want: "ab2f986a-3b86-5170-8801-9bf64046192d"},
		{tenant: "acme-water", taskID: "order:2026-11-30.7", want: "ac0d9e72-edde-5fb2-b6a8-0bf6b9f3e539"},
	}
	for _, tt := range tests {
		t.Run(tt.tenant+"/"+tt.taskID, func(t *testing.T) {
			t.Parallel()
			// The name: "run", NUL, tenant, NUL, task_id, as UTF-8 bytes.
			name := []byte("run\x00" + tt.tenant + "\x00" + tt.taskID)
			if got := uuid.NewSHA1(ns, name).String(); got != tt.want {
				t.Fatalf("UUID v5 of the documented namespace and name = %s, want the vector %s", got, tt.want)
			}
			if got := events.RunID(tt.tenant, tt.taskID); got != tt.want {
				t.Errorf("events.RunID(%q, %q) = %s, want %s, the README's derivation", tt.tenant, tt.taskID, got, tt.want)
			}
		})
	}
}

// Operation ids are derived from the same namespace, as the README says.
func TestOperationIDMatchesTheDocumentedDerivation(t *testing.T) {
	t.Parallel()
	const want = "4111d5d5-8a4a-5f80-9d50-2195684c39d9" // Python's uuid.uuid5
	ns := uuid.MustParse("6f1c8a52-3d0e-4b7a-9a51-0c2d6e7f4b10")
	run := "ab2f986a-3b86-5170-8801-9bf64046192d"
	if got := uuid.NewSHA1(ns, []byte("op\x00"+run+"\x00s1c1")).String(); got != want {
		t.Fatalf("UUID v5 of the documented name = %s, want the vector %s", got, want)
	}
	if got := events.OperationID(run, "s1c1"); got != want {
		t.Errorf("events.OperationID(%s, s1c1) = %s, want %s", run, got, want)
	}
}
