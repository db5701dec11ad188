// Package fuzzrun holds fuzz.sh, which make fuzz-smoke and make fuzz run;
// its test runs the script against fake go commands.
package fuzzrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGo writes a go command that answers its n-th call with outputs[n]
// (its last one from then on): exit status, then output.
func fakeGo(t *testing.T, outputs ...string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\nn=$(cat " + dir + "/calls 2>/dev/null || echo 0)\necho $((n + 1)) > " + dir + "/calls\ncase $n in\n"
	for i, o := range outputs {
		status, text, _ := strings.Cut(o, " ")
		pattern := string(rune('0' + i))
		if i == len(outputs)-1 {
			pattern = "*"
		}
		script += pattern + ") printf '%s\\n' '" + text + "'; exit " + status + ";;\n"
	}
	script += "esac\n"
	path := filepath.Join(dir, "go")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func calls(t *testing.T, fake string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(fake), "calls"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func run(fake string, targets ...string) (string, error) {
	out, err := exec.Command("sh", append([]string{"fuzz.sh", fake, "3s"}, targets...)...).CombinedOutput()
	return string(out), err
}

const race = "--- FAIL: FuzzX (3.31s)\n    context deadline exceeded\nFAIL"

func TestTheEndOfFuzztimeRaceIsTriedOnceMore(t *testing.T) {
	fake := fakeGo(t, "1 "+race, "0 ok")
	out, err := run(fake, "./a:FuzzX", "./b:FuzzY")
	if err != nil {
		t.Fatalf("fuzz.sh failed: %v\n%s", err, out)
	}
	if got := calls(t, fake); got != "3" {
		t.Errorf("go test ran %s times, want 3 (FuzzX twice, FuzzY once)\n%s", got, out)
	}
	if !strings.Contains(out, "once more") {
		t.Errorf("the retry is not said:\n%s", out)
	}
}

func TestTheRaceTwiceFails(t *testing.T) {
	fake := fakeGo(t, "1 "+race)
	if out, err := run(fake, "./a:FuzzX"); err == nil {
		t.Fatalf("fuzz.sh passed a target that failed twice:\n%s", out)
	}
	if got := calls(t, fake); got != "2" {
		t.Errorf("go test ran %s times, want 2", got)
	}
}

func TestARealFailureFailsAtOnce(t *testing.T) {
	for name, output := range map[string]string{
		"a failing input":                   "1 --- FAIL: FuzzX (0.10s)\n    x_test.go:9: mismatch\n    Failing input written to testdata/fuzz/FuzzX/abc\nFAIL",
		"the deadline with a failing input": "1 --- FAIL: FuzzX (3.31s)\n    context deadline exceeded\n    Failing input written to testdata/fuzz/FuzzX/abc\nFAIL",
		"a build error":                     "1 ./x_test.go:3:1: syntax error",
	} {
		t.Run(name, func(t *testing.T) {
			fake := fakeGo(t, output, "0 ok")
			if out, err := run(fake, "./a:FuzzX", "./b:FuzzY"); err == nil {
				t.Fatalf("fuzz.sh passed:\n%s", out)
			}
			if got := calls(t, fake); got != "1" {
				t.Errorf("go test ran %s times, want 1", got)
			}
		})
	}
}
