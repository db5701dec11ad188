package events

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeList returns the alternatives the README's loop diagram lists
// after label ("finished (done | max_steps | …)"), across its lines and
// box-drawing characters.
func readmeList(t *testing.T, label string) []string {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := strings.Index(readme, "## The loop")
	if start < 0 {
		t.Fatal("README has no \"## The loop\" section")
	}
	block := readme[start:]
	i := strings.Index(block, label+" (")
	if i < 0 {
		t.Fatalf("the loop diagram has no %q list", label)
	}
	block = block[i+len(label)+2:]
	block = block[:strings.Index(block, ")")]
	block = regexp.MustCompile(`[│┌┐└┘─\s]+`).ReplaceAllString(block, "")
	return strings.Split(block, "|")
}

// The README's diagram of the loop is where an audit consumer learns what a
// finished event's reason can be. It used to list ten reasons where
// Reasons() (what `loopgate runs --reason` accepts) and DESIGN.md have
// eleven: completion_unverified was missing, and no code wrote it (the
// worker now stops a run whose final answer claims drafts no write made).
func TestReadmeListsEveryStopReason(t *testing.T) {
	got := readmeList(t, "finished")
	var want []string
	for _, r := range Reasons() {
		want = append(want, string(r))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("README's loop lists finished reasons %v, Reasons() is %v", got, want)
	}
}

// The same diagram lists the executed statuses; args_lost (ExecArgsLost),
// written when a redacted call's worker is gone, used to be missing.
func TestReadmeListsEveryExecutedStatus(t *testing.T) {
	got := readmeList(t, "executed")
	want := []string{ExecOK, ExecTimeout, ExecTransient, ExecToolFailed, ExecDryRun, ExecConflict, ExecUnknown, ExecArgsLost}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("README's loop lists executed statuses %v, the Exec constants are %v", got, want)
	}
}
