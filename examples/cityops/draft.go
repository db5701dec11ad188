package cityops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/loopgate/loopgate/tools"
)

// draftArgs are draft_escalation's arguments. The operation id is not one
// of them: loopgate mints it and passes it in tools.Call.
type draftArgs struct {
	RequestID string `json:"request_id"`
	Reason    string `json:"reason"`
}

// Bounds of draftArgs.Reason, mirrored by schemas/draft_escalation.schema.json.
const (
	minReasonLen = 10
	maxReasonLen = 500
)

// ApprovalLine ends every draft: the outbox is a queue of proposals for
// people, and a draft says so in words nobody can miss.
const ApprovalLine = "Status: PENDING HUMAN APPROVAL — not sent."

// operationIDPattern keeps an operation id usable as part of a file name:
// no separators, no dots, nothing a path could be steered with.
var operationIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// errDraftConflict: the operation id already names a draft with other
// content. It is not a retry of the same action, and overwriting would
// silently replace what a supervisor may already be reading.
var errDraftConflict = errors.New("draft conflict")

// errOperationFenced: draft_status fenced the operation id (loopgate gave
// up on it and runs the draft under an operation id of its own), so an
// attempt of it still under way writes nothing.
var errOperationFenced = errors.New("operation fenced by draft_status: abandoned, nothing written")

// tombstoneHead begins the tombstone draft_status leaves in a fenced
// operation's draft file: no draft is ever written under that name.
const tombstoneHead = "ABANDONED OPERATION — "

// renderTombstone is the content of a fenced operation's draft file.
func renderTombstone(operationID string) []byte {
	return []byte(tombstoneHead + operationID + "\n\n" +
		"draft_status fenced this operation: loopgate gave up on it, and any draft\n" +
		"is written under another operation id. Nothing is written under this name.\n")
}

// isTombstone reports whether a draft file's content is a tombstone.
func isTombstone(content []byte) bool { return bytes.HasPrefix(content, []byte(tombstoneHead)) }

// draftResult is draft_escalation's answer when the draft exists.
type draftResult struct {
	DraftPath string `json:"draft_path"`
	RequestID string `json:"request_id"`
	Status    string `json:"status"`
}

// draftRefused is draft_escalation's answer for a request id the table does
// not have: data the model can correct, not a tool failure.
type draftRefused struct {
	Created bool   `json:"created"`
	Error   string `json:"error"`
}

// draftName is the outbox file of one operation.
func draftName(operationID string) string { return "escalation-" + operationID + ".txt" }

// draftEscalation is the draft_escalation tool. It writes one draft per
// operation id, atomically (temp file, then a hard link), and is idempotent: the
// same operation id with the same content finds the file already there and
// returns the same result. An operation draft_status fenced finds its
// tombstone there instead, and fails with errOperationFenced, writing
// nothing. It never sends anything.
func (ts *toolset) draftEscalation(ctx context.Context, call tools.Call) (any, error) {
	if call.OperationID == "" {
		return nil, fmt.Errorf("%s: no operation id: loopgate must mint one for every write", call.Tool)
	}
	if !operationIDPattern.MatchString(call.OperationID) {
		return nil, fmt.Errorf("%s: operation id %q is not usable in a file name", call.Tool, call.OperationID)
	}
	var a draftArgs
	if err := decodeStrict(call.Args, &a); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", call.Tool, errInvalidArgs, err)
	}
	if !requestIDPattern.MatchString(a.RequestID) {
		return nil, fmt.Errorf("%s: %w: request_id %q does not look like SR-00000", call.Tool, errInvalidArgs, a.RequestID)
	}
	if n := utf8.RuneCountInString(a.Reason); n < minReasonLen || n > maxReasonLen {
		return nil, fmt.Errorf("%s: %w: reason must be %d..%d characters, got %d", call.Tool, errInvalidArgs, minReasonLen, maxReasonLen, n)
	}
	c, ok := ts.data.byID[a.RequestID]
	if !ok {
		return draftRefused{Created: false, Error: "unknown request_id " + a.RequestID}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	name := draftName(call.OperationID)
	content := renderDraft(c, a.Reason, call.OperationID)
	result := draftResult{DraftPath: name, RequestID: c.RequestID, Status: "pending_approval"}

	// The lock only saves this process a wasted temp file when the same
	// operation is retried concurrently; writeOnce's link is what keeps a
	// draft from being written twice, by this process or any other.
	lock := ts.draftLock(name)
	lock.Lock()
	defer lock.Unlock()
	// Past its deadline loopgate stops waiting and asks draft_status,
	// which takes this lock too: a draft not begun by then is not
	// written, so the answer it got stays true.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: operation %s: %w", call.Tool, call.OperationID, err)
	}
	// No look for the draft first: writeOnce finds one that is there (a
	// retry), and a first write, by far the common case, saves a system call.
	have, err := writeOnce(ts.opts.Outbox, name, content)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: operation %s: %w", call.Tool, call.OperationID, err)
	case have != nil && isTombstone(have):
		// The link of a draft and draft_status's tombstone are one file
		// name: whichever is linked first is the operation's outcome.
		return nil, fmt.Errorf("%s: operation %s: %w", call.Tool, call.OperationID, errOperationFenced)
	case have != nil && !bytes.Equal(have, content):
		return nil, fmt.Errorf("%s: operation %s: %w: %s holds a different draft", call.Tool, call.OperationID, errDraftConflict, name)
	}
	return result, nil
}

// renderDraft is the text of one draft. It depends only on its inputs (no
// clock), so a retry renders the same bytes.
func renderDraft(c Complaint, reason, operationID string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "ESCALATION DRAFT — %s\n\n", c.RequestID)
	fmt.Fprintf(&b, "Request:   %s\n", c.RequestID)
	fmt.Fprintf(&b, "Category:  %s\n", c.Category)
	fmt.Fprintf(&b, "Address:   %s\n", c.Address)
	fmt.Fprintf(&b, "Summary:   %s\n", c.Summary)
	fmt.Fprintf(&b, "Days open: %d\n", c.DaysOpen)
	fmt.Fprintf(&b, "Reason:    %s\n", oneLine(reason))
	fmt.Fprintf(&b, "Operation: %s\n\n", operationID)
	b.WriteString(ApprovalLine + "\n")
	return []byte(b.String())
}

// oneLine flattens the model's text to a single line, so a reason cannot
// forge lines of its own (a second "Status:" line, say) in the draft.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Cf) {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

// writeOnce creates name in dir with content, unless it exists: then it
// writes nothing and returns what name holds. The draft is written to a
// synced temporary file and hard-linked into place, so a reader sees either
// no draft or the whole draft, and the check for an existing draft and the
// write are one step for the file system: of two processes writing the
// same operation's draft at once (a worker frozen inside the tool and the
// one that took its call over), exactly one creates it, and the other finds
// it. A rename would not do: it silently replaces what is there.
//
// The draft is reported only once its name is durable too: the link is a
// change to the outbox directory, which the file's own fsync does not
// cover, so a power cut after the call returned could leave the temp
// file's inode and no draft, while loopgate's executed event (fsynced at
// sync_interval always) said it was written. The directory is synced
// after the link, and after finding an existing draft (its writer may not
// have synced yet).
func writeOnce(dir, name string, content []byte) (existing []byte, err error) {
	return writeOnceSyncing(dir, name, content, syncDir)
}

// writeOnceSyncing is writeOnce with the directory sync given: the tests
// watch when it happens.
func writeOnceSyncing(dir, name string, content []byte, syncDir func(dir string) error) (existing []byte, err error) {
	f, err := os.CreateTemp(dir, tempPattern)
	if errors.Is(err, fs.ErrNotExist) {
		// The outbox is made when first needed (and again if removed),
		// not looked for at every draft.
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create outbox: %w", err)
		}
		// The outbox's own name, in its parent, is as new as the drafts.
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, fmt.Errorf("sync outbox's parent: %w", err)
		}
		f, err = os.CreateTemp(dir, tempPattern)
	}
	if err != nil {
		return nil, fmt.Errorf("create temp draft: %w", err)
	}
	// The temp name is only a way in: it goes whether the link was made or not.
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("write temp draft: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("sync temp draft: %w", err)
	}
	if err := f.Chmod(0o640); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("chmod temp draft: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("close temp draft: %w", err)
	}
	path := filepath.Join(dir, name)
	switch err := os.Link(f.Name(), path); {
	case err == nil:
	case errors.Is(err, fs.ErrExist):
		if existing, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("read existing draft: %w", err)
		}
	default:
		return nil, fmt.Errorf("link draft into place: %w", err)
	}
	// A failed sync fails the call: the draft may be there, and a retry
	// of the operation finds it and syncs again.
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("sync outbox: %w", err)
	}
	return existing, nil
}

// syncDir makes dir's entries durable: fsync of the directory itself.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// tempPattern names a draft being written; a process killed between the
// create and the link leaves one behind.
const tempPattern = ".escalation-*.tmp"

// staleTemp is the age past which a temp draft is a leftover: writing one
// takes milliseconds, and another process may be writing one now.
const staleTemp = 10 * time.Minute

// sweepTemps removes the temp drafts in dir last modified before cutoff:
// those a killed process left. It is best effort: a file it cannot remove
// only takes up room.
func sweepTemps(dir string, cutoff time.Time) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if ok, _ := filepath.Match(tempPattern, e.Name()); !ok || !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
