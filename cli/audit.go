package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
)

func runAudit(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate audit", flag.ContinueOnError)
	var (
		natsURL = fs.String("nats", defaultNATS, "NATS URL")
		tenant  = fs.String("tenant", "", "the run's tenant (default: any)")
		follow_ = fs.Bool("follow", false, "keep printing new events until the run finishes")
		asJSON  = fs.Bool("json", false, "print events as JSON lines (the stored envelopes)")
		secure  = fs.Bool("security", false, "list the tenant-level security records (approvals refused before any run of the tenant could hold them) instead of a run's events; with RUN_ID, those that claim that run")
	)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate audit RUN_ID [--follow] [--json] [--nats URL] [--tenant T]")
		fmt.Fprintln(e.stderr, "       loopgate audit --security [RUN_ID] [--json] [--nats URL] [--tenant T]")
		fs.PrintDefaults()
	}
	// Accept the run id before or after the flags.
	var runID string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		runID, args = args[0], args[1:]
	}
	if code, ok := parseFlags(fs, e, args); !ok {
		return code
	}
	if runID == "" && fs.NArg() == 1 {
		runID = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "loopgate audit: unexpected argument %q (the flags after it would not be read)\n", fs.Arg(0))
		fs.Usage()
		return exitError
	}
	if *secure {
		return auditSecurity(ctx, e, *natsURL, *tenant, runID, *follow_, *asJSON)
	}
	if runID == "" {
		fs.Usage()
		return exitError
	}
	if !events.ValidToken(runID) {
		return fail(e, "audit: run id %q is not a run id (1 to 64 letters, digits, '_' or '-')", runID)
	}
	if *tenant != "" && !events.ValidToken(*tenant) {
		return fail(e, "audit: --tenant %q is not a valid subject token", *tenant)
	}
	filter := events.AnyTenantRunFilter(runID)
	if *tenant != "" {
		filter = events.RunFilter(*tenant, runID)
	}
	nc, _, j, err := connect(ctx, *natsURL)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer nc.Close()
	if *follow_ {
		// A run id with no events is followed all the same (its task may
		// be queued still), but not in silence: it may be a typo, or
		// another tenant's run under --tenant.
		if _, ok, err := j.LastOn(ctx, filter); err != nil {
			return fail(e, "read run %s: %v", runID, cmp.Or(refusal(nc, err), err))
		} else if !ok {
			fmt.Fprintf(e.stderr, "run %s has no events yet (a task still queued, or a wrong run id or --tenant); waiting for them\n", runID)
		}
		return follow(ctx, e, j, followed{runID: runID, filter: filter, asJSON: *asJSON, natsURL: *natsURL, summary: true})
	}
	evs, err := j.Replay(ctx, filter)
	if err != nil {
		return fail(e, "read run %s: %v", runID, cmp.Or(refusal(nc, err), err))
	}
	if len(evs) == 0 {
		return fail(e, "run %s has no events", runID)
	}
	tl := &timeline{w: e.stdout, asJSON: *asJSON, width: 160}
	for _, ev := range evs {
		tl.print(ev)
		if ev.Type == events.TypeFinished {
			tl.end(ev)
		}
	}
	if !*asJSON {
		summarize(e.stdout, evs, time.Now())
	}
	return exitOK
}

// auditSecurity prints the security records of tenant (every tenant when
// ""), oldest first; with runID, only those that claim that run. No record
// is no failure: it prints so and exits 0.
func auditSecurity(ctx context.Context, e env, natsURL, tenant, runID string, follow, asJSON bool) int {
	switch {
	case follow:
		return fail(e, "audit: --follow does not apply to --security (it lists the records stored now)")
	case runID != "" && !events.ValidToken(runID):
		return fail(e, "audit: run id %q is not a run id (1 to 64 letters, digits, '_' or '-')", runID)
	case tenant != "" && !events.ValidToken(tenant):
		return fail(e, "audit: --tenant %q is not a valid subject token", tenant)
	}
	nc, _, j, err := connect(ctx, natsURL)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer nc.Close()
	filter := events.SecurityFilter(tenant)
	evs, err := j.Replay(ctx, filter)
	if err != nil {
		return fail(e, "read security records: %v", cmp.Or(refusal(nc, err), err))
	}
	return printSecurity(e.stdout, evs, tenant, runID, asJSON)
}

// printSecurity prints security records, those claiming runID only when
// it is set: the stored envelopes as JSON lines with asJSON, else a
// listing, two lines a record.
func printSecurity(w io.Writer, evs []events.Event, tenant, runID string, asJSON bool) int {
	scope := "every tenant"
	if tenant != "" {
		scope = "tenant " + tenant
	}
	if runID != "" {
		scope += ", claiming run " + runID
	}
	var shown []events.Event
	for _, ev := range evs {
		var d events.SecurityData
		if runID != "" && (ev.Decode(&d) != nil || d.ClaimedRunID != runID) {
			continue
		}
		shown = append(shown, ev)
	}
	tl := &timeline{w: w, asJSON: true}
	if asJSON {
		for _, ev := range shown {
			tl.print(ev)
		}
		return exitOK
	}
	if len(shown) == 0 {
		fmt.Fprintf(w, "no security records (%s)\n", scope)
		return exitOK
	}
	fmt.Fprintf(w, "security records (%s): %d\n", scope, len(shown))
	for _, ev := range shown {
		var d events.SecurityData
		detail := string(compact(ev.Data, 160))
		if ev.Decode(&d) == nil {
			detail = securityDetail(d)
		}
		fmt.Fprintf(w, "  %s  %-12s record %s\n      %s\n", ev.Time.UTC().Format("2006-01-02 15:04:05.000"), ev.Tenant, ev.RunID, printable(detail))
	}
	return exitOK
}

// securityDetail is how a timeline and a listing show a security record:
// its class, what the message claimed, and where it came.
func securityDetail(d events.SecurityData) string {
	s := fmt.Sprintf("SECURITY %s: %s by %s (signature %s) for run %s call %s, approvals seq %d on %s",
		d.Class, cmp.Or(d.Decision, "?"), cmp.Or(d.Approver, "?"), d.Signature, d.ClaimedRunID, d.ClaimedCallID, d.ApprovalSeq, d.Subject)
	if d.Detail != "" {
		s += " — " + d.Detail
	}
	if len(d.Errors) > 0 {
		s += " — " + fieldErrors(d.Errors)
	}
	return s
}

// summarize ends an audit with each gated call's questions and decisions,
// and where the run's time went: active (what the budgets count) and
// parked waiting for a human.
func summarize(w io.Writer, evs []events.Event, now time.Time) {
	type gated struct {
		callID, tool string
		asked        time.Time
		story        []string
	}
	var calls []*gated
	byID := map[string]*gated{}
	var (
		active, parked time.Duration
		parks          int
		isParked       bool
		parkedSince    time.Time
		finished       bool
	)
	var prev time.Time // of the last event that was not a record (events.Type.IsRecord)
	for _, ev := range evs {
		if !prev.IsZero() && !ev.Type.IsRecord() && ev.Time.After(prev) {
			// The same rule as events.Fold: a gap after a parked event is
			// time parked; a gap after the finish (before a late answer)
			// is neither; a record (an answer that decided nothing, a
			// model call lost to the run's driver), appended by any
			// worker with its clock, is no part of the run's time.
			switch {
			case isParked:
				parked += ev.Time.Sub(prev)
			case !finished:
				active += ev.Time.Sub(prev)
			}
		}
		if !ev.Type.IsRecord() || prev.IsZero() {
			prev = ev.Time
		}
		switch ev.Type {
		case events.TypeParked:
			if !isParked {
				parkedSince = ev.Time
			}
			isParked = true
			parks++
		case events.TypeApprovalRejected, events.TypeCancelRejected, events.TypeDiscarded:
			// Records leave a parked run parked.
		default:
			isParked = false
		}
		switch ev.Type {
		case events.TypeFinished:
			finished = true
		case events.TypeApprovalRequested:
			var d events.ApprovalRequestedData
			if ev.Decode(&d) != nil {
				continue
			}
			g := byID[ev.CallID]
			if g == nil {
				g = &gated{callID: ev.CallID, tool: d.Tool}
				byID[ev.CallID] = g
				calls = append(calls, g)
			}
			g.asked = ev.Time
			if d.Kind == string(approvals.KindNeedsHuman) {
				g.story = append(g.story, fmt.Sprintf("outcome unknown after attempt %d, asked a human", d.Attempt))
			}
		case events.TypeApprovalRejected:
			var d events.ApprovalRejectedData
			if g := byID[ev.CallID]; g != nil && ev.Decode(&d) == nil {
				g.story = append(g.story, fmt.Sprintf("rejected %s (%s by %s)", d.Class, cmp.Or(d.Decision, "?"), cmp.Or(printable(d.Approver), "?")))
			}
		case events.TypeApproved:
			var d events.ApprovedData
			if g := byID[ev.CallID]; g != nil && ev.Decode(&d) == nil {
				s := decisionWord(d.Decision)
				if d.Approver != "" {
					s += " by " + printable(d.Approver)
				}
				s += fmt.Sprintf(" after %s", ev.Time.Sub(g.asked).Round(time.Millisecond))
				if d.Reason != "" {
					s += ": " + printable(d.Reason)
				}
				g.story = append(g.story, s)
			}
		}
	}
	if len(calls) > 0 {
		fmt.Fprintf(w, "\napprovals (%s):\n", plural(len(calls), "gated call"))
		awaiting := lastAwaiting(evs)
		for _, g := range calls {
			switch {
			case finished && len(g.story) == 0:
				g.story = append(g.story, "unanswered: the run ended (the question is withdrawn)")
			case len(g.story) == 0 || isParked && slices.Contains(awaiting, g.callID):
				g.story = append(g.story, "still pending")
			}
			fmt.Fprintf(w, "  %-6s %-18s %s\n", g.callID, g.tool, strings.Join(g.story, "; "))
		}
	}
	fmt.Fprintf(w, "\ntime: active %s (what the budgets count), parked %s waiting for humans (%s)\n",
		active.Round(time.Millisecond), parked.Round(time.Millisecond), plural(parks, "park"))
	if isParked && !finished {
		fmt.Fprintf(w, "      parked now, since %s (%s so far), awaiting %s\n", parkedSince.Format("15:04:05"),
			now.Sub(parkedSince).Round(time.Second), strings.Join(lastAwaiting(evs), ", "))
	}
}

// lastAwaiting is what the run's latest parked event awaits.
func lastAwaiting(evs []events.Event) []string {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == events.TypeParked {
			var d events.ParkedData
			_ = evs[i].Decode(&d)
			return d.Awaiting
		}
	}
	return nil
}

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }
