package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// `loopgate audit` on a run id that is not a valid id prints only its
// usage: nothing said the id is what is wrong (found by review).
func TestAuditNamesAnInvalidRunID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"cityops.r-1", "r 1", strings.Repeat("a", 65)} {
		code, out, stderr := run(t, "", "audit", id, "--nats", "nats://127.0.0.1:1")
		if code != exitError || !strings.Contains(stderr, "run id") {
			t.Errorf("audit %q: exit %d, want %d with the run id named\nstdout:\n%s\nstderr:\n%s", id, code, exitError, out, stderr)
		}
	}
}

// `loopgate audit --follow` on a run id that has no events (a typo, or a
// task still queued) waited silent, where without --follow the same id is
// "run X has no events" (found by review). It goes on waiting (the task
// may start), and says so.
func TestAuditFollowOfARunWithNoEventsSaysItWaits(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var out, errOut syncBuffer
	Main(ctx, []string{"audit", "no-such-run", "--follow", "--nats", env.Server.ClientURL()}, nil, &out, &errOut)
	if !strings.Contains(errOut.String(), "run no-such-run has no events yet") {
		t.Errorf("audit --follow of a run with no events said nothing of it\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}

// A runs record that is JSON but not a run record ({} or null, written by
// hand or by a foreign writer) is left out and named, as a record that
// does not decode is. It used to fail the whole listing with an error that
// named no record, the good runs not shown (found by review).
func TestRunsListsTheOthersBesideARecordThatIsNoRunRecord(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	kv, err := env.JS.KeyValue(ctx, journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(journal.RunRecord{RunID: "good-1", Tenant: "cityops", TaskID: "t", Agent: "a", Status: journal.RunFinished, Reason: "done", LastSeq: 5, Updated: time.Now()})
	for key, val := range map[string]string{"cityops.good-1": string(good), "cityops.junk-1": `{}`} {
		if _, err := kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	code, out, stderr := run(t, "", "runs", "--nats", env.Server.ClientURL())
	if code != exitOK || !strings.Contains(out, "good-1") || !strings.Contains(stderr, "cityops.junk-1") {
		t.Errorf("runs: exit %d, want %d listing good-1 and naming the record cityops.junk-1\nstdout:\n%s\nstderr:\n%s", code, exitOK, out, stderr)
	}
}

// A run the projection says is running whose last message on its subjects
// is not an event (a foreign publisher's) failed the whole listing, every
// other run unshown. It is now listed as its record says and named.
func TestRunsListsTheOthersBesideARunWhoseLastEventIsNoEvent(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	kv, err := env.JS.KeyValue(ctx, journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{"good-1", "bad-1"} {
		rec, _ := json.Marshal(journal.RunRecord{RunID: id, Tenant: "cityops", TaskID: "t-" + id, Agent: "a", Status: journal.RunRunning, LastSeq: 1, Updated: now})
		if _, err := kv.Put(ctx, "cityops."+id, rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.JS.Publish(ctx, events.EventSubject("cityops", "bad-1", events.TypeProposed), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "", "runs", "--nats", env.Server.ClientURL())
	if code != exitOK || !strings.Contains(out, "good-1") || !strings.Contains(out, "bad-1") || !strings.Contains(stderr, "bad-1") {
		t.Errorf("runs: exit %d, want %d listing good-1 and bad-1 and naming bad-1's last event\nstdout:\n%s\nstderr:\n%s", code, exitOK, out, stderr)
	}
}
