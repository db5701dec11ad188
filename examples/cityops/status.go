package cityops

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/loopgate/loopgate/tools"
)

// ToolDraftStatus is draft_escalation's reconcile tool.
const ToolDraftStatus = "draft_status"

// statusArgs are draft_status's arguments: loopgate passes the operation
// id whose outcome it does not know, and fence (draft_escalation's
// manifest says reconcile_fences) to have an absent draft fenced.
type statusArgs struct {
	OperationID string `json:"operation_id"`
	Fence       bool   `json:"fence,omitempty"`
}

// statusAnswer is the reconcile contract: did the operation take effect,
// and if so what would the tool have returned; fenced says the operation
// can no longer take effect.
type statusAnswer struct {
	Applied bool         `json:"applied"`
	Fenced  bool         `json:"fenced,omitempty"`
	Result  *draftResult `json:"result,omitempty"`
}

// draftStatus is the draft_status tool: loopgate calls it when a
// draft_escalation call's outcome is unknown (it timed out, or a worker died
// mid-call) to learn whether the draft exists, instead of guessing or
// writing it twice.
//
// Asked to fence, it fences an operation whose draft does not exist: it
// links a tombstone under the draft's own file name, so the link of a late
// draft_escalation of the operation (this process's or another's) finds it
// and fails (errOperationFenced), and every later answer about the
// operation stays "not applied". The tombstone and the draft are linked to
// one name, so exactly one of them is, whatever the order: a draft linked
// first makes the answer "applied". Otherwise it only reads.
func (ts *toolset) draftStatus(ctx context.Context, call tools.Call) (any, error) {
	var a statusArgs
	if err := decodeStrict(call.Args, &a); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", call.Tool, errInvalidArgs, err)
	}
	if !operationIDPattern.MatchString(a.OperationID) {
		return nil, fmt.Errorf("%s: %w: operation id %q", call.Tool, errInvalidArgs, a.OperationID)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := draftName(a.OperationID)
	// A draft of the operation being written (its call past its deadline,
	// still in writeOnce) is waited for: read now, it would be "not
	// applied" and land a moment later. The write takes as long as its
	// fsync; one not begun yet will not begin (draftEscalation checks its
	// deadline under the lock).
	lock := ts.draftLock(name)
	lock.Lock()
	body, err := os.ReadFile(filepath.Join(ts.opts.Outbox, name))
	if errors.Is(err, fs.ErrNotExist) && a.Fence {
		tomb := renderTombstone(a.OperationID)
		var have []byte
		if have, err = writeOnce(ts.opts.Outbox, name, tomb); err == nil {
			// nil: the tombstone is in place; else what another process
			// linked first since the read (a draft, or its own fence).
			body = tomb
			if have != nil {
				body = have
			}
		}
	}
	lock.Unlock()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return statusAnswer{Applied: false}, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", call.Tool, err)
	case isTombstone(body):
		return statusAnswer{Applied: false, Fenced: true}, nil
	}
	// The first line names the complaint: "ESCALATION DRAFT — SR-10421".
	first, _, _ := bytes.Cut(body, []byte("\n"))
	sc := bufio.NewScanner(bytes.NewReader(first))
	sc.Split(bufio.ScanWords)
	var requestID string
	for sc.Scan() {
		if w := sc.Text(); strings.HasPrefix(w, "SR-") {
			requestID = w
		}
	}
	return statusAnswer{Applied: true, Result: &draftResult{DraftPath: name, RequestID: requestID, Status: "pending_approval"}}, nil
}

// ResolverComplaintOwner resolves a request id to the tenant that owns it,
// for loopgate's resource check: {"id": "SR-10421"} → {"found": true,
// "tenant": "cityops"}.
const ResolverComplaintOwner = "complaint_owner"

func (ts *toolset) complaintOwner(ctx context.Context, call tools.Call) (any, error) {
	var a struct {
		ID string `json:"id"`
	}
	if err := decodeStrict(call.Args, &a); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", call.Tool, errInvalidArgs, err)
	}
	c, ok := ts.data.byID[a.ID]
	if !ok {
		return map[string]any{"found": false}, nil
	}
	return map[string]any{"found": true, "tenant": c.Tenant}, nil
}
