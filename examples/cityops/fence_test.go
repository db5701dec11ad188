package cityops

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const fenceArgs = `{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}`

// statusOf asks draft_status about op, fencing when fence is set.
func (bu bundle) statusOf(t *testing.T, op string, fence bool) string {
	t.Helper()
	args := `{"operation_id":"` + op + `"}`
	if fence {
		args = `{"operation_id":"` + op + `","fence":true}`
	}
	v, err := bu.call(t.Context(), t, ToolDraftStatus, "", args)
	if err != nil {
		t.Fatalf("draft_status %s: %v", args, err)
	}
	return asJSON(t, v)
}

// Asked to fence an operation whose draft does not exist, draft_status
// leaves a tombstone under the draft's name: a late draft_escalation of
// the operation fails as fenced and writes nothing, and every later
// answer stays "not applied". Other operations are untouched.
func TestDraftStatusFencesAnAbsentDraft(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	const fenced = `{"applied":false,"fenced":true}`
	if got := bu.statusOf(t, opA, true); got != fenced {
		t.Fatalf("fence of an absent draft: %s, want %s", got, fenced)
	}
	_, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, fenceArgs)
	if !errors.Is(err, errOperationFenced) || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("late draft_escalation of the fenced operation: err = %v, want errOperationFenced", err)
	}
	body, err := os.ReadFile(filepath.Join(bu.outbox, draftName(opA)))
	if err != nil || !isTombstone(body) || strings.Contains(string(body), "ESCALATION DRAFT") {
		t.Fatalf("the fenced operation's file holds %q (%v), want its tombstone", body, err)
	}
	for _, fence := range []bool{false, true} {
		if got := bu.statusOf(t, opA, fence); got != fenced {
			t.Errorf("draft_status (fence %v) after the late attempt: %s, want %s", fence, got, fenced)
		}
	}
	if _, err := bu.call(t.Context(), t, ToolDraftEscalation, opB, fenceArgs); err != nil {
		t.Fatalf("a draft of another operation: %v", err)
	}
	if got := bu.statusOf(t, opB, true); !strings.HasPrefix(got, `{"applied":true,`) {
		t.Errorf("fence of an existing draft: %s, want applied", got)
	}
	if body, _ := os.ReadFile(filepath.Join(bu.outbox, draftName(opB))); !strings.HasPrefix(string(body), "ESCALATION DRAFT") {
		t.Errorf("a fence replaced an existing draft: %q", body)
	}
}

// A fence and a draft of one operation, from two processes sharing an
// outbox (their draft locks are their own), race; whichever is linked
// first is the outcome, and both are told so: the draft's caller that
// succeeded finds draft_status saying applied; the fence that succeeded
// finds the draft refused, and no draft.
func TestAFenceAndADraftOfOneOperationLeaveOneOutcome(t *testing.T) {
	t.Parallel()
	outbox := t.TempDir() + "/outbox"
	drafter, checker := setup(t, Options{Outbox: outbox}), setup(t, Options{Outbox: outbox})
	const rounds = 40
	var drafted, fenced int
	for round := range rounds {
		op := fmt.Sprintf("%s-%d", opA, round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var draftErr error
		var answer string
		wg.Go(func() {
			<-start
			_, draftErr = drafter.call(t.Context(), t, ToolDraftEscalation, op, fenceArgs)
		})
		wg.Go(func() {
			<-start
			v, err := checker.call(t.Context(), t, ToolDraftStatus, "", `{"operation_id":"`+op+`","fence":true}`)
			if err != nil {
				answer = "error: " + err.Error()
				return
			}
			answer = asJSON(t, v)
		})
		close(start)
		wg.Wait()
		body, err := os.ReadFile(filepath.Join(outbox, draftName(op)))
		if err != nil {
			t.Fatalf("round %d: neither a draft nor a tombstone: %v", round, err)
		}
		switch {
		case draftErr == nil && strings.HasPrefix(answer, `{"applied":true,`) && strings.HasPrefix(string(body), "ESCALATION DRAFT"):
			drafted++
		case errors.Is(draftErr, errOperationFenced) && answer == `{"applied":false,"fenced":true}` && isTombstone(body):
			fenced++
		default:
			t.Fatalf("round %d: draft_escalation: %v; draft_status: %s; file: %q", round, draftErr, answer, body)
		}
	}
	t.Logf("%d rounds: the draft first %d times, the fence first %d times", rounds, drafted, fenced)
	if entries, _ := os.ReadDir(outbox); len(entries) != rounds {
		t.Errorf("outbox holds %d entries, want %d (a draft or a tombstone each) and no temp files", len(entries), rounds)
	}
}
