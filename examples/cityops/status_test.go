package cityops

import (
	"errors"
	"testing"
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
