package cli

import (
	"strings"
	"testing"
)

// loopgate cancel against a serve: a cancel by someone the policy does not
// allow is rejected (exit 4) and the run stays parked; the run's own
// principal (the default --as) stops it at once, finished cancelled with
// who and why; a cancel of the finished run is recorded as ignored (exit
// 4, class finished).
func TestCancelCommandStopsAParkedRunAndReportsWhatLoopgateRecorded(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	runID := parkedRun(t, srv, "cli-cancel-1")

	code, out, errOut := run(t, "", "cancel", runID, "--as", "intern@cityops", "--reason", "not mine to stop", "--nats", srv.url, "--wait", "30s")
	if code != exitApprovalRejected || !strings.Contains(out, "REJECTED (not_authorized): intern@cityops may not cancel this run") {
		t.Fatalf("cancel as intern: exit %d, want %d and not_authorized\n%s\n%s", code, exitApprovalRejected, out, errOut)
	}

	code, out, errOut = run(t, "", "cancel", runID, "--reason", "wrong complaints", "--nats", srv.url, "--wait", "30s")
	if code != exitOK {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"sent cancel of run " + runID + " as dev@cityops on loopgate.cancel.cityops." + runID,
		"accepted: the run stops at its next boundary",
		"CANCEL by dev@cityops: wrong complaints",
		"run " + runID + " finished: cancelled",
		"why: cancelled by dev@cityops: wrong complaints",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cancel printed no %q:\n%s", want, out)
		}
	}

	code, out, errOut = run(t, "", "cancel", runID, "--reason", "again", "--tenant", "cityops", "--as", "dev@cityops", "--nats", srv.url, "--wait", "30s")
	if code != exitApprovalRejected || !strings.Contains(out, "REJECTED (finished): the run had finished (cancelled): the cancel is ignored") {
		t.Fatalf("cancel of the finished run: exit %d, want %d and class finished\n%s\n%s", code, exitApprovalRejected, out, errOut)
	}
}

// loopgate cancel checks its arguments before connecting.
func TestCancelCommandRefusesBadArgumentsWithoutSending(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"cancel", "run-1"}, "--reason is required"},
		{[]string{"cancel", "run.1", "--reason", "x"}, `"run.1" is not a run id`},
		{[]string{"cancel", "run-1", "--reason", "x", "--wait", "0s"}, "--wait must be positive"},
		{[]string{"cancel", "run-1", "--reason", "x", "--tenant", "a.b"}, `--tenant "a.b" is not a tenant`},
	}
	for _, c := range cases {
		code, _, errOut := run(t, "", c.args...)
		if code != exitError || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", c.args, code, errOut, exitError, c.want)
		}
	}
}
