package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// runCancel is loopgate cancel: it publishes a cancel of one run on
// loopgate.cancel.<tenant>.<run_id>, as any client would, and follows the
// run until loopgate records what the message did: cancel_requested and
// then the run's finished event (exit 0), or cancel_rejected (exit
// exitApprovalRejected, with the class and the detail).
func runCancel(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate cancel", flag.ContinueOnError)
	var (
		natsURL = fs.String("nats", defaultNATS, "NATS URL of a running loopgate")
		tenant  = fs.String("tenant", "", "the run's tenant (default: read from the run's started event)")
		as      = fs.String("as", "", "who asks, as the policy names them (default: the run's own principal, read from its started event)")
		reason  = fs.String("reason", "", "why the run is cancelled; recorded in its finished event (required)")
		wait    = fs.Duration("wait", 5*time.Second, "how long to wait for loopgate to record the cancel, and then for the run to finish")
	)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate cancel RUN_ID --reason TEXT [--as ID] [--tenant T] [--wait D] [--nats URL]")
		fs.PrintDefaults()
	}
	pos, code, ok := parseInterspersed(fs, e, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return exitError
	}
	runID := pos[0]
	switch {
	case !events.ValidToken(runID):
		return fail(e, "cancel: %q is not a run id", runID)
	case *tenant != "" && !events.ValidToken(*tenant):
		return fail(e, "cancel: --tenant %q is not a tenant", *tenant)
	case strings.TrimSpace(*reason) == "":
		return fail(e, "cancel: --reason is required: the run's finished event says who cancelled it and why")
	case *wait <= 0:
		return fail(e, "cancel: --wait must be positive")
	}
	nc, js, j, err := connect(ctx, *natsURL)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer nc.Close()
	if *tenant == "" || strings.TrimSpace(*as) == "" {
		// Both come from the run's started event, which needs a read of
		// the events stream; a client that may only publish passes both.
		t, found, err := j.TenantOf(ctx, runID)
		switch {
		case err != nil:
			return fail(e, "cancel: find run %s: %v; nothing sent (pass --tenant and --as to send without reading the run)", runID, cmp.Or(refusal(nc, err), err))
		case !found:
			return fail(e, "cancel: no run %s; nothing sent", runID)
		case *tenant != "" && *tenant != t:
			return fail(e, "cancel: run %s belongs to tenant %s, not %s; nothing sent", runID, t, *tenant)
		}
		*tenant = t
		if strings.TrimSpace(*as) == "" {
			evs, _, err := j.Load(ctx, t, runID)
			if err != nil || len(evs) == 0 {
				return fail(e, "cancel: read run %s: %v; nothing sent (pass --as)", runID, cmp.Or(refusal(nc, err), err))
			}
			var d events.StartedData
			if evs[0].Type != events.TypeStarted || evs[0].Decode(&d) != nil {
				return fail(e, "cancel: run %s has no started event to name its principal; nothing sent (pass --as)", runID)
			}
			*as = d.Task.Principal.ID
		}
	}
	subject, seq, err := sendCancel(ctx, js, *tenant, events.CancelMessage{RunID: runID, RequestedBy: events.Requester{ID: *as}, Reason: *reason})
	if err != nil {
		return fail(e, "cancel: %v", cmp.Or(refusal(nc, err), err))
	}
	fmt.Fprintf(e.stdout, "sent cancel of run %s as %s on %s (cancels seq %d): %s\n", runID, printable(*as), subject, seq, printable(*reason))
	return awaitCancel(ctx, e, j, *tenant, runID, seq, *wait, *natsURL)
}

// sendCancel publishes msg on its run's cancel subject of tenant and
// returns the subject and the message's sequence in LOOPGATE_CANCELS.
func sendCancel(ctx context.Context, js jetstream.JetStream, tenant string, msg events.CancelMessage) (string, uint64, error) {
	payload, err := json.Marshal(msg)
	if err != nil {
		return "", 0, fmt.Errorf("encode the cancel: %w; nothing sent", err)
	}
	subject := events.CancelSubject(tenant, msg.RunID)
	ack, err := js.Publish(ctx, subject, payload, jetstream.WithMsgID(uuid.NewString()))
	if err != nil {
		return subject, 0, fmt.Errorf("publish on %s: %w", subject, notStored(err, "send the cancel again"))
	}
	return subject, ack.Sequence, nil
}

// awaitCancel follows the run until loopgate records what the cancel
// message with stream sequence seq did, each wait at most wait long.
func awaitCancel(ctx context.Context, e env, j *journal.Journal, tenant, runID string, seq uint64, wait time.Duration, natsURL string) int {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(wait, cancel)
	defer timer.Stop()
	tl := &timeline{w: e.stdout, width: 160, hints: e.stdout, natsURL: natsURL}
	accepted := false
	for ev, err := range j.Watch(ctx, events.RunFilter(tenant, runID)) {
		if err != nil {
			break
		}
		if accepted {
			tl.print(ev)
			if ev.Type == events.TypeFinished {
				tl.end(ev)
				return exitOK
			}
			continue
		}
		switch requested, rejected := cancelOf(ev, seq); {
		case requested != nil:
			accepted = true
			fmt.Fprintln(e.stdout, "accepted: the run stops at its next boundary")
			tl.print(ev)
			timer.Reset(wait)
		case rejected != nil:
			tl.print(ev)
			fmt.Fprintf(e.stdout, "REJECTED (%s): %s\n", rejected.Class, printable(rejected.Detail))
			return failCode(e, exitApprovalRejected, "the cancel of run %s was rejected: %s — %s", runID, rejected.Class, printable(rejected.Detail))
		}
	}
	switch {
	case accepted && parent.Err() != nil:
		return failCode(e, exitUnfinished, "interrupted; the cancel is recorded and the run stops at its next boundary: `loopgate audit %s%s` will show it", runID, natsFlag(natsURL))
	case accepted:
		fmt.Fprintf(e.stdout, "(the cancel is recorded; the run had not finished after %s: follow it with: loopgate audit %s --follow%s)\n", wait, runID, natsFlag(natsURL))
		return exitOK
	case parent.Err() != nil:
		return failCode(e, exitUnfinished, "interrupted before loopgate recorded what the cancel did: it is stored (cancels seq %d) and a worker handles it when one runs", seq)
	}
	return fail(e, "no outcome recorded within %s: the cancel is stored (cancels seq %d) and a worker handles it when one runs; `loopgate audit %s%s` will show it", wait, seq, runID, natsFlag(natsURL))
}

// cancelOf returns what ev records of the cancel message with stream
// sequence seq; both nil for any other event.
func cancelOf(ev events.Event, seq uint64) (*events.CancelRequestedData, *events.CancelRejectedData) {
	switch ev.Type {
	case events.TypeCancelRequested:
		var d events.CancelRequestedData
		if ev.Decode(&d) == nil && d.CancelSeq == seq {
			return &d, nil
		}
	case events.TypeCancelRejected:
		var d events.CancelRejectedData
		if ev.Decode(&d) == nil && d.CancelSeq == seq {
			return nil, &d
		}
	}
	return nil, nil
}
