package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natsconn"
)

// pendingJSON is one pending entry as `loopgate pending --json` prints it:
// the stored entry with its arguments as JSON rather than base64.
func runPending(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate pending", flag.ContinueOnError)
	var (
		natsURL = fs.String("nats", defaultNATS, "NATS URL of a running loopgate")
		tenant  = fs.String("tenant", "", "only this tenant's calls (default: every tenant)")
		asJSON  = fs.Bool("json", false, "print the entries as JSON lines")
		sealKey = fs.String("seal-key", "", "open sealed arguments with the key-encryption key in this file (default: LOOPGATE_SEAL_KEY); without it they show redacted")
	)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate pending [--tenant T] [--nats URL] [--json]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, e, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitError
	}
	if *tenant != "" && !events.ValidToken(*tenant) {
		return fail(e, "pending: tenant %q is not a valid subject token", *tenant)
	}
	kek, err := readSealKey(*sealKey)
	if err != nil {
		return fail(e, "pending: --seal-key: %v", err)
	}
	nc, js, j, err := connect(ctx, *natsURL)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer nc.Close()
	store, err := openApprovals(ctx, js)
	if err != nil {
		return fail(e, "pending: %v", cmp.Or(refusal(nc, err), err))
	}
	entries, err := store.Pending(ctx, *tenant)
	if err != nil {
		return fail(e, "pending: %v", cmp.Or(refusal(nc, err), err))
	}
	if *asJSON {
		for _, ent := range entries {
			b, _ := json.Marshal(ent)
			fmt.Fprintln(e.stdout, string(b))
		}
		return exitOK
	}
	scope := "any tenant"
	if *tenant != "" {
		scope = "tenant " + *tenant
	}
	if len(entries) == 0 {
		fmt.Fprintf(e.stdout, "nothing pending (%s)\n", scope)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "%d pending (%s), oldest first:\n", len(entries), scope)
	now := time.Now()
	for i, ent := range entries {
		q := questionFromEntry(ent)
		if err := unseal(ctx, js, j, kek, &q); err != nil {
			return fail(e, "pending: run %s call %s: %v", q.RunID, q.CallID, cmp.Or(refusal(nc, err), err))
		}
		fmt.Fprintf(e.stdout, "\n#%d  %s, asked %s ago\n", i+1, q.Kind, now.Sub(q.RequestedAt).Round(time.Second))
		q.print(e.stdout, "  ", now)
		fmt.Fprintf(e.stdout, "  %-10s %s\n", "decide", decideHint(q, *natsURL))
	}
	return exitOK
}

// natsFlag is " --nats URL" for a command hint addressed to natsURL, or
// nothing for the default URL.
func natsFlag(natsURL string) string {
	if natsURL == "" || natsURL == defaultNATS {
		return ""
	}
	return " --nats " + natsconn.RedactedURLs(natsURL) // a password in it is the user's to type again
}

// decideHint is the command that answers q. The client cannot see the
// workers' policy, so the hint says that --key (the approver's seed file)
// is required when the policy requires signatures, and where the CityOps
// example's keys are. Its last part is the deny alternative
// (decideHintDeny) for an approval.
func decideHint(q question, natsURL string) string {
	nats := natsFlag(natsURL)
	if q.Kind == approvals.KindNeedsHuman {
		return fmt.Sprintf("loopgate approve %s %s --as <approver> --key FILE --decision mark_done|retry|abandon%s   %s", q.RunID, q.CallID, nats, keyNote)
	}
	return fmt.Sprintf("loopgate approve %s %s --as <approver> --key FILE%s   %s%s", q.RunID, q.CallID, nats, keyNote, decideHintDeny)
}

// keyNote says when decideHint's --key is required, and where the CityOps
// example's keys are.
const keyNote = "(--key FILE: required when the policy requires signatures; the CityOps example's keys are in examples/cityops/keys/)"

// decideHintDeny ends decideHint's hint for an approval.
const decideHintDeny = "   (or: loopgate deny … --as <approver> --reason R)"
