//go:build soak

package soak

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The cluster soak's only outside witness of a tool running twice is the
// count of temp files the draft tool creates: the tool hard-links its
// draft into place, so a second run of a completed operation finds the
// draft, places nothing, and leaves placed[draft] at 1 and the draft count
// right; the events (trail) record at most one outcome per attempt and
// trust a "not run" label. checkOutbox used to take that count only as a
// lower bound (tempWrites < drafts), so an outbox where the tool ran twice
// for one operation, and no write was interrupted (no temp file left),
// passed. Every tool run creates one temp file; a run that was cut short
// leaves it behind. So now tempWrites may exceed drafts by at most the
// leftovers (and the runs a test allows to overlap).
func TestCheckOutboxCountsEveryToolRun(t *testing.T) {
	draft := "escalation-0193-op.txt"
	cases := []struct {
		name        string
		temps       int      // tool runs inotify saw
		leftovers   []string // temp files left in the outbox
		overlapping int
		wantProblem bool
	}{
		// The second run found the draft and removed its temp file.
		{name: "run twice", temps: 2, wantProblem: true},
		{name: "run once", temps: 1},
		// The first run was killed before its link; the retry wrote it.
		{name: "a run cut short, then the retry", temps: 2, leftovers: []string{".escalation-1.tmp"}},
		{name: "a run cut short, then two", temps: 3, leftovers: []string{".escalation-1.tmp"}, wantProblem: true},
		// A frozen worker's run went on beside the retry.
		{name: "a run allowed to overlap", temps: 2, overlapping: 1},
		{name: "the watch missed the run", temps: 0, wantProblem: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outbox := t.TempDir()
			for _, name := range append([]string{draft}, tc.leftovers...) {
				if err := os.WriteFile(filepath.Join(outbox, name), []byte("ESCALATION DRAFT\n"), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			w := &outboxWatch{placed: map[string]int{draft: 1}, temps: tc.temps}
			v := checkOutbox(t, outbox, w, 1, tc.overlapping)
			if got := len(v.problems) > 0; got != tc.wantProblem {
				t.Fatalf("1 draft, %d leftovers, %d tool runs, %d allowed to overlap: problems %q, want a problem %v",
					len(tc.leftovers), tc.temps, tc.overlapping, v.problems, tc.wantProblem)
			}
		})
	}
}

// crashCases must name every crash point the worker code has: a point the
// soak never arms is a crash nobody tests (deliver:approval used to be
// one). The literal points are read from the hook calls in worker/*.go
// (before:/after:<event type> are generated per event and checked by the
// happy path's types).
func TestCrashCasesCoverEveryNamedCrashPoint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "worker", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	hook := regexp.MustCompile(`\bcrash\("([a-z_]+:[a-z_]+)"\)`)
	var covered []string
	for _, c := range crashCases() {
		covered = append(covered, c.point, c.then)
	}
	var inCode, missing []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range hook.FindAllStringSubmatch(string(src), -1) {
			p := m[1]
			if slices.Contains(inCode, p) {
				continue
			}
			inCode = append(inCode, p)
			if !slices.Contains(covered, p) {
				missing = append(missing, p+" ("+filepath.Base(f)+")")
			}
		}
	}
	if len(inCode) < 8 {
		t.Fatalf("found only %v in worker/*.go: the pattern no longer matches the hook calls", inCode)
	}
	if len(missing) > 0 {
		t.Errorf("crash points in the worker code that TestCrashAtEveryPoint never arms: %v", missing)
	}
}
