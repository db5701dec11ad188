package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// loopgate runs counts the runs by status and stop reason and lists them,
// the one still going (parked on its first draft) first; its filters and
// bad flags behave as documented.
func TestRunsCountsAndListsTheRunsByStatus(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	runs := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(t.Context(), append([]string{"runs", "--nats", srv.url}, args...), nil, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, _ := runs(); code != exitOK || !strings.Contains(out, "no runs (any tenant)") {
		t.Fatalf("before any task: exit %d\n%s", code, out)
	}

	for _, args := range [][]string{
		{"--task-id", "r-runaway", "--agent", "runaway-assistant"},
		{"--task-id", "r-dry", "--agent", "dry-run-assistant", "--dry-run"},
	} {
		var out, errOut bytes.Buffer
		Main(t.Context(), append([]string{"submit", "--nats", srv.url}, args...), nil, &out, &errOut)
	}
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	publishTask(t, nc, plainTask("r-parked", "escalation-assistant"), "r-parked")
	parked := events.RunID("cityops", "r-parked")

	// The projection trails the events by up to a quarter second.
	var recs []journal.RunRecord
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, errOut := runs("--json")
		if code != exitOK {
			t.Fatalf("runs --json: exit %d: %s", code, errOut)
		}
		recs = nil
		for line := range strings.Lines(out) {
			var r journal.RunRecord
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("runs --json printed %q: %v", line, err)
			}
			recs = append(recs, r)
		}
		if len(recs) == 3 && recs[0].RunID == parked && recs[0].Status == "parked" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs --json never showed the parked run first among 3 runs:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	reasons := map[string]string{}
	for _, r := range recs[1:] {
		if r.Status != "finished" {
			t.Errorf("run %s (%s): status %q listed after the parked run, want finished", r.RunID, r.TaskID, r.Status)
		}
		reasons[r.TaskID] = r.Reason
	}
	if reasons["r-runaway"] != "max_steps" || reasons["r-dry"] != "done" {
		t.Errorf("finished runs' reasons %v, want r-runaway max_steps and r-dry done", reasons)
	}
	if recs[1].Updated.Before(recs[2].Updated) {
		t.Errorf("finished runs listed oldest first: %v then %v", recs[1].Updated, recs[2].Updated)
	}

	code, out, _ := runs()
	for _, want := range []string{
		"3 runs (any tenant): finished 2 (done 1, max_steps 1), parked 1",
		"RUN", parked,
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("runs: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if code, out, _ := runs("--status", "finished", "--limit", "1"); code != exitOK ||
		!strings.Contains(out, "2 runs (any tenant, status finished): finished 2 (done 1, max_steps 1)") ||
		!strings.Contains(out, "… and 1 more") || strings.Contains(out, parked) {
		t.Errorf("runs --status finished --limit 1: exit %d:\n%s", code, out)
	}
	if code, out, _ := runs("--reason", "max_steps", "--json"); code != exitOK || strings.Count(out, "\n") != 1 ||
		!strings.Contains(out, `"task_id":"r-runaway"`) {
		t.Errorf("runs --reason max_steps --json: exit %d:\n%s", code, out)
	}
	if code, out, _ := runs("--tenant", "other"); code != exitOK || !strings.Contains(out, "no runs (tenant other)") {
		t.Errorf("runs --tenant other: exit %d:\n%s", code, out)
	}

	// A worker killed before it wrote its last updates leaves records
	// behind the events: here the finished runaway run's record says
	// running, as it did at its start. The events decide what is shown.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	runaway := events.RunID("cityops", "r-runaway")
	stale, _ := json.Marshal(journal.RunRecord{RunID: runaway, Tenant: "cityops", TaskID: "r-runaway", Agent: "runaway-assistant",
		Status: "running", LastSeq: 1, Updated: time.Now().Add(-time.Hour)})
	if _, err := kv.Put(t.Context(), "cityops."+runaway, stale); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runs()
	for _, want := range []string{
		"3 runs (any tenant): finished 2 (done 1, max_steps 1), parked 1",
		"finished*",
		"* 1 run: the projection's record is behind the run's events",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("runs with a stale record: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if code, out, _ := runs("--status", "running", "--json"); code != exitOK || out != "" {
		t.Errorf("runs --status running with the stale record: exit %d, listed\n%s", code, out)
	}
	_, out, _ = runs("--reason", "max_steps", "--json")
	var shown listedRun
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.Projected != "running" || shown.LastSeq < 3 {
		t.Errorf("runs --reason max_steps --json: %+v (%v), want the run as its events say, projected_status running", shown, err)
	}

	for _, bad := range [][]string{{"--status", "stuck"}, {"--reason", "max-steps"}, {"--tenant", "a.b"}, {"--limit", "-1"}} {
		if code, _, errOut := runs(bad...); code != exitError || !strings.Contains(errOut, bad[0]) {
			t.Errorf("runs %v: exit %d, stderr %q; want exit %d naming %s", bad, code, errOut, exitError, bad[0])
		}
	}
}

// The footnote on records behind the events counts every run matched, and
// says how many of them the table lists when --limit hides some.
func TestRunsFootnoteSaysHowManyOfTheStaleRunsAreListed(t *testing.T) {
	t.Parallel()
	now := time.Now()
	run := func(id string, age time.Duration, projected string) listedRun {
		return listedRun{RunRecord: journal.RunRecord{RunID: id, Tenant: "cityops", Agent: "escalation-assistant",
			Status: journal.RunRunning, LastSeq: 3, Updated: now.Add(-age)}, Projected: projected}
	}
	recs := []listedRun{run("r1", 3*time.Minute, "parked"), run("r2", 2*time.Minute, ""), run("r3", time.Minute, "parked")}
	for _, c := range []struct {
		limit, marked int
		want, avoid   string
	}{
		{0, 2, "* 2 runs: the projection's record", "of them listed"},
		{3, 2, "* 2 runs: the projection's record", "of them listed"},
		{2, 1, "* 2 runs (1 of them listed): the projection's record", ""},
		{1, 1, "* 2 runs (1 of them listed): the projection's record", ""},
	} {
		var out bytes.Buffer
		printRuns(&out, recs, "any tenant", c.limit, now)
		if !strings.Contains(out.String(), c.want) || (c.avoid != "" && strings.Contains(out.String(), c.avoid)) {
			t.Errorf("--limit %d: want %q (and not %q) in\n%s", c.limit, c.want, c.avoid, out.String())
		}
		if marks := strings.Count(out.String(), "running*"); marks != c.marked {
			t.Errorf("--limit %d: %d rows marked stale, want %d", c.limit, marks, c.marked)
		}
	}
}

// A task rejected at intake never becomes a run, so the projection has no
// record of it: loopgate runs lists it from its rejected event, with the
// reason, and --status rejected lists only such tasks.
func TestRunsListsRejectedTasksWithTheirReason(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	if code, out, stderr := run(t, "", "submit", "--nats", srv.url, "--task-id", "rej-1", "--agent", "no-such-agent", "--timeout", "30s"); code != exitRejected {
		t.Fatalf("submit to an unknown agent: exit %d, want %d\n%s%s", code, exitRejected, out, stderr)
	}
	if code, out, stderr := run(t, "", "submit", "--nats", srv.url, "--task-id", "ok-1", "--agent", "dry-run-assistant", "--dry-run", "--timeout", "30s"); code != exitOK {
		t.Fatalf("submit a dry run: exit %d\n%s%s", code, out, stderr)
	}
	rejected := events.RunID("cityops", "rej-1")

	// The dry run's record trails its events by up to a quarter second.
	var out string
	deadline := time.Now().Add(20 * time.Second)
	for {
		var code int
		code, out, _ = run(t, "", "runs", "--nats", srv.url)
		if code != exitOK {
			t.Fatalf("runs: exit %d\n%s", code, out)
		}
		if strings.Contains(out, "finished 1") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{"2 runs (any tenant): finished 1 (done 1), rejected 1", rejected, "rejected  /agent: ", "Rejected tasks never became runs"} {
		if !strings.Contains(out, want) {
			t.Errorf("runs lacks %q:\n%s", want, out)
		}
	}

	code, out, stderr := run(t, "", "runs", "--nats", srv.url, "--status", "rejected", "--json")
	var r listedRun
	if err := json.Unmarshal([]byte(out), &r); code != exitOK || err != nil || strings.Count(out, "\n") != 1 ||
		r.RunID != rejected || r.TaskID != "rej-1" || r.Status != "rejected" || !strings.HasPrefix(r.Rejection, "/agent: ") || !strings.Contains(r.Rejection, "no-such-agent") {
		t.Errorf("runs --status rejected --json: exit %d, %+v (%v), want the rejected task alone, with its reason\n%s%s", code, r, err, out, stderr)
	}
	if code, out, _ := run(t, "", "runs", "--nats", srv.url, "--status", "rejected", "--tenant", "other"); code != exitOK || !strings.Contains(out, "no runs (tenant other, status rejected)") {
		t.Errorf("runs --status rejected --tenant other: exit %d\n%s", code, out)
	}
	if code, out, _ := run(t, "", "runs", "--nats", srv.url, "--status", "finished"); code != exitOK || strings.Contains(out, rejected) {
		t.Errorf("runs --status finished lists the rejected task: exit %d\n%s", code, out)
	}
}
