package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// question is what a human is asked about one gated call, whether read
// from its pending entry (pending, approve, deny) or from its
// approval_requested event (the demo): the exact action, never a summary.
type question struct {
	Tenant      string
	RunID       string
	CallID      string
	Step        int
	Kind        approvals.Kind
	Round       int
	Tool        string
	Args        json.RawMessage // canonical JSON, as hashed
	ArgsHash    string
	OperationID string
	Principal   string
	Why         string
	RequestedAt time.Time
	ExpiresAt   time.Time
	// Sealed says, when the call's arguments were sealed, whether Args are
	// the real ones (opened with the seal key) or the redacted copy.
	Sealed string
}

func questionFromEntry(e approvals.Entry) question {
	return question{
		Tenant: e.Tenant, RunID: e.RunID, CallID: e.CallID, Step: e.Step,
		Kind: e.Kind, Round: e.Round, Tool: e.Tool, Args: e.Args, ArgsHash: e.ArgsHash,
		OperationID: e.OperationID, Principal: e.Principal, Why: e.Why,
		RequestedAt: e.RequestedAt, ExpiresAt: e.ExpiresAt,
	}
}

func questionFromEvent(ev events.Event, d events.ApprovalRequestedData) question {
	return question{
		Tenant: ev.Tenant, RunID: ev.RunID, CallID: ev.CallID, Step: ev.Step,
		Kind: approvals.Kind(d.Kind), Round: d.Round, Tool: d.Tool, Args: d.Args, ArgsHash: d.ArgsHash,
		OperationID: d.OperationID, Principal: d.Principal, Why: d.Why,
		RequestedAt: ev.Time, ExpiresAt: d.ExpiresAt,
	}
}

// print shows the exact action, one fact a line, each line led by indent.
// The arguments are printed whole: an approver decides on these bytes.
func (q question) print(w io.Writer, indent string, now time.Time) {
	line := func(k, v string) { fmt.Fprintf(w, "%s%-10s %s\n", indent, k, v) }
	line("run", fmt.Sprintf("%s (tenant %s)", q.RunID, q.Tenant))
	line("call", fmt.Sprintf("%s (step %d), %s, round %d", q.CallID, q.Step, q.Kind, q.Round))
	line("tool", printable(q.Tool))
	line("args", printable(string(q.Args)))
	if q.Sealed != "" {
		line("sealed", q.Sealed)
	}
	line("args_hash", q.ArgsHash)
	line("operation", q.OperationID)
	line("principal", printable(q.Principal))
	if q.Why != "" {
		line("why", printable(q.Why))
	}
	line("expires", expiresIn(q.ExpiresAt, now))
}

// decisions lists what answers the question, for usage hints.
func (q question) decisions() string {
	if q.Kind == approvals.KindNeedsHuman {
		return "mark_done|retry|abandon"
	}
	return "approve|deny"
}

// expiresIn says when t comes, relative to now, with the clock time.
func expiresIn(t, now time.Time) string {
	at := t.UTC().Format("2006-01-02 15:04:05 UTC")
	d := t.Sub(now).Round(time.Second)
	if d <= 0 {
		return fmt.Sprintf("expired %s ago (%s); loopgate decides it expired when the run wakes", -d, at)
	}
	return fmt.Sprintf("in %s (%s)", d, at)
}

// openApprovals opens the approval state bucket of a running loopgate and
// its index of pending questions (LOOPGATE_PENDING).
func openApprovals(ctx context.Context, js jetstream.JetStream) (*approvals.Store, error) {
	// The hints are for a bucket or stream that is not there; any other
	// error (a cluster electing a leader answers nothing) is JetStream's.
	kv, err := js.KeyValue(ctx, journal.BucketApprovals)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open bucket %s (does this loopgate have the write path?): %w", journal.BucketApprovals, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", journal.BucketApprovals, err)
	}
	pending, err := approvals.OpenIndex(ctx, js, journal.StreamPending)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("open stream %s (were the workers upgraded? they create it): %w", journal.StreamPending, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", journal.StreamPending, err)
	}
	return approvals.NewStore(kv, pending), nil
}

// hashPrefix shortens an args hash for one line of a timeline.
func hashPrefix(h string) string {
	if len(h) > len("sha256:")+12 {
		return h[:len("sha256:")+12] + "…"
	}
	return h
}

// printable makes text from the stream safe to print on a terminal:
// control and bidi formatting characters, which could rewrite what an
// approver sees, are shown escaped. Display only.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafeRune(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f
}
