package journal_test

import (
	"testing"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
)

// TenantOf finds the tenant that has started a run of an id, whatever
// tenant it is, and no tenant for a run nobody started (a pseudo-run whose
// only event is not started, such as a rejected task's, included).
func TestTenantOfFindsTheTenantThatStartedARun(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	mustAppend(t, env.Journal, 0, trail("harbour", "run-a", 1, 3)...)
	mustAppend(t, env.Journal, 0, ev("cityops", "rejected-b", 1, events.TypeRejected))
	tests := []struct {
		runID      string
		wantTenant string
		wantOK     bool
	}{
		{runID: "run-a", wantTenant: "harbour", wantOK: true},
		{runID: "rejected-b"},
		{runID: "nobody"},
	}
	for _, tt := range tests {
		tenant, ok, err := env.Journal.TenantOf(t.Context(), tt.runID)
		if err != nil || tenant != tt.wantTenant || ok != tt.wantOK {
			t.Errorf("TenantOf(%s) = %q, %v, %v; want %q, %v", tt.runID, tenant, ok, err, tt.wantTenant, tt.wantOK)
		}
	}
	if _, _, err := env.Journal.TenantOf(t.Context(), "a.b"); err == nil {
		t.Error("TenantOf(a.b): no error for a run id that is not a subject token")
	}
}
