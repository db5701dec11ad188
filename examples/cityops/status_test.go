package cityops

import (
	"errors"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/tools"
)

func TestDraftStatusReportsWhetherTheDraftExists(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	ask := func() string {
		t.Helper()
		got, err := bu.call(t.Context(), t, ToolDraftStatus, "", `{"operation_id":"`+opA+`"}`)
		if err != nil {
			t.Fatal(err)
		}
		return asJSON(t, got)
	}
	if got := ask(); got != `{"applied":false}` {
		t.Fatalf("before the draft: %s", got)
	}
	if _, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, `{"request_id":"SR-10422","reason":"Open 7 days, past the 5-day threshold."}`); err != nil {
		t.Fatal(err)
	}
	want := `{"applied":true,"result":{"draft_path":"escalation-` + opA + `.txt","request_id":"SR-10422","status":"pending_approval"}}`
	if got := ask(); got != want {
		t.Fatalf("after the draft: %s, want %s", got, want)
	}
	if _, err := bu.call(t.Context(), t, ToolDraftStatus, "", `{"operation_id":"../../etc/passwd"}`); !errors.Is(err, errInvalidArgs) {
		t.Fatalf("a path as operation id: err = %v", err)
	}
}

func TestTenantsSeeOnlyTheirComplaintsAndTheResolverSaysWhose(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	look := func(tenant string) string {
		t.Helper()
		v, err := bu.builtins[ToolLookupComplaints](t.Context(), tools.Call{Tool: ToolLookupComplaints, Tenant: tenant, Args: []byte(`{"category":"sanitation","status":"open","older_than_days":5,"limit":20}`)})
		if err != nil {
			t.Fatal(err)
		}
		return asJSON(t, v)
	}
	if got := look("cityops"); strings.Contains(got, "SR-20001") || !strings.Contains(got, "SR-10421") {
		t.Errorf("cityops lookup: %s", got)
	}
	if got := look("harbortown"); !strings.Contains(got, "SR-20001") || strings.Contains(got, "SR-10421") {
		t.Errorf("harbortown lookup: %s", got)
	}
	owner := func(id string) string {
		t.Helper()
		v, err := bu.builtins[ResolverComplaintOwner](t.Context(), tools.Call{Tool: ResolverComplaintOwner, Args: []byte(`{"id":"` + id + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return asJSON(t, v)
	}
	for id, want := range map[string]string{
		"SR-10421": `{"found":true,"tenant":"cityops"}`,
		"SR-20001": `{"found":true,"tenant":"harbortown"}`,
		"SR-99999": `{"found":false}`,
	} {
		if got := owner(id); got != want {
			t.Errorf("owner of %s = %s, want %s", id, got, want)
		}
	}
}
