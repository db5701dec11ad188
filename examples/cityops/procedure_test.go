package cityops

import (
	"errors"
	"strings"
	"testing"
)

func TestGetProcedureReturnsTheHandbookPage(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	got, err := bu.call(t.Context(), t, ToolGetProcedure, "", `{"topic":"sanitation"}`)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := got.(procedureResult)
	if !ok {
		t.Fatalf("result is %T, want procedureResult", got)
	}
	if r.Topic != "sanitation" {
		t.Errorf("topic = %q, want sanitation", r.Topic)
	}
	for _, want := range []string{"more than 5 days", "one escalation draft per eligible complaint", "supervisor's approval", "leaves the building"} {
		if !strings.Contains(r.Procedure, want) {
			t.Errorf("sanitation procedure lacks %q:\n%s", want, r.Procedure)
		}
	}
	if !strings.HasPrefix(asJSON(t, got), `{"topic":"sanitation","procedure":"`) {
		t.Errorf("wire shape = %s", asJSON(t, got))
	}
}

func TestGetProcedureKnowsNoiseAndPotholeAndIgnoresCase(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	for given, want := range map[string]string{
		`{"topic":"noise"}`:      "noise",
		`{"topic":" Pothole "}`:  "pothole",
		`{"topic":"SANITATION"}`: "sanitation",
	} {
		got, err := bu.call(t.Context(), t, ToolGetProcedure, "", given)
		if err != nil {
			t.Fatalf("get_procedure(%s): %v", given, err)
		}
		if r, ok := got.(procedureResult); !ok || r.Topic != want || r.Procedure == "" {
			t.Errorf("get_procedure(%s) = %#v, want topic %s", given, got, want)
		}
	}
}

func TestGetProcedureUnknownTopicListsKnownTopics(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	got, err := bu.call(t.Context(), t, ToolGetProcedure, "", `{"topic":"snow removal"}`)
	if err != nil {
		t.Fatalf("an unknown topic is data, not an error: %v", err)
	}
	want := `{"topic":"snow removal","found":false,"topics":["noise","pothole","sanitation"]}`
	if g := asJSON(t, got); g != want {
		t.Errorf("get_procedure(unknown) = %s, want %s", g, want)
	}
}

func TestGetProcedureRefusesBadArguments(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	for _, given := range []string{`{}`, `{"topic":""}`, `{"topic":"` + strings.Repeat("x", 65) + `"}`, `{"topic":7}`, `{"topic":"noise","lang":"en"}`} {
		if _, err := bu.call(t.Context(), t, ToolGetProcedure, "", given); !errors.Is(err, errInvalidArgs) {
			t.Errorf("get_procedure(%.40s) error = %v, want errInvalidArgs", given, err)
		}
	}
}
