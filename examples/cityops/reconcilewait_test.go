package cityops

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/loopgate/loopgate/tools"
)

// draft_status is the reconcile check loopgate runs right after a
// draft_escalation call timed out. In cmd/cityops-tools both tools run in
// one process, and the timed-out draft may still be inside writeOnce (toolsvc
// sends no reply after the deadline but lets the handler finish): the
// draft's lock is held for exactly that span. draft_status used not to
// take it, and answered "applied: false" for a draft that landed a moment
// later; loopgate then recorded "did not take effect" (and, with its
// attempts used up, told a human so) while the draft was in the outbox.
func TestDraftStatusWaitsForADraftOfTheSameOperationBeingWritten(t *testing.T) {
	t.Parallel()
	d, err := loadData()
	if err != nil {
		t.Fatal(err)
	}
	ts := &toolset{opts: Options{Outbox: t.TempDir() + "/outbox"}.withDefaults(), data: d}
	name := draftName(opA)
	content := renderDraft(d.byID["SR-10421"], "Open 9 days, past the 5-day threshold.", opA)

	// A draft_escalation of opA in progress: it holds the lock while it
	// writes, as draftEscalation does.
	lock := ts.draftLock(name)
	lock.Lock()
	answer := make(chan string, 1)
	go func() {
		v, err := ts.draftStatus(t.Context(), tools.Call{Tool: ToolDraftStatus, Args: json.RawMessage(`{"operation_id":"` + opA + `"}`)})
		if err != nil {
			answer <- "error: " + err.Error()
			return
		}
		b, _ := json.Marshal(v)
		answer <- string(b)
	}()
	time.Sleep(200 * time.Millisecond) // the write's fsync takes its time
	if _, err := writeOnce(ts.opts.Outbox, name, content); err != nil {
		t.Fatal(err)
	}
	lock.Unlock()

	select {
	case got := <-answer:
		want := `{"applied":true,"result":{"draft_path":"` + name + `","request_id":"SR-10421","status":"pending_approval"}}`
		if got != want {
			t.Errorf("draft_status during the write of the same operation's draft answered %s; the draft exists now: want %s", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("draft_status did not answer")
	}
}
