package cli

import (
	"strings"
	"testing"
)

func TestSuggestNamesTheCloseCandidateOnly(t *testing.T) {
	t.Parallel()
	commands := []string{"demo", "serve", "worker", "submit", "audit", "bench", "runs", "pending", "approve", "deny", "keys", "tools", "version"}
	for _, tc := range []struct {
		given, want string
	}{
		{"sumbit", "submit"},    // two letters swapped
		{"aprove", "approve"},   // one left out
		{"approvee", "approve"}, // one too many
		{"Submit", "submit"},    // case
		{"run", "runs"},
		{"pendng", "pending"},
		{"vers", "version"}, // the only one it starts
		{"frobnicate", ""},
		{"x", ""},
		{"", ""},
		{"de", ""}, // demo and deny both start so; neither is close
	} {
		if got := suggest(tc.given, commands); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.given, got, tc.want)
		}
	}
}

func TestEditDistanceCountsASwapAsOneEdit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"abc", "abc", 0},
		{"abc", "acb", 1}, {"kitten", "sitting", 3}, {"nats", "nast", 1}, {"ca", "abc", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// A mistyped command or flag gets one line naming it, with the likely
// meant one, and one saying where the list is: not the whole usage.
func TestAMistypedCommandOrFlagGetsASuggestionNotTheUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sumbit"}, `loopgate: unknown command "sumbit"; did you mean "submit"?` + "\nRun 'loopgate help' for the commands.\n"},
		{[]string{"frobnicate"}, `loopgate: unknown command "frobnicate"` + "\nRun 'loopgate help' for the commands.\n"},
		{[]string{"submit", "--nat", "nats://127.0.0.1:1"}, "loopgate submit: unknown flag --nat; did you mean --nats?\nRun 'loopgate submit -h' for its flags.\n"},
		{[]string{"runs", "-statsu", "parked"}, "loopgate runs: unknown flag --statsu; did you mean --status?\nRun 'loopgate runs -h' for its flags.\n"},
		{[]string{"approve", "r1", "c1", "--ass", "x"}, "loopgate approve: unknown flag --ass; did you mean --as?\nRun 'loopgate approve -h' for its flags.\n"},
		{[]string{"submit", "--frobnicate"}, "loopgate submit: unknown flag --frobnicate\nRun 'loopgate submit -h' for its flags.\n"},
		{[]string{"submit", "--timeout", "soon"}, "loopgate submit: invalid value \"soon\" for flag --timeout: parse error\nRun 'loopgate submit -h' for its flags.\n"},
		{[]string{"serve", "extra"}, "loopgate serve: unexpected argument \"extra\" (the flags after it would not be read)\nRun 'loopgate serve -h' for its flags.\n"},
	} {
		code, out, stderr := run(t, "", tc.args...)
		if code != exitError || out != "" || stderr != tc.want {
			t.Errorf("loopgate %s: exit %d, stdout %q, stderr:\n%s\nwant exit %d and stderr:\n%s", strings.Join(tc.args, " "), code, out, stderr, exitError, tc.want)
		}
	}
	// -h still prints the whole usage, and exits 0.
	code, _, stderr := run(t, "", "submit", "-h")
	if code != exitOK || !strings.Contains(stderr, "Usage of loopgate submit:") || !strings.Contains(stderr, "-no-follow") {
		t.Errorf("submit -h: exit %d, stderr:\n%s", code, stderr)
	}
}
