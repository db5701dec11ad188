package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

func runApprove(ctx context.Context, e env, args []string) int {
	return decide(ctx, e, "approve", args)
}

func runDeny(ctx context.Context, e env, args []string) int {
	return decide(ctx, e, "deny", args)
}

// nothingSent ends an error met before the decision was published.
const nothingSent = "nothing was sent: send the decision again once JetStream answers"

// decide is loopgate approve and loopgate deny: it reads the call's pending
// entry, shows the exact action, publishes the decision bound to the
// entry's args hash on the call's approvals subject — as any approver
// would — and follows the run until loopgate records what the message did.
func decide(ctx context.Context, e env, verb string, args []string) int {
	fs := flag.NewFlagSet("loopgate "+verb, flag.ContinueOnError)
	var (
		natsURL  = fs.String("nats", defaultNATS, "NATS URL of a running loopgate")
		tenant   = fs.String("tenant", "", "the run's tenant (default: the pending entry's)")
		as       = fs.String("as", "", "approver id, as named in the policy (required)")
		reason   = fs.String("reason", "", "why; the model sees a denial's reason")
		yes      = fs.Bool("yes", false, "send without asking for confirmation")
		wait     = fs.Duration("wait", 5*time.Second, "how long to wait for loopgate to record the decision, and then for the run to move on")
		keyFile  = fs.String("key", "", "sign the decision with the approver's nkey seed in this file (loopgate keys new); required when the policy requires signatures")
		sealKey  = fs.String("seal-key", "", "open sealed arguments with the key-encryption key in this file (default: LOOPGATE_SEAL_KEY), to see the real values before deciding")
		decision *string
	)
	if verb == "approve" {
		decision = fs.String("decision", "", "for a needs_human question (unknown outcome): mark_done, retry or abandon")
		fs.Usage = func() {
			fmt.Fprintln(e.stderr, "usage: loopgate approve RUN_ID CALL_ID --as ID [--key FILE] [--reason R] [--decision mark_done|retry|abandon] [--yes] [--wait D] [--nats URL] [--tenant T]")
			fs.PrintDefaults()
		}
	} else {
		fs.Usage = func() {
			fmt.Fprintln(e.stderr, "usage: loopgate deny RUN_ID CALL_ID --as ID --reason R [--key FILE] [--yes] [--wait D] [--nats URL] [--tenant T]")
			fs.PrintDefaults()
		}
	}
	pos, code, ok := parseInterspersed(fs, e, args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		fs.Usage()
		return exitError
	}
	runID, callID := pos[0], pos[1]
	switch {
	case !events.ValidToken(runID) || !events.ValidToken(callID):
		return fail(e, "%s: %q %q is not a run id and a call id", verb, runID, callID)
	case strings.TrimSpace(*as) == "":
		return fail(e, "%s: --as ID is required: the approver, as named in the policy", verb)
	case verb == "deny" && strings.TrimSpace(*reason) == "":
		return fail(e, "deny: --reason is required: the model is told why it was denied")
	case decision != nil && *decision != "" && !slices.Contains(humanDecisions, approvals.Decision(*decision)):
		// Only a needs_human question's answers: --decision deny would
		// send a denial without the reason deny requires.
		return fail(e, "approve: --decision %q: want mark_done, retry or abandon, the answers to a needs_human question (an approval is answered by approve without --decision, or by loopgate deny --reason R)", *decision)
	case *wait <= 0:
		return fail(e, "%s: --wait must be positive", verb)
	}

	// Read the key before anything is shown or asked: a bad key file
	// should not cost the approver a confirmation.
	var key nkeys.KeyPair
	if *keyFile != "" {
		k, err := readKey(e, *keyFile)
		if err != nil {
			return fail(e, "%s: %v", verb, err)
		}
		defer k.Wipe()
		key = k
	}

	kek, err := readSealKey(*sealKey)
	if err != nil {
		return fail(e, "%s: --seal-key: %v", verb, err)
	}
	nc, js, j, err := connect(ctx, *natsURL)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer nc.Close()
	store, err := openApprovals(ctx, js)
	if err != nil {
		return fail(e, "%s: %v\n%s", verb, cmp.Or(refusal(nc, err), err), nothingSent)
	}
	entry, _, err := store.Get(ctx, runID, callID)
	if errors.Is(err, approvals.ErrNotFound) {
		return fail(e, "%s: run %s call %s has no approval request; `loopgate pending` lists the calls waiting for a human", verb, runID, callID)
	}
	if err != nil {
		return fail(e, "%s: read the question: %v\n%s", verb, cmp.Or(refusal(nc, err), err), nothingSent)
	}
	if !entry.Pending() {
		when := ""
		if !entry.DecidedAt.IsZero() {
			when = " at " + entry.DecidedAt.UTC().Format(time.RFC3339)
		}
		by := ""
		if entry.DecidedBy != "" {
			by = " by " + printable(entry.DecidedBy)
		}
		if entry.State == approvals.StateWithdrawn {
			return fail(e, "%s: run %s call %s is not pending: withdrawn%s, its run ended unanswered; nothing sent", verb, runID, callID, when)
		}
		return fail(e, "%s: run %s call %s is not pending: already decided %s%s%s; nothing sent", verb, runID, callID, entry.State, by, when)
	}
	if *tenant != "" && *tenant != entry.Tenant {
		return fail(e, "%s: run %s belongs to tenant %s, not %s; nothing sent", verb, runID, entry.Tenant, *tenant)
	}
	d, err := chooseDecision(verb, entry.Kind, decision)
	if err != nil {
		return fail(e, "%s: run %s call %s: %v", verb, runID, callID, err)
	}

	q := questionFromEntry(entry)
	if err := unseal(ctx, js, j, kek, &q); err != nil {
		return fail(e, "%s: run %s call %s: %v\n%s", verb, runID, callID, cmp.Or(refusal(nc, err), err), nothingSent)
	}
	fmt.Fprintf(e.stdout, "%s as %s — the exact action:\n", d, printable(*as))
	q.print(e.stdout, "  ", time.Now())
	if *reason != "" {
		fmt.Fprintf(e.stdout, "  %-10s %s\n", "reason", printable(*reason))
	}
	if !*yes {
		p := newPrompter(e.stdin, e.stdout)
		answer, _, err := p.ask(ctx, fmt.Sprintf("send %s? [y/N] ", d))
		p.stop()
		if err != nil || !isYes(answer) {
			fmt.Fprintln(e.stdout, "not sent")
			return exitError
		}
		// A message does not name the round it answers: one sent after
		// the question printed was decided and asked again (a retry whose
		// outcome is unknown too) would answer a round nobody here saw.
		now, _, err := store.Get(ctx, runID, callID)
		if err != nil {
			return fail(e, "%s: read the question again: %v\n%s", verb, err, nothingSent)
		}
		if !now.Pending() || now.Round != entry.Round || now.Kind != entry.Kind || now.ArgsHash != entry.ArgsHash {
			return fail(e, "%s: run %s call %s changed while you decided (now %s, %s round %d; shown: round %d); nothing sent: look again with loopgate pending",
				verb, runID, callID, now.State, now.Kind, now.Round, entry.Round)
		}
	}

	msg := approvals.Message{
		RunID: runID, CallID: callID, ArgsHash: entry.ArgsHash, Decision: d,
		Approver: approvals.Approver{ID: *as}, Reason: *reason,
	}
	// Signed after the confirmation, so signed_at is when it was sent.
	subject, seq, signedBy, err := sendDecision(ctx, js, entry.Tenant, msg, key, "")
	if err != nil {
		return fail(e, "%s: %v", verb, cmp.Or(refusal(nc, err), err))
	}
	if signedBy != "" {
		signedBy = ", signed by " + signedBy
	}
	fmt.Fprintf(e.stdout, "sent %s on %s (approvals seq %d%s)\n", d, subject, seq, signedBy)
	return awaitDecision(ctx, e, j, entry.Tenant, runID, seq, *wait, *natsURL)
}

// sendDecision publishes msg on its call's approvals subject of tenant, as
// any approver's client would: signed with key as of now when key is not
// nil (approvals.Sign), unsigned otherwise. It returns the subject, the
// message's sequence in LOOPGATE_APPROVALS and the public key that signed
// ("" when unsigned). msgID is the publish's Nats-Msg-Id, "" for a new
// one: a sender that publishes the same decision again after an error
// passes the same id, so JetStream stores it once. loopgate approve,
// loopgate deny, the demo's approver and bench's all send through here.
func sendDecision(ctx context.Context, js jetstream.JetStream, tenant string, msg approvals.Message, key nkeys.KeyPair, msgID string) (subject string, seq uint64, signedBy string, err error) {
	if key != nil {
		if err := approvals.Sign(&msg, key, time.Now()); err != nil {
			return "", 0, "", fmt.Errorf("%w; nothing sent", err)
		}
		signedBy, _ = key.PublicKey()
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return "", 0, "", fmt.Errorf("encode the decision: %w; nothing sent", err)
	}
	subject = events.ApprovalSubject(tenant, msg.RunID, msg.CallID)
	ack, err := js.Publish(ctx, subject, payload, jetstream.WithMsgID(cmp.Or(msgID, uuid.NewString())))
	if err != nil {
		return subject, 0, "", fmt.Errorf("publish on %s: %w", subject, notStored(err, "send the decision again"))
	}
	return subject, ack.Sequence, signedBy, nil
}

// humanDecisions are the values approve --decision takes: the answers to a
// needs_human question (an unknown outcome).
var humanDecisions = []approvals.Decision{approvals.MarkDone, approvals.Retry, approvals.Abandon}

// chooseDecision is the decision a command sends for a question of kind k.
func chooseDecision(verb string, k approvals.Kind, flagged *string) (approvals.Decision, error) {
	if verb == "deny" {
		if k != approvals.KindApproval {
			return "", fmt.Errorf("deny answers an approval, and this is a %s question (an unknown outcome): use loopgate approve --decision mark_done|retry|abandon", k)
		}
		return approvals.Deny, nil
	}
	d := approvals.Decision(*flagged)
	if d == "" {
		if k == approvals.KindNeedsHuman {
			return "", errors.New("the outcome of this call is unknown (needs_human): say what to do with --decision mark_done, retry or abandon")
		}
		return approvals.Approve, nil
	}
	if !k.Accepts(d) {
		want := "approve (or loopgate deny)"
		if k == approvals.KindNeedsHuman {
			want = "mark_done, retry or abandon"
		}
		return "", fmt.Errorf("--decision %s does not answer this %s question: want %s", d, k, want)
	}
	return d, nil
}

func isYes(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	return s == "y" || s == "yes"
}

// awaitDecision follows the run until loopgate records what the approval
// message with stream sequence seq did: an approved event (the message
// decided the call: exit 0, then the run's next events until it parks
// again or finishes) or an approval_rejected event (exit
// exitApprovalRejected, with the class and the detail). Each wait is at
// most wait long.
func awaitDecision(ctx context.Context, e env, j *journal.Journal, tenant, runID string, seq uint64, wait time.Duration, natsURL string) int {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(wait, cancel)
	defer timer.Stop()
	tl := &timeline{w: e.stdout, width: 160, hints: e.stdout, natsURL: natsURL}
	decided := false
	for ev, err := range j.Watch(ctx, events.RunFilter(tenant, runID)) {
		if err != nil {
			if decided {
				break
			}
			return fail(e, "follow run %s: %v", runID, err)
		}
		if decided {
			tl.print(ev)
			switch ev.Type {
			case events.TypeParked:
				return exitOK
			case events.TypeFinished:
				tl.end(ev)
				return exitOK
			}
			continue
		}
		approved, rejected := decisionOf(ev, seq)
		switch {
		case approved != nil:
			decided = true
			fmt.Fprintf(e.stdout, "accepted: %s %s by %s; the run goes on:\n", ev.CallID, approved.Decision, printable(approved.Approver))
			tl.print(ev)
			timer.Reset(wait)
		case rejected != nil:
			tl.print(ev)
			return reportRejected(e, runID, ev.CallID, rejected)
		}
	}
	if !decided && parent.Err() == nil {
		// The follow can lag the stream (its consumer on a server still
		// catching up, a loaded machine): one last look, from the
		// stream's leader, before saying nothing was recorded.
		if evs, _, err := j.Load(parent, tenant, runID); err == nil {
			for _, ev := range evs {
				switch approved, rejected := decisionOf(ev, seq); {
				case approved != nil:
					tl.print(ev)
					fmt.Fprintf(e.stdout, "accepted: %s %s by %s (follow the run with: loopgate audit %s --follow%s)\n", ev.CallID, approved.Decision, printable(approved.Approver), runID, natsFlag(natsURL))
					return exitOK
				case rejected != nil:
					tl.print(ev)
					return reportRejected(e, runID, ev.CallID, rejected)
				}
			}
		}
	}
	if decided {
		// The decision is recorded: the approver's part is done, however
		// the follow of what came after it ended.
		after := fmt.Sprintf("still going after %s", wait)
		if parent.Err() != nil {
			after = "interrupted; the run goes on"
		}
		fmt.Fprintf(e.stdout, "(%s; follow it with: loopgate audit %s --follow%s)\n", after, runID, natsFlag(natsURL))
		return exitOK
	}
	if parent.Err() != nil {
		// Interrupted: what was sent stands, decided or not.
		return failCode(e, exitUnfinished, "interrupted before loopgate recorded what the message did: it is stored (approvals seq %d) and a worker decides it when one runs; `loopgate audit %s` will show it", seq, runID)
	}
	return fail(e, "no decision recorded within %s: the message is stored (approvals seq %d) and a worker decides it when one runs; `loopgate audit %s` will show it", wait, seq, runID)
}

// decisionOf returns what ev records of the approval message with stream
// sequence seq: the decision it made, or why it decided nothing; both nil
// for any other event.
func decisionOf(ev events.Event, seq uint64) (*events.ApprovedData, *events.ApprovalRejectedData) {
	switch ev.Type {
	case events.TypeApproved:
		var d events.ApprovedData
		if ev.Decode(&d) == nil && d.ApprovalSeq == seq {
			return &d, nil
		}
	case events.TypeApprovalRejected:
		var d events.ApprovalRejectedData
		if ev.Decode(&d) == nil && d.ApprovalSeq == seq {
			return nil, &d
		}
	}
	return nil, nil
}

// reportRejected says why loopgate decided nothing with the message.
func reportRejected(e env, runID, callID string, d *events.ApprovalRejectedData) int {
	fmt.Fprintf(e.stdout, "REJECTED (%s): %s\n", d.Class, printable(d.Detail))
	fmt.Fprintf(e.stderr, "loopgate: %s's decision (%s) on run %s call %s was rejected: %s — %s\n",
		printable(d.Approver), d.Decision, runID, callID, d.Class, printable(d.Detail))
	if d.Class == approvals.RejectUnsigned {
		fmt.Fprintln(e.stderr, "loopgate: sign it: send it again with --key FILE, the approver's nkey seed (loopgate keys new makes one; the CityOps example's are in examples/cityops/keys)")
	}
	return exitApprovalRejected
}
