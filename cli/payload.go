package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
)

// runApprovalPayload is loopgate approval-payload: it prints a decision
// on one call as an approvals message, signed with the approver's key
// (approvals.Sign), and the nats pub line that sends it, for an approver
// whose client is plain NATS. It connects to nothing: the args hash is
// the one loopgate pending shows.
func runApprovalPayload(_ context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate approval-payload", flag.ContinueOnError)
	var (
		tenant   = fs.String("tenant", "cityops", "the run's tenant: the subject names it")
		argsHash = fs.String("args-hash", "", "the call's args hash, as loopgate pending shows it (required)")
		as       = fs.String("as", "", "approver id, as named in the policy (required)")
		keyFile  = fs.String("key", "", "sign with the approver's nkey seed in this file (required)")
		deny     = fs.Bool("deny", false, "deny the call (with --reason) instead of approving it")
		reason   = fs.String("reason", "", "why; the model sees a denial's reason")
	)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate approval-payload RUN_ID CALL_ID --args-hash H --as ID --key FILE [--deny --reason R] [--tenant T]")
		fs.PrintDefaults()
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
		return fail(e, "approval-payload: %q %q is not a run id and a call id", runID, callID)
	case !events.ValidToken(*tenant):
		return fail(e, "approval-payload: --tenant %q is not a valid subject token", *tenant)
	case *argsHash == "":
		return fail(e, "approval-payload: --args-hash is required: the call's, as loopgate pending shows it")
	case strings.TrimSpace(*as) == "":
		return fail(e, "approval-payload: --as ID is required: the approver, as named in the policy")
	case *keyFile == "":
		return fail(e, "approval-payload: --key FILE is required: the approver's nkey seed (the CityOps example's keys are in examples/cityops/keys/)")
	case *deny && strings.TrimSpace(*reason) == "":
		return fail(e, "approval-payload: --deny needs --reason: the model is told why it was denied")
	}
	key, err := readKey(e, *keyFile)
	if err != nil {
		return fail(e, "approval-payload: %v", err)
	}
	defer key.Wipe()
	d := approvals.Approve
	if *deny {
		d = approvals.Deny
	}
	msg := approvals.Message{RunID: runID, CallID: callID, ArgsHash: *argsHash, Decision: d,
		Approver: approvals.Approver{ID: *as}, Reason: *reason}
	if err := approvals.Sign(&msg, key, time.Now()); err != nil {
		return fail(e, "approval-payload: %v", err)
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return fail(e, "approval-payload: encode: %v", err)
	}
	fmt.Fprintln(e.stdout, string(payload))
	// The payload holds no single quote unless a reason or id does: a
	// quote is closed, escaped and reopened for the shell.
	quoted := "'" + strings.ReplaceAll(string(payload), "'", `'\''`) + "'"
	fmt.Fprintf(e.stdout, "nats pub %s %s\n", events.ApprovalSubject(*tenant, runID, callID), quoted)
	fmt.Fprintf(e.stderr, "signed at %s; send it within the policy's approval_max_age (default 5m)\n", msg.SignedAt)
	return exitOK
}
