package cityops

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func ids(t *testing.T, v any) []string {
	t.Helper()
	rows, ok := v.([]Complaint)
	if !ok {
		t.Fatalf("result is %T, want []Complaint", v)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.RequestID
	}
	return out
}

func TestLookupComplaintsFiltersSortsAndLimits(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	tests := []struct {
		name  string
		given string
		want  []string
	}{
		{"defaults are the five oldest open sanitation", `{}`, []string{"SR-10421", "SR-10422", "SR-10423", "SR-10426", "SR-10424"}},
		{"empty args are the defaults", ``, []string{"SR-10421", "SR-10422", "SR-10423", "SR-10426", "SR-10424"}},
		{"older than is strict: 5 days is not older than 5", `{"older_than_days":5}`, []string{"SR-10421", "SR-10422", "SR-10423"}},
		{"the happy path's lookup", `{"category":"sanitation","status":"open","older_than_days":5,"limit":5}`, []string{"SR-10421", "SR-10422", "SR-10423"}},
		{"limit keeps the oldest", `{"limit":2}`, []string{"SR-10421", "SR-10422"}},
		{"status filters", `{"status":"in_progress"}`, []string{"SR-10417"}},
		{"closed rows only when asked", `{"status":"closed"}`, []string{"SR-10415"}},
		{"category filters", `{"category":"noise"}`, []string{"SR-10416", "SR-10429"}},
		{"no match is an empty list", `{"category":"noise","older_than_days":100}`, []string{}},
		{"the maximum limit", `{"category":"sanitation","limit":20}`, []string{"SR-10421", "SR-10422", "SR-10423", "SR-10426", "SR-10424"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := bu.call(t.Context(), t, ToolLookupComplaints, "", tt.given)
			if err != nil {
				t.Fatalf("lookup_complaints(%s): %v", tt.given, err)
			}
			if g := ids(t, got); !slices.Equal(g, tt.want) {
				t.Errorf("lookup_complaints(%s) = %v, want %v", tt.given, g, tt.want)
			}
		})
	}
}

func TestLookupComplaintsReturnsFullRowsOldestFirst(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	got, err := bu.call(t.Context(), t, ToolLookupComplaints, "", `{"older_than_days":5}`)
	if err != nil {
		t.Fatal(err)
	}
	rows := got.([]Complaint)
	for i, r := range rows {
		if r.Category != "sanitation" || r.Status != StatusOpen || r.DaysOpen <= 5 {
			t.Errorf("row %s does not match the filter: %+v", r.RequestID, r)
		}
		if r.Summary == "" || r.Address == "" || r.ResidentEmail == "" {
			t.Errorf("row %s is not a full row: %+v", r.RequestID, r)
		}
		if i > 0 && rows[i-1].DaysOpen < r.DaysOpen {
			t.Errorf("rows not sorted by days_open descending: %d before %d", rows[i-1].DaysOpen, r.DaysOpen)
		}
	}
	if got := asJSON(t, []Complaint{}); got != "[]" {
		t.Errorf("an empty result marshals as %s, want []", got)
	}
}

func TestLookupComplaintsRefusesArgumentsItsSchemaForbids(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	for _, given := range []string{
		`{"older_than_days":-5}`,
		`{"older_than_days":366}`,
		`{"limit":0}`,
		`{"limit":21}`,
		`{"category":"parking"}`,
		`{"category":""}`,
		`{"status":"resolved"}`,
		`{"limit":"5"}`,
		`{"limit":2.5}`,
		`{"category":"sanitation","sort":"asc"}`,
		`{"limit":5} {"limit":6}`,
		`[]`,
	} {
		for _, tool := range []string{ToolLookupComplaints, ToolSlowLookup} {
			_, err := bu.call(t.Context(), t, tool, "", given)
			if !errors.Is(err, errInvalidArgs) {
				t.Errorf("%s(%s) error = %v, want errInvalidArgs", tool, given, err)
			}
		}
	}
}

func TestSlowLookupAnswersLikeLookupAfterItsDelay(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{SlowDelay: time.Millisecond})
	args := `{"category":"sanitation","status":"open","older_than_days":5,"limit":5}`
	fast, err := bu.call(t.Context(), t, ToolLookupComplaints, "", args)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := bu.call(t.Context(), t, ToolSlowLookup, "", args)
	if err != nil {
		t.Fatal(err)
	}
	if f, s := asJSON(t, fast), asJSON(t, slow); f != s {
		t.Errorf("slow_lookup = %s, want lookup_complaints' %s", s, f)
	}
}

func TestSlowLookupReturnsPromptlyWhenCancelled(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{SlowDelay: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	type outcome struct {
		result any
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := bu.call(ctx, t, ToolSlowLookup, "", `{}`)
		done <- outcome{r, err}
	}()
	cancel()
	select {
	case o := <-done:
		if !errors.Is(o.err, context.Canceled) || o.result != nil {
			t.Errorf("slow_lookup after cancel = %v, %v; want nil, context.Canceled", o.result, o.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("slow_lookup did not return after its context was cancelled")
	}
}

func TestSlowLookupHonoursDeadline(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{}) // the default 30s delay
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := bu.call(ctx, t, ToolSlowLookup, "", `{}`)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow_lookup past its deadline: err = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("slow_lookup took %s to notice its deadline", took)
	}
}
