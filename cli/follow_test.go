package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// storeTrail appends evs, their envelopes filled in, as run runID of
// tenant cityops.
func storeTrail(t *testing.T, j *journal.Journal, runID string, evs ...events.Event) {
	t.Helper()
	for i := range evs {
		evs[i].EventID, evs[i].RunID, evs[i].Tenant, evs[i].Seq, evs[i].Time = uuid.NewString(), runID, "cityops", uint64(i+1), time.Now().UTC()
		if evs[i].Data == nil {
			evs[i].Data = json.RawMessage(`{}`)
		}
	}
	if _, err := j.Append(t.Context(), 0, evs...); err != nil {
		t.Fatal(err)
	}
}

// A follow that ends before its run does (submit's --timeout, Ctrl-C on
// submit or audit --follow) says so, says the run goes on, and how to
// follow it again, with its own exit code: it used to fail with "follow
// run: context canceled", as if something had broken.
func TestAFollowThatEndsFirstSaysTheRunGoesOn(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	const runID = "unfinished-1"
	storeTrail(t, srv.Journal, runID, events.Event{Type: events.TypeStarted})
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		ctx     func() (context.Context, context.CancelFunc)
		want    string
	}{
		{"timeout", time.Second, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), time.Second)
		}, "--timeout 1s passed: stopped following run " + runID},
		{"interrupted", 0, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(500*time.Millisecond, cancel)
			return ctx, cancel
		}, "interrupted: stopped following run " + runID},
	} {
		ctx, cancel := tc.ctx()
		var stdout, stderr bytes.Buffer
		code := follow(ctx, env{stdout: &stdout, stderr: &stderr}, srv.Journal, followed{runID: runID, filter: events.RunFilter("cityops", runID), natsURL: "nats://127.0.0.1:4333", timeout: tc.timeout})
		cancel()
		hint := "loopgate audit " + runID + " --follow --nats nats://127.0.0.1:4333"
		if code != exitUnfinished || !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "goes on") ||
			!strings.Contains(stderr.String(), hint) || strings.Contains(stderr.String(), "context") {
			t.Errorf("%s: exit %d, want %d with %q, that the run goes on, and %q\nstdout:\n%s\nstderr:\n%s",
				tc.name, code, exitUnfinished, tc.want, hint, stdout.String(), stderr.String())
		}
		if !strings.Contains(stdout.String(), "started") {
			t.Errorf("%s: the run's events were not printed before the follow ended:\n%s", tc.name, stdout.String())
		}
	}
}

// An approve interrupted while it waits for loopgate to record what its
// message did says the message is stored, with its own exit code; one
// interrupted after the decision was recorded has done its part (exit 0).
func TestAnInterruptedApproveSaysWhatStands(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	const seq = 42
	approved, _ := events.EncodeData(events.ApprovedData{Decision: "approve", Approver: "supervisor@cityops", ApprovalSeq: seq})
	storeTrail(t, srv.Journal, "undecided-1", events.Event{Type: events.TypeStarted})
	storeTrail(t, srv.Journal, "decided-1", events.Event{Type: events.TypeStarted},
		events.Event{Type: events.TypeApproved, Step: 1, CallID: "s1c1", Tool: "draft_escalation", Data: approved})
	for _, tc := range []struct {
		runID        string
		code         int
		inErr, inOut string
	}{
		{"undecided-1", exitUnfinished, "interrupted before loopgate recorded what the message did: it is stored (approvals seq 42)", ""},
		{"decided-1", exitOK, "", "(interrupted; the run goes on; follow it with: loopgate audit decided-1 --follow --nats nats://127.0.0.1:4333)"},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel)
		var stdout, stderr bytes.Buffer
		code := awaitDecision(ctx, env{stdout: &stdout, stderr: &stderr}, srv.Journal, "cityops", tc.runID, seq, time.Minute, "nats://127.0.0.1:4333")
		cancel()
		if code != tc.code || !strings.Contains(stderr.String(), tc.inErr) || !strings.Contains(stdout.String(), tc.inOut) {
			t.Errorf("%s: exit %d, want %d with %q in stderr and %q in stdout\nstdout:\n%s\nstderr:\n%s",
				tc.runID, code, tc.code, tc.inErr, tc.inOut, stdout.String(), stderr.String())
		}
	}
}
