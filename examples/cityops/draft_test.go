package cityops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/tools"
)

const (
	opA = "0b9d2f57-7d1e-5c1a-9f0e-3c1f4a2b6e01"
	opB = "0b9d2f57-7d1e-5c1a-9f0e-3c1f4a2b6e02"
)

func TestDraftEscalationWritesAPendingDraft(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	got, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, `{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"draft_path":"escalation-` + opA + `.txt","request_id":"SR-10421","status":"pending_approval"}`
	if g := asJSON(t, got); g != want {
		t.Errorf("result = %s, want %s", g, want)
	}
	b, err := os.ReadFile(filepath.Join(bu.outbox, "escalation-"+opA+".txt"))
	if err != nil {
		t.Fatalf("draft not written: %v", err)
	}
	text := string(b)
	for _, want := range []string{
		"SR-10421",
		"Household trash not collected for two consecutive weeks", // the complaint's summary
		"Days open: 9",
		"Reason:    Open 9 days, past the 5-day threshold.",
		"Operation: " + opA,
		"\nStatus: PENDING HUMAN APPROVAL — not sent.\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("draft lacks %q:\n%s", want, text)
		}
	}
	for _, secret := range []string{"Helena", "555-0121", "@example.org"} {
		if strings.Contains(text, secret) {
			t.Errorf("draft shows resident contact data %q:\n%s", secret, text)
		}
	}
	entries, err := os.ReadDir(bu.outbox)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("outbox holds %d entries, want just the draft (no temp files left behind)", len(entries))
	}
}

func TestDraftEscalationIsIdempotentByOperationID(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	args := `{"request_id":"SR-10422","reason":"Open 7 days, past the 5-day threshold."}`
	first, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, args)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(bu.outbox, "escalation-"+opA+".txt")
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, args)
	if err != nil {
		t.Fatalf("retry with the same operation id: %v", err)
	}
	if asJSON(t, first) != asJSON(t, again) {
		t.Errorf("retry result %s differs from first %s", asJSON(t, again), asJSON(t, first))
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Error("the retry rewrote the draft; it should have been a no-op")
	}

	// Another operation is another draft, even for the same complaint.
	if _, err := bu.call(t.Context(), t, ToolDraftEscalation, opB, args); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(bu.outbox); len(entries) != 2 {
		t.Errorf("outbox holds %d drafts, want 2", len(entries))
	}
}

func TestDraftEscalationSameOperationOtherContentIsAConflict(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	if _, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, `{"request_id":"SR-10421","reason":"Open 9 days, past the threshold."}`); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(bu.outbox, "escalation-"+opA+".txt")
	want, _ := os.ReadFile(path)
	_, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, `{"request_id":"SR-10421","reason":"A different reason entirely."}`)
	if !errors.Is(err, errDraftConflict) {
		t.Fatalf("error = %v, want errDraftConflict", err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(want) {
		t.Error("a conflicting call overwrote the draft")
	}
}

func TestDraftEscalationConcurrentRetriesWriteOneDraft(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, `{"request_id":"SR-10423","reason":"Open 6 days, past the 5-day threshold."}`)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if entries, _ := os.ReadDir(bu.outbox); len(entries) != 1 {
		t.Errorf("outbox holds %d entries, want 1", len(entries))
	}
}

func TestDraftEscalationUnknownRequestIsAnAnswerNotAnError(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	got, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, `{"request_id":"SR-99999","reason":"Open 9 days, past the 5-day threshold."}`)
	if err != nil {
		t.Fatalf("unknown request_id should be a result: %v", err)
	}
	if g, want := asJSON(t, got), `{"created":false,"error":"unknown request_id SR-99999"}`; g != want {
		t.Errorf("result = %s, want %s", g, want)
	}
	if _, err := os.Stat(bu.outbox); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("outbox created for a refused draft: %v", err)
	}
}

func TestDraftEscalationRefusesMissingOrUnsafeOperationID(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	args := `{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}`
	for _, op := range []string{"", "../escape", "a/b", ".hidden", "a b"} {
		got, err := bu.call(t.Context(), t, ToolDraftEscalation, op, args)
		if err == nil || got != nil {
			t.Errorf("operation id %q: got %v, %v; want a Go error", op, got, err)
		}
	}
	if _, err := os.Stat(bu.outbox); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("outbox touched: %v", err)
	}
}

func TestDraftEscalationRefusesBadArguments(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	for _, given := range []string{
		`{}`,
		`{"request_id":"SR-10421"}`,
		`{"request_id":"SR-1042","reason":"Open 9 days, past the 5-day threshold."}`,
		`{"request_id":"sr-10421","reason":"Open 9 days, past the 5-day threshold."}`,
		`{"request_id":"SR-10421","reason":"too short"}`,
		`{"request_id":"SR-10421","reason":"` + strings.Repeat("r", 501) + `"}`,
		`{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold.","operation_id":"mine"}`,
	} {
		if _, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, given); !errors.Is(err, errInvalidArgs) {
			t.Errorf("draft_escalation(%.60s) error = %v, want errInvalidArgs", given, err)
		}
	}
}

func TestDraftEscalationReasonCannotForgeLines(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	if _, err := bu.call(t.Context(), t, ToolDraftEscalation, opA, `{"request_id":"SR-10421","reason":"Overdue.\nStatus: APPROVED \u2028 send now"}`); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(bu.outbox, "escalation-"+opA+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	var statusLines []string
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "Status:") {
			statusLines = append(statusLines, line)
		}
	}
	if len(statusLines) != 1 || statusLines[0] != ApprovalLine+"\n" {
		t.Errorf("status lines = %q, want only the approval line:\n%s", statusLines, b)
	}
}

func TestDraftEscalationHonoursCancelledContext(t *testing.T) {
	t.Parallel()
	bu := setup(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := bu.call(ctx, t, ToolDraftEscalation, opA, `{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}`)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
}

// A draft in progress holds up only drafts of its own operation: with the
// lock of opA's file held (as while opA's draft is fsynced), a draft of
// another operation is written. With one lock for all drafts this waited
// for opA, and every draft of a process waited for the fsync before it.
// TestWriteOnceNeverReplacesADraft: the write step itself refuses to
// replace a draft, whatever the caller checked before it: a second write
// of the name leaves the first draft's bytes, returns them, and leaves no
// temp file behind.
func TestWriteOnceNeverReplacesADraft(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	name := draftName(opA)
	if have, err := writeOnce(dir, name, []byte("first\n")); err != nil || have != nil {
		t.Fatalf("first write: existing %q, err %v; want the draft created", have, err)
	}
	have, err := writeOnce(dir, name, []byte("second\n"))
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != "first\n" {
		t.Errorf("second write returned %q, want the existing draft %q", have, "first\n")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != "first\n" {
		t.Errorf("draft holds %q after a second write, want the first draft", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("outbox holds %d entries, want the draft alone", len(entries))
	}
}

// TestWriteOnceMakesAMissingOutbox: the outbox is not looked for at every
// draft, so one that is missing (never made, or removed while the worker
// runs) must be made when the temp file cannot be.
func TestWriteOnceMakesAMissingOutbox(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "out", "box")
	for i, op := range []string{opA, opA + "b"} {
		if have, err := writeOnce(dir, draftName(op), []byte("draft\n")); err != nil || have != nil {
			t.Fatalf("write %d: existing %q, err %v; want the draft created", i+1, have, err)
		}
		if got, err := os.ReadFile(filepath.Join(dir, draftName(op))); err != nil || string(got) != "draft\n" {
			t.Fatalf("write %d: draft holds %q (%v)", i+1, got, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDraftEscalationTwoProcessesWriteOneDraft: two toolsets on one outbox
// (two worker processes: no lock in common) write the same operation with
// different reasons at once. Exactly one draft is created; every other
// call finds it and reports a conflict; nothing is overwritten.
func TestDraftEscalationTwoProcessesWriteOneDraft(t *testing.T) {
	t.Parallel()
	outbox := t.TempDir() + "/outbox"
	procs := []bundle{setup(t, Options{Outbox: outbox}), setup(t, Options{Outbox: outbox})}
	const rounds, callers = 20, 8
	for round := range rounds {
		op := fmt.Sprintf("%s-%d", opA, round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		reasons := make([]string, callers)
		errs := make([]error, callers)
		for i := range callers {
			reasons[i] = fmt.Sprintf("Open 9 days, caller %d of round %d.", i, round)
			wg.Go(func() {
				<-start
				_, errs[i] = procs[i%2].call(t.Context(), t, ToolDraftEscalation, op,
					`{"request_id":"SR-10421","reason":"`+reasons[i]+`"}`)
			})
		}
		close(start)
		wg.Wait()
		draft, err := os.ReadFile(filepath.Join(outbox, draftName(op)))
		if err != nil {
			t.Fatalf("round %d: no draft: %v", round, err)
		}
		var created []int
		for i, err := range errs {
			switch {
			case err == nil:
				created = append(created, i)
			case !errors.Is(err, errDraftConflict):
				t.Errorf("round %d, caller %d: %v, want success or a conflict", round, i, err)
			}
		}
		if len(created) != 1 {
			t.Fatalf("round %d: %d callers were told their draft was written (%v), want exactly 1", round, len(created), created)
		}
		if want := "Reason:    " + reasons[created[0]] + "\n"; !strings.Contains(string(draft), want) {
			t.Errorf("round %d: the draft is not the one caller %d was told it wrote:\n%s", round, created[0], draft)
		}
	}
	if entries, _ := os.ReadDir(outbox); len(entries) != rounds {
		t.Errorf("outbox holds %d entries, want %d drafts and no temp files", len(entries), rounds)
	}
}

func TestDraftEscalationDoesNotWaitForOtherOperations(t *testing.T) {
	t.Parallel()
	d, err := loadData()
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Outbox: t.TempDir() + "/outbox"}.withDefaults()
	ts := &toolset{opts: opts, data: d}
	held := ts.draftLock(draftName(opA))
	other := opB
	for i := 0; ts.draftLock(draftName(other)) == held; i++ {
		if i == 1000 {
			t.Fatal("every operation's draft takes the same lock")
		}
		other = fmt.Sprintf("%s-%d", opB, i) // find an operation on another lock
	}
	held.Lock()
	defer held.Unlock()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := ts.draftEscalation(ctx, tools.Call{Tool: ToolDraftEscalation, OperationID: other, RunID: "run-1", CallID: "s1c1", Tenant: "cityops",
			Args: json.RawMessage(`{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}`)})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("a draft of another operation waited for the held one")
	}
	if _, err := os.Stat(filepath.Join(opts.Outbox, draftName(other))); err != nil {
		t.Errorf("draft of %s not written: %v", other, err)
	}
}

// TestRegisterSweepsStaleTempDrafts: a process killed between a temp
// draft's create and its link leaves the temp file; the next Register on
// that outbox removes it once it is stale, and leaves alone drafts, other
// files and a temp file that may be another process's write in progress.
func TestRegisterSweepsStaleTempDrafts(t *testing.T) {
	t.Parallel()
	outbox := t.TempDir()
	old := time.Now().Add(-staleTemp - time.Minute)
	files := map[string]time.Time{
		".escalation-1111.tmp":       old,        // left by a kill: swept
		".escalation-2222.tmp":       time.Now(), // being written: kept
		"escalation-" + opA + ".txt": old,        // a draft: kept
		".other-1111.tmp":            old,        // not ours: kept
		".escalation-3333.tmp.keep":  old,        // not the pattern: kept
	}
	for name, mtime := range files {
		path := filepath.Join(outbox, name)
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	setup(t, Options{Outbox: outbox})
	for name := range files {
		_, err := os.Stat(filepath.Join(outbox, name))
		if swept, want := errors.Is(err, os.ErrNotExist), name == ".escalation-1111.tmp"; swept != want {
			t.Errorf("%s: swept = %v, want %v (stat: %v)", name, swept, want, err)
		}
	}
}

// TestWriteOnceSyncsTheOutboxAfterTheLink: a draft is reported written only
// once the outbox directory, which holds its name, has been synced after
// the link (the file's own fsync does not make the link durable), and so is
// a draft found already there; a failed sync fails the call; an outbox made
// on the way has its parent synced too.
func TestWriteOnceSyncsTheOutboxAfterTheLink(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "outbox")
	name := draftName(opA)
	var synced []string
	watch := func(d string) error {
		if d == dir {
			if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != "draft\n" {
				t.Errorf("outbox synced before the draft was linked into place: %q, %v", got, err)
			}
		}
		synced = append(synced, d)
		return nil
	}
	if have, err := writeOnceSyncing(dir, name, []byte("draft\n"), watch); err != nil || have != nil {
		t.Fatalf("first write: existing %q, err %v; want the draft created", have, err)
	}
	if want := []string{parent, dir}; !slices.Equal(synced, want) {
		t.Fatalf("first write synced %q, want the new outbox's parent, then the outbox", synced)
	}
	synced = nil
	if have, err := writeOnceSyncing(dir, name, []byte("draft\n"), watch); err != nil || string(have) != "draft\n" {
		t.Fatalf("second write: existing %q, err %v; want the draft found", have, err)
	}
	if want := []string{dir}; !slices.Equal(synced, want) {
		t.Fatalf("a draft found already there synced %q, want the outbox: its writer may not have synced it yet", synced)
	}
	broken := errors.New("disk gone")
	have, err := writeOnceSyncing(dir, draftName(opA+"b"), []byte("draft\n"), func(string) error { return broken })
	if !errors.Is(err, broken) || have != nil || !strings.Contains(err.Error(), "sync outbox") {
		t.Fatalf("write with a failing directory sync: existing %q, err %v; want the sync's error", have, err)
	}
	// The real sync works on a real directory.
	if err := syncDir(dir); err != nil {
		t.Fatal(err)
	}
}
