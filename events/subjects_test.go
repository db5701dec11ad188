package events_test

import (
	"strings"
	"testing"

	"github.com/loopgate/loopgate/events"
)

func TestParseWorkSubject(t *testing.T) {
	t.Parallel()
	type parts struct{ kind, tenant, runID string }
	const notWork = "not a loopgate work subject"
	runID := events.RunID("cityops", "t-1")
	tests := []struct {
		name    string
		given   string
		want    parts
		wantErr string
	}{
		{name: "a tenant's tasks", given: "loopgate.tasks.cityops", want: parts{"tasks", "cityops", ""}},
		{name: "tenant with digits, dashes and underscores", given: "loopgate.tasks.City_Ops-2", want: parts{"tasks", "City_Ops-2", ""}},
		{name: "a 64-byte tenant", given: "loopgate.tasks." + strings.Repeat("t", 64), want: parts{"tasks", strings.Repeat("t", 64), ""}},
		{name: "a run's wake-up", given: "loopgate.resume.cityops." + runID, want: parts{"resume", "cityops", runID}},
		{name: "the builders' subjects parse", given: events.ResumeSubject("a", "b"), want: parts{"resume", "a", "b"}},

		{name: "empty", given: "", wantErr: notWork},
		{name: "events prefix", given: "loopgate.events.cityops", wantErr: notWork},
		{name: "approvals prefix", given: "loopgate.approvals.cityops.r.c", wantErr: notWork},
		{name: "another root", given: "loopgatex.tasks.cityops", wantErr: notWork},
		{name: "upper-case root", given: "LOOPGATE.tasks.cityops", wantErr: notWork},
		{name: "upper-case kind", given: "loopgate.Tasks.cityops", wantErr: notWork},
		{name: "tasks without tenant", given: "loopgate.tasks", wantErr: notWork},
		{name: "tasks with an empty tenant", given: "loopgate.tasks.", wantErr: notWork},
		{name: "tasks with a run id", given: "loopgate.tasks.cityops." + runID, wantErr: notWork},
		{name: "resume without run id", given: "loopgate.resume.cityops", wantErr: notWork},
		{name: "resume with an empty run id", given: "loopgate.resume.cityops.", wantErr: notWork},
		{name: "resume with an extra token", given: "loopgate.resume.cityops." + runID + ".x", wantErr: notWork},
		{name: "leading dot", given: ".loopgate.tasks.cityops", wantErr: notWork},
		{name: "trailing dot", given: "loopgate.tasks.cityops.", wantErr: notWork},
		{name: "double dot", given: "loopgate..tasks.cityops", wantErr: notWork},
		{name: "tenant with a space", given: "loopgate.tasks.city ops", wantErr: notWork},
		{name: "tenant with a trailing newline", given: "loopgate.tasks.cityops\n", wantErr: notWork},
		{name: "tenant wildcard", given: "loopgate.tasks.*", wantErr: notWork},
		{name: "tenant full wildcard", given: "loopgate.tasks.>", wantErr: notWork},
		{name: "run id wildcard", given: "loopgate.resume.cityops.*", wantErr: notWork},
		{name: "run id with a tab", given: "loopgate.resume.cityops.r\t1", wantErr: notWork},
		{name: "non-ASCII tenant", given: "loopgate.tasks.citéops", wantErr: notWork},
		{name: "a 65-byte tenant", given: "loopgate.tasks." + strings.Repeat("t", 65), wantErr: notWork},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kind, tenant, run, err := events.ParseWorkSubject(tt.given)
			got := parts{kind, tenant, run}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseWorkSubject(%q) error = %v, want it to contain %q", tt.given, err, tt.wantErr)
				}
				if got != (parts{}) {
					t.Errorf("ParseWorkSubject(%q) = %+v with its error, want zero parts", tt.given, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseWorkSubject(%q): %v", tt.given, err)
			}
			if got != tt.want {
				t.Errorf("ParseWorkSubject(%q) = %+v, want %+v", tt.given, got, tt.want)
			}
		})
	}
}

func TestValidToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		given string
		want  bool
	}{
		{name: "letters", given: "cityops", want: true},
		{name: "mixed case, digits, dash and underscore", given: "City_Ops-42", want: true},
		{name: "one byte", given: "a", want: true},
		{name: "a UUID", given: events.RunID("cityops", "t-1"), want: true},
		{name: "a call id", given: events.CallID(3, 2), want: true},
		{name: "64 bytes", given: strings.Repeat("x", 64), want: true},

		{name: "empty", given: ""},
		{name: "65 bytes", given: strings.Repeat("x", 65)},
		{name: "a dot", given: "city.ops"},
		{name: "star wildcard", given: "*"},
		{name: "full wildcard", given: ">"},
		{name: "wildcard inside", given: "city*"},
		{name: "a space", given: "city ops"},
		{name: "leading space", given: " cityops"},
		{name: "a tab", given: "city\tops"},
		{name: "a trailing newline", given: "cityops\n"},
		{name: "a NUL byte", given: "city\x00ops"},
		{name: "a slash", given: "city/ops"},
		{name: "non-ASCII letter", given: "citéops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := events.ValidToken(tt.given); got != tt.want {
				t.Errorf("ValidToken(%q) = %v, want %v", tt.given, got, tt.want)
			}
		})
	}
}

func TestSubjectBuilders(t *testing.T) {
	t.Parallel()
	const run = "5c1d7a2e-0000-5000-8000-000000000001"
	e := events.Event{RunID: run, Tenant: "cityops", Seq: 7, Type: events.TypeExecuted}
	tests := []struct {
		name  string
		given string
		want  string
	}{
		{name: "task subject", given: events.TaskSubject("cityops"), want: "loopgate.tasks.cityops"},
		{name: "resume subject", given: events.ResumeSubject("cityops", run), want: "loopgate.resume.cityops." + run},
		{name: "event subject", given: events.EventSubject("cityops", run, events.TypeProposed), want: "loopgate.events.cityops." + run + ".proposed"},
		{name: "an event's own subject", given: e.Subject(), want: "loopgate.events.cityops." + run + ".executed"},
		{name: "an event's msg id", given: e.MsgID(), want: run + "/7"},
		{name: "run filter", given: events.RunFilter("cityops", run), want: "loopgate.events.cityops." + run + ".*"},
		{name: "any-tenant run filter", given: events.AnyTenantRunFilter(run), want: "loopgate.events.*." + run + ".*"},
		{name: "approval subject", given: events.ApprovalSubject("cityops", run, "s2c1"), want: "loopgate.approvals.cityops." + run + ".s2c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.given != tt.want {
				t.Errorf("got %q, want %q", tt.given, tt.want)
			}
		})
	}
}

func TestEventSubjectsArePrefixedAsTheWireContractSays(t *testing.T) {
	t.Parallel()
	prefixes := map[string]string{
		events.TaskSubject("t"):               events.TasksPrefix,
		events.ResumeSubject("t", "r"):        events.ResumePrefix,
		events.EventSubject("t", "r", "x"):    events.EventsPrefix,
		events.RunFilter("t", "r"):            events.EventsPrefix,
		events.AnyTenantRunFilter("r"):        events.EventsPrefix,
		events.ApprovalSubject("t", "r", "c"): events.ApprovalsPrefix,
	}
	for subject, prefix := range prefixes {
		if !strings.HasPrefix(subject, prefix+".") {
			t.Errorf("%q does not start with %q", subject, prefix+".")
		}
	}
}

// FuzzParseWorkSubject: parsing never panics, fails with zero parts, and
// whatever it accepts is exactly the subject its parts rebuild.
func FuzzParseWorkSubject(f *testing.F) {
	// The seed corpus is in testdata/fuzz/FuzzParseWorkSubject.
	f.Fuzz(func(t *testing.T, subject string) {
		kind, tenant, runID, err := events.ParseWorkSubject(subject)
		if err != nil {
			if kind != "" || tenant != "" || runID != "" {
				t.Fatalf("ParseWorkSubject(%q) = %q, %q, %q with error %v", subject, kind, tenant, runID, err)
			}
			return
		}
		if !events.ValidToken(tenant) {
			t.Fatalf("ParseWorkSubject(%q) tenant %q is not a valid token", subject, tenant)
		}
		var rebuilt string
		switch kind {
		case "tasks":
			if runID != "" {
				t.Fatalf("ParseWorkSubject(%q) = tasks with run id %q", subject, runID)
			}
			rebuilt = events.TaskSubject(tenant)
		case "resume":
			if !events.ValidToken(runID) {
				t.Fatalf("ParseWorkSubject(%q) run id %q is not a valid token", subject, runID)
			}
			rebuilt = events.ResumeSubject(tenant, runID)
		default:
			t.Fatalf("ParseWorkSubject(%q) kind = %q", subject, kind)
		}
		if rebuilt != subject {
			t.Fatalf("ParseWorkSubject(%q) = %q, %q, %q, which rebuild %q", subject, kind, tenant, runID, rebuilt)
		}
	})
}
