package cli

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
)

// Not parallel: the client commands authenticate from the environment.
func TestSubmitNoFollowPublishesAsAUserThatMayOnlyPublishTasks(t *testing.T) {
	srv := startSecuredServe(t)
	t.Setenv("NATS_USER", "upstream")
	t.Setenv("NATS_PASSWORD", "upstream-change-me")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX_upstream")
	task := []string{"--nats", srv.url, "--agent", "dry-run-assistant", "--dry-run", "--input", "Draft an escalation for SR-10421."}

	// Following needs the events stream, which upstream may not read:
	// the error says so plainly, before anything is published.
	start := time.Now()
	code, out, stderr := run(t, "", append([]string{"submit", "--task-id", "up-follow"}, task...)...)
	if code != exitError || strings.Count(stderr, "\n") != 1 ||
		!strings.Contains(stderr, `refused this user reading runs (Permissions Violation for Publish to "$JS.API.STREAM.INFO.LOOPGATE_EVENTS")`) ||
		!strings.Contains(stderr, "nothing was submitted") || !strings.Contains(stderr, "submits with --no-follow") {
		t.Errorf("submit as upstream: exit %d, want %d and one plain line naming the refusal and --no-follow\nstdout:\n%s\nstderr:\n%s", code, exitError, out, stderr)
	}
	for _, internal := range []string{"journal:", "Ensure", "deadline exceeded", "nats: permissions violation"} {
		if strings.Contains(stderr, internal) {
			t.Errorf("the error leaks %q:\n%s", internal, stderr)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("the refusal took %s to report: it waited for a timeout", d)
	}

	// A tenant the user may not publish for: refused at once, named.
	code, out, stderr = run(t, "", append([]string{"submit", "--no-follow", "--tenant", "acme", "--task-id", "up-acme"}, task...)...)
	if code != exitError || !strings.Contains(stderr, `refused this user publishing a task of tenant acme (Permissions Violation for Publish to "loopgate.tasks.acme"): nothing was submitted`) {
		t.Errorf("submit --no-follow for another tenant: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}

	// --no-follow: the run id alone on stdout, how to follow on stderr.
	runID := events.RunID("cityops", "up-1")
	code, out, stderr = run(t, "", append([]string{"submit", "--no-follow", "--task-id", "up-1"}, task...)...)
	if code != exitOK || out != runID+"\n" || !strings.Contains(stderr, "loopgate audit "+runID+" --follow") {
		t.Fatalf("submit --no-follow: exit %d, want %d and stdout %q\nstdout:\n%s\nstderr:\n%s", code, exitOK, runID+"\n", out, stderr)
	}
	code, out, _ = run(t, "", append([]string{"submit", "--no-follow", "--json", "--task-id", "up-1"}, task...)...)
	if want := `{"task_id":"up-1","run_id":"` + runID + `","duplicate":true}` + "\n"; code != exitOK || out != want {
		t.Errorf("submit --no-follow --json again: exit %d, stdout %q, want %q", code, out, want)
	}

	// A refusal is printed once, in the command's error: nats.go's default
	// handler printed it to the process's stderr too.
	var code2 int
	var stderr2 string
	printed := processStderr(t, func() {
		code2, _, stderr2 = run(t, "", "audit", runID, "--nats", srv.url)
	})
	if code2 == exitOK || !strings.Contains(stderr2, `Permissions Violation for Publish to "$JS.API.STREAM.INFO.LOOPGATE_EVENTS"`) || strings.Contains(printed, "Permissions Violation") {
		t.Errorf("audit as upstream: exit %d, its error:\n%s\nthe process's stderr besides:\n%s\nwant the refusal named once, in the error", code2, stderr2, printed)
	}

	// The task was stored and its run ends: the auditor follows it.
	t.Setenv("NATS_USER", "auditor")
	t.Setenv("NATS_PASSWORD", "auditor-change-me")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX_auditor")
	if code, out, stderr := run(t, "", "audit", runID, "--follow", "--nats", srv.url); code != exitOK || !strings.Contains(out, "finished") {
		t.Errorf("audit --follow of the submitted run: exit %d\n%s%s", code, out, stderr)
	}
}

// processStderr returns what f wrote to the process's stderr (os.Stderr),
// where nothing a command says should go. Not for parallel tests.
func processStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	os.Stderr = saved
	w.Close()
	return <-done
}
