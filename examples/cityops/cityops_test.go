package cityops

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/tools"
)

func TestRegisterAddsTheToolsAndTheResolver(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	var got []string
	for name := range bu.builtins {
		got = append(got, name)
	}
	slices.Sort(got)
	want := []string{ResolverComplaintOwner, ToolDraftEscalation, ToolDraftStatus, ToolGetProcedure, ToolLookupComplaints, ToolSlowLookup}
	if !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v", got, want)
	}
}

func TestRegisterRequiresAnOutbox(t *testing.T) {
	t.Parallel()
	b := tools.Builtins{}
	err := Register(b, Options{})
	if err == nil || !strings.Contains(err.Error(), "Outbox") {
		t.Fatalf("Register without Outbox: err = %v, want one naming Outbox", err)
	}
	if len(b) != 0 {
		t.Errorf("a failed Register left %d tools behind", len(b))
	}
	if err := Register(b, Options{Outbox: t.TempDir(), SlowDelay: -time.Second}); err == nil {
		t.Error("Register accepted a negative SlowDelay")
	}
	if err := Register(nil, Options{Outbox: t.TempDir()}); err == nil {
		t.Error("Register accepted nil Builtins")
	}
}

func TestRegisterAddsAllOrNothing(t *testing.T) {
	t.Parallel()
	taken := func(context.Context, tools.Call) (any, error) { return "theirs", nil }
	b := tools.Builtins{}
	b.MustRegister(ToolSlowLookup, taken)
	if err := Register(b, Options{Outbox: t.TempDir()}); err == nil {
		t.Fatal("Register succeeded over a taken name")
	}
	if len(b) != 1 {
		t.Errorf("a failed Register added tools: %d registered", len(b))
	}
}

func TestRegisterDefaultsSlowDelayTo30s(t *testing.T) {
	t.Parallel()
	if got := (Options{}).withDefaults().SlowDelay; got != 30*time.Second {
		t.Errorf("default SlowDelay = %s, want 30s", got)
	}
}

func TestDataHasTheSeedsComplaintsAndDistractors(t *testing.T) {
	t.Parallel()
	d, err := loadData()
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]Complaint{
		"SR-10421": {Category: "sanitation", Status: StatusOpen, DaysOpen: 9},
		"SR-10422": {Category: "sanitation", Status: StatusOpen, DaysOpen: 7},
		"SR-10423": {Category: "sanitation", Status: StatusOpen, DaysOpen: 6},
	} {
		got := d.byID[id]
		if got.Category != want.Category || got.Status != want.Status || got.DaysOpen != want.DaysOpen {
			t.Errorf("%s = %+v, want %+v", id, got, want)
		}
	}
	seen := map[string]bool{}
	for _, c := range d.complaints {
		seen[c.Category] = true
		seen[c.Status] = true
		if c.ResidentName == "" || c.ResidentPhone == "" || !strings.HasSuffix(c.ResidentEmail, "@example.org") {
			t.Errorf("%s lacks fake resident contact fields", c.RequestID)
		}
	}
	for _, v := range append(slices.Clone(categories), statuses...) {
		if !seen[v] {
			t.Errorf("no complaint has %q; the filters would not be exercised", v)
		}
	}
	if !slices.Equal(d.topics, []string{"noise", "pothole", "sanitation"}) {
		t.Errorf("topics = %v", d.topics)
	}
}
