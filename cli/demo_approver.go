package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
)

// demoApprover plays the human in loopgate demo. When the run parks on a
// question it answers by publishing an approval message on the call's
// approvals subject, bound to the question's args hash — exactly what a
// person running loopgate approve does — and the workers decide it like
// any other message: the demo calls no worker code.
//
// It signs each message with the approver's example key, embedded in the
// binary (examples/cityops/keys; the example policy requires signatures),
// through the same code as loopgate approve --key.
//
// Without a prompter it approves every approval and abandons every
// unknown outcome (it does not guess whether a write happened); with one
// it shows the exact action and asks.
type demoApprover struct {
	id     string
	key    nkeys.KeyPair // nil: the example has no key for id, and messages go unsigned
	js     jetstream.JetStream
	w      io.Writer
	prompt *prompter // nil: answer without asking

	asked    map[string]question // call id → latest question
	answered map[string]int      // call id → round answered
	sent     map[uint64]string   // approvals stream seq → call id
}

func newDemoApprover(id string, key nkeys.KeyPair, js jetstream.JetStream, w io.Writer, prompt *prompter) *demoApprover {
	return &demoApprover{id: id, key: key, js: js, w: w, prompt: prompt,
		asked: map[string]question{}, answered: map[string]int{}, sent: map[uint64]string{}}
}

// demoKey is approver id's example key pair, from the seeds the binary
// embeds (examples/cityops/keys), read as loopgate approve --key reads a
// key file. It is nil, with no error, when the example has no key for id.
func demoKey(id string) (nkeys.KeyPair, error) {
	seed, err := cityops.ApproverSeed(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer wipe(seed)
	kp, err := approvals.ParseSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("example key of %s: %w", id, err)
	}
	return kp, nil
}

// observe follows one event of the run. It answers questions once the run
// has parked on them (so the trail reads asked → parked → decided), and
// reports done with an exit code when one of its own messages was
// rejected: nobody else answers in the demo, so the run would wait until
// its question expired.
func (a *demoApprover) observe(ctx context.Context, ev events.Event) (code int, done bool, err error) {
	switch ev.Type {
	case events.TypeApprovalRequested:
		var d events.ApprovalRequestedData
		if err := ev.Decode(&d); err != nil {
			return 0, false, err
		}
		a.asked[ev.CallID] = questionFromEvent(ev, d)
	case events.TypeParked:
		var d events.ParkedData
		if err := ev.Decode(&d); err != nil {
			return 0, false, err
		}
		for _, id := range d.Awaiting {
			q, ok := a.asked[id]
			if !ok || a.answered[id] >= q.Round {
				continue
			}
			if err := a.answer(ctx, q); err != nil {
				return 0, false, err
			}
			a.answered[id] = q.Round
		}
	case events.TypeApprovalRejected:
		var d events.ApprovalRejectedData
		if err := ev.Decode(&d); err != nil {
			return 0, false, err
		}
		if _, ours := a.sent[d.ApprovalSeq]; !ours {
			return 0, false, nil
		}
		fmt.Fprintf(a.w, "  ✗ %s's decision on %s (%s) was rejected (%s): %s\n", printable(a.id), ev.CallID, d.Decision, d.Class, printable(d.Detail))
		until := ""
		if q, ok := a.asked[ev.CallID]; ok {
			until = " until it expires at " + q.ExpiresAt.UTC().Format("15:04:05 UTC")
		}
		return exitApprovalRejected, true, fmt.Errorf("the demo's only approver, %s, was refused (%s), so run %s would wait for a decision%s; "+
			"stopping here. Try --approver supervisor@cityops, who may approve %s", a.id, d.Class, ev.RunID, until, ev.Tool)
	}
	return 0, false, nil
}

// answer decides q and publishes the decision.
func (a *demoApprover) answer(ctx context.Context, q question) error {
	d, reason := approvals.Approve, ""
	if q.Kind == approvals.KindNeedsHuman {
		d, reason = approvals.Abandon, "the demo supervisor does not guess whether an unknown write took effect"
	}
	if a.prompt != nil {
		fmt.Fprintf(a.w, "  ? %s's run asks %s to decide on this exact action:\n", printable(q.Principal), printable(a.id))
		q.print(a.w, "      ", time.Now())
		if q.Kind == approvals.KindNeedsHuman {
			answer, _, err := a.prompt.ask(ctx, "    mark_done, retry or abandon? [m/r/A] ")
			if err != nil {
				return err
			}
			switch answer {
			case "m", "mark_done":
				d, reason = approvals.MarkDone, "marked done at the demo prompt"
			case "r", "retry":
				d, reason = approvals.Retry, "retried at the demo prompt"
			default:
				d, reason = approvals.Abandon, "abandoned at the demo prompt"
			}
		} else {
			answer, _, err := a.prompt.ask(ctx, "    approve? [y/N] ")
			if err != nil {
				return err
			}
			if !isYes(answer) {
				d, reason = approvals.Deny, "denied at the demo prompt"
			}
		}
	}
	msg := approvals.Message{
		RunID: q.RunID, CallID: q.CallID, ArgsHash: q.ArgsHash, Decision: d,
		Approver: approvals.Approver{ID: a.id}, Reason: reason,
	}
	// Signed after the prompt, so signed_at is when it was sent.
	_, seq, _, err := sendDecision(ctx, a.js, q.Tenant, msg, a.key, "")
	if err != nil {
		return fmt.Errorf("the demo's decision on %s: %w", q.CallID, err)
	}
	a.sent[seq] = q.CallID
	line := fmt.Sprintf("  → demo supervisor %s %s %s (%s %s %s)", printable(a.id), decisionVerb(d), q.CallID,
		printable(q.Tool), printable(string(compact(q.Args, 80))), hashPrefix(q.ArgsHash))
	if reason != "" {
		line += ": " + reason
	}
	fmt.Fprintln(a.w, line)
	return nil
}

// decisionVerb is the third person of a decision, for the demo's lines.
func decisionVerb(d approvals.Decision) string {
	switch d {
	case approvals.Approve:
		return "approves"
	case approvals.Deny:
		return "denies"
	case approvals.MarkDone:
		return "marks done"
	case approvals.Retry:
		return "retries"
	case approvals.Abandon:
		return "abandons"
	}
	return string(d)
}
