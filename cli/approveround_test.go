package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// An approver runs `loopgate approve RUN CALL --decision retry` on a
// needs_human question (round 2: "the outcome of attempt 1 is unknown") and
// leaves the confirmation prompt open. Meanwhile another approver answers
// round 2 with retry, attempt 2's outcome is unknown too, and the run asks
// round 3 of the same call. The first approver then types "y": approve
// sends retry with the args hash it read, after round 3 was asked, so the
// worker (worker/approvals.go: only seq <= asked_after_seq is refused)
// takes it as the answer to round 3, which that approver never saw:
// a third attempt of a write whose two outcomes are unknown. approve must
// not send a decision for a question other than the one it printed (found
// by review): it reads the entry again after the confirmation.
func TestApproveDoesNotSendToARoundItDidNotShow(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	kv, err := env.JS.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	const runID, callID = "stale-round-1", "s2c1"
	entry := approvals.Entry{
		State: approvals.StatePending, Kind: approvals.KindNeedsHuman, Round: 2, Tenant: "cityops",
		RunID: runID, CallID: callID, Step: 2, Tool: "draft_escalation", Args: json.RawMessage(`{"request_id":"SR-1"}`),
		ArgsHash: "sha256:abc", OperationID: "op-1", Principal: "dev@cityops",
		Why:         "the outcome of attempt 1 is unknown (timeout): decide mark_done, retry or abandon",
		RequestedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC(),
	}
	put := func(e approvals.Entry) {
		b, _ := json.Marshal(e)
		if _, err := kv.Put(ctx, approvals.Key(runID, callID), b); err != nil {
			t.Fatal(err)
		}
	}
	put(entry)

	stdin, answer := io.Pipe()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"approve", runID, callID, "--as", "supervisor@cityops", "--decision", "retry",
			"--nats", env.Server.ClientURL(), "--wait", "500ms"}, stdin, &out, &errOut)
	}()
	for !strings.Contains(out.String(), "send retry? [y/N]") {
		time.Sleep(10 * time.Millisecond)
	}
	// While the prompt is open: round 2 is decided by someone else, and
	// round 3 is asked (attempt 2's outcome unknown).
	entry.Round, entry.Why = 3, "the outcome of attempt 2 is unknown (timeout): decide mark_done, retry or abandon"
	entry.RequestedAt = time.Now().UTC()
	put(entry)
	_, _ = answer.Write([]byte("y\n"))
	code := <-done

	st, err := env.JS.Stream(ctx, journal.StreamApprovals)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 || !bytes.Contains([]byte(out.String()), []byte("round 2")) {
		t.Errorf("approve showed round 2, yet sent %d decision(s) after round 3 was asked (exit %d)\nstdout:\n%s\nstderr:\n%s",
			info.State.Msgs, code, out.String(), errOut.String())
	}
}

// approve of a question withdrawn because its run ended unanswered says
// so and sends nothing.
func TestApproveOfAWithdrawnQuestionSendsNothing(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	kv, err := env.JS.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	const runID, callID = "withdrawn-1", "s1c1"
	b, _ := json.Marshal(approvals.Entry{
		State: approvals.StateWithdrawn, Kind: approvals.KindApproval, Round: 1, Tenant: "cityops",
		RunID: runID, CallID: callID, Step: 1, Tool: "draft_escalation", Args: json.RawMessage(`{"request_id":"SR-1"}`),
		ArgsHash: "sha256:abc", OperationID: "op-1", Principal: "dev@cityops",
		RequestedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC(), DecidedAt: time.Now().UTC(),
	})
	if _, err := kv.Put(ctx, approvals.Key(runID, callID), b); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "", "approve", runID, callID, "--as", "supervisor@cityops", "--key", exampleKeys+"supervisor@cityops.nk", "--yes", "--nats", env.Server.ClientURL())
	if code != exitError || !strings.Contains(errOut, "is not pending: withdrawn at ") || !strings.Contains(errOut, "its run ended unanswered; nothing sent") {
		t.Errorf("approve of a withdrawn question: exit %d: %s", code, errOut)
	}
	st, err := env.JS.Stream(ctx, journal.StreamApprovals)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("approve sent %d decision(s) to a withdrawn question", info.State.Msgs)
	}
}
