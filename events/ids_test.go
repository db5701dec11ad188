package events_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/loopgate/loopgate/events"
)

// parseUUID parses s as an RFC 9562 UUID of the given version.
func parseUUID(t *testing.T, s string, version uuid.Version) uuid.UUID {
	t.Helper()
	u, err := uuid.Parse(s)
	if err != nil {
		t.Fatalf("%q is not a UUID: %v", s, err)
	}
	if u.String() != s {
		t.Errorf("%q is not in canonical form %q", s, u.String())
	}
	if u.Version() != version || u.Variant() != uuid.RFC4122 {
		t.Errorf("%q is version %d variant %s, want version %d variant %s", s, u.Version(), u.Variant(), version, uuid.RFC4122)
	}
	return u
}

func TestRunIDIsADeterministicUUIDv5OfTenantAndTask(t *testing.T) {
	t.Parallel()
	id := events.RunID("cityops", "t-1")
	parseUUID(t, id, 5)
	if again := events.RunID("cityops", "t-1"); again != id {
		t.Errorf("RunID changed between calls: %s, then %s", id, again)
	}

	tests := []struct {
		name   string
		tenant string
		taskID string
	}{
		{name: "another task id", tenant: "cityops", taskID: "t-2"},
		{name: "another tenant", tenant: "harbour", taskID: "t-1"},
		{name: "tenant and task id split elsewhere", tenant: "cityopst", taskID: "-1"},
		{name: "swapped tenant and task id", tenant: "t-1", taskID: "cityops"},
		{name: "empty task id", tenant: "cityops", taskID: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			other := events.RunID(tt.tenant, tt.taskID)
			parseUUID(t, other, 5)
			if other == id {
				t.Errorf("RunID(%q, %q) = RunID(cityops, t-1) = %s", tt.tenant, tt.taskID, id)
			}
		})
	}
}

func TestRejectedRunIDIsADeterministicUUIDv5OfTenantAndStreamSeq(t *testing.T) {
	t.Parallel()
	id := events.RejectedRunID("cityops", 42)
	parseUUID(t, id, 5)
	if again := events.RejectedRunID("cityops", 42); again != id {
		t.Errorf("RejectedRunID changed between calls: %s, then %s", id, again)
	}
	tests := []struct {
		name  string
		given string
	}{
		{name: "another stream seq", given: events.RejectedRunID("cityops", 43)},
		{name: "another tenant", given: events.RejectedRunID("harbour", 42)},
		{name: "seq zero", given: events.RejectedRunID("cityops", 0)},
		{name: "a run id of a task id that reads like the seq", given: events.RunID("cityops", "42")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			parseUUID(t, tt.given, 5)
			if tt.given == id {
				t.Errorf("%s = RejectedRunID(cityops, 42) = %s", tt.name, id)
			}
		})
	}
}

func TestCallIDNamesStepAndIndexAsOneSubjectToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		step, index int
		want        string
	}{
		{step: 1, index: 1, want: "s1c1"},
		{step: 2, index: 3, want: "s2c3"},
		{step: 12, index: 1, want: "s12c1"},
		{step: 1, index: 12, want: "s1c12"},
		{step: 100, index: 64, want: "s100c64"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			got := events.CallID(tt.step, tt.index)
			if got != tt.want {
				t.Errorf("CallID(%d, %d) = %q, want %q", tt.step, tt.index, got, tt.want)
			}
			if !events.ValidToken(got) {
				t.Errorf("CallID(%d, %d) = %q is not a valid subject token", tt.step, tt.index, got)
			}
		})
	}
}

func TestOperationIDIsStablePerRunAndCall(t *testing.T) {
	t.Parallel()
	run := events.RunID("cityops", "t-1")
	id := events.OperationID(run, "s1c1")
	parseUUID(t, id, 5)
	if again := events.OperationID(run, "s1c1"); again != id {
		t.Errorf("OperationID changed between calls: %s, then %s", id, again)
	}

	seen := map[string]string{id: "run t-1 s1c1"}
	add := func(name, op string) {
		t.Helper()
		parseUUID(t, op, 5)
		if prev, ok := seen[op]; ok {
			t.Errorf("OperationID of %s = that of %s = %s", name, prev, op)
		}
		seen[op] = name
	}
	for step := 1; step <= 5; step++ {
		for i := 1; i <= 5; i++ {
			if step == 1 && i == 1 {
				continue
			}
			add(fmt.Sprintf("run t-1 s%dc%d", step, i), events.OperationID(run, events.CallID(step, i)))
		}
	}
	add("run t-2 s1c1", events.OperationID(events.RunID("cityops", "t-2"), "s1c1"))
	// An operation id is never the id of a run.
	add("the run id itself", run)
}

func TestUUIDv7MintsUniqueTimeOrderedVersion7IDs(t *testing.T) {
	t.Parallel()
	const n = 1000
	seen := make(map[string]bool, n)
	prev := ""
	for i := range n {
		id := events.UUIDv7.NewEventID()
		parseUUID(t, id, 7)
		if seen[id] {
			t.Fatalf("id %d = %s was already minted", i, id)
		}
		seen[id] = true
		if id <= prev {
			t.Errorf("id %d = %s does not sort after %s", i, id, prev)
		}
		prev = id
	}
}

func TestIDFuncIsAnIDSource(t *testing.T) {
	t.Parallel()
	var src events.IDSource = events.IDFunc(func() string { return "fixed" })
	if got := src.NewEventID(); got != "fixed" {
		t.Errorf("NewEventID() = %q, want %q", got, "fixed")
	}
}
