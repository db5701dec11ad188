package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A count of one is singular in what the commands print ("1 run", not
// "1 runs").
func TestCountsOfOneAreSingular(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	rep := &benchReport{Runs: 1, Submitted: 1, Ended: 1, Interrupted: true, Unfinished: []string{"run r (task t): parked after 1 event"}}
	rep.print(&out)
	for _, want := range []string{"1 run ended in", "trails checked: 1 run, ", "interrupted: 1 run had not ended"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench report lacks %q:\n%s", want, out.String())
		}
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "SR-1.txt"), []byte("ESCALATION DRAFT\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if n := listOutbox(&out, dir); n != 1 || !strings.Contains(out.String(), "): 1 draft\n") {
		t.Errorf("outbox of one draft: %d,\n%s", n, out.String())
	}

	for n, want := range map[int]string{0: "0 runs", 1: "1 run", 2: "2 runs"} {
		if got := plural(n, "run"); got != want {
			t.Errorf("plural(%d, run) = %q, want %q", n, got, want)
		}
	}
}
