package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// Run statuses as the workers write them in the runs projection.
const (
	statusRunning  = "running"
	statusParked   = "parked"
	statusFinished = "finished"
)

// runRunsList is `loopgate runs`: the runs projection (loopgate_runs),
// counted by status and stop reason, and listed: the runs still going,
// oldest update first (where one that is stuck shows), then the finished
// ones, newest first.
func runRunsList(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate runs", flag.ContinueOnError)
	var (
		natsURL = fs.String("nats", "nats://127.0.0.1:4222", "NATS URL of a running loopgate")
		tenant  = fs.String("tenant", "", "only this tenant's runs (default: every tenant)")
		status  = fs.String("status", "", "only runs in this status: running, parked or finished")
		reason  = fs.String("reason", "", "only finished runs that stopped for this reason (done, max_steps, …)")
		limit   = fs.Int("limit", 50, "list at most this many runs (0: all); the counts cover every run")
		asJSON  = fs.Bool("json", false, "print the records as JSON lines (every run that matches, no limit)")
	)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate runs [--tenant T] [--status S] [--reason R] [--limit N] [--json] [--nats URL]")
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
		return fail(e, "runs: --tenant %q is not a valid subject token", *tenant)
	}
	switch *status {
	case "", statusRunning, statusParked, statusFinished:
	default:
		return fail(e, "runs: --status %q: want running, parked or finished", *status)
	}
	if *reason != "" && !events.Reason(*reason).Valid() {
		return fail(e, "runs: --reason %q is not a stop reason %v", *reason, events.Reasons())
	}
	if *limit < 0 {
		return fail(e, "runs: --limit %d: want 0 (all) or more", *limit)
	}
	nc, _, j, err := connect(ctx, *natsURL)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer nc.Close()
	recs, err := j.Runs(ctx, *tenant)
	if err != nil {
		if recs == nil {
			return fail(e, "runs: %v", cmp.Or(refusal(nc, err), err))
		}
		// Some records did not decode: say which, list the others.
		fmt.Fprintf(e.stderr, "loopgate: runs: %v\n", err)
	}
	recs = slices.DeleteFunc(recs, func(r journal.RunRecord) bool {
		return (*status != "" && r.Status != *status) || (*reason != "" && r.Reason != *reason)
	})
	sortRuns(recs)
	if *asJSON {
		for _, r := range recs {
			b, _ := json.Marshal(r)
			fmt.Fprintln(e.stdout, string(b))
		}
		return exitOK
	}
	printRuns(e.stdout, recs, runsScope(*tenant, *status, *reason), *limit, time.Now())
	return exitOK
}

// sortRuns puts the runs still going first, oldest update first, then the
// finished ones, newest first.
func sortRuns(recs []journal.RunRecord) {
	slices.SortStableFunc(recs, func(a, b journal.RunRecord) int {
		af, bf := a.Status == statusFinished, b.Status == statusFinished
		switch {
		case af != bf:
			if af {
				return 1
			}
			return -1
		case af:
			return cmp.Or(b.Updated.Compare(a.Updated), strings.Compare(a.RunID, b.RunID))
		default:
			return cmp.Or(a.Updated.Compare(b.Updated), strings.Compare(a.RunID, b.RunID))
		}
	})
}

func runsScope(tenant, status, reason string) string {
	parts := []string{"any tenant"}
	if tenant != "" {
		parts[0] = "tenant " + tenant
	}
	if status != "" {
		parts = append(parts, "status "+status)
	}
	if reason != "" {
		parts = append(parts, "reason "+reason)
	}
	return strings.Join(parts, ", ")
}

// printRuns prints the counts of recs by status (and of the finished by
// reason), then at most limit of them (0: all) as a table.
func printRuns(w io.Writer, recs []journal.RunRecord, scope string, limit int, now time.Time) {
	if len(recs) == 0 {
		fmt.Fprintf(w, "no runs (%s)\n", scope)
		return
	}
	byStatus, byReason := map[string]int{}, map[string]int{}
	for _, r := range recs {
		byStatus[r.Status]++
		if r.Status == statusFinished {
			byReason[cmp.Or(r.Reason, "?")]++
		}
	}
	var counts []string
	for _, s := range slices.Sorted(maps.Keys(byStatus)) {
		c := fmt.Sprintf("%s %d", s, byStatus[s])
		if s == statusFinished {
			var rs []string
			for _, r := range slices.Sorted(maps.Keys(byReason)) {
				rs = append(rs, fmt.Sprintf("%s %d", r, byReason[r]))
			}
			c += " (" + strings.Join(rs, ", ") + ")"
		}
		counts = append(counts, c)
	}
	fmt.Fprintf(w, "%s (%s): %s\n", plural(len(recs), "run"), scope, strings.Join(counts, ", "))
	shown := recs
	if limit > 0 && len(shown) > limit {
		shown = shown[:limit]
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tTENANT\tAGENT\tSTATUS\tREASON\tEVENTS\tUPDATED")
	for _, r := range shown {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s ago\n", r.RunID, r.Tenant, r.Agent, r.Status, cmp.Or(r.Reason, "-"), r.LastSeq, now.Sub(r.Updated).Round(time.Second))
	}
	tw.Flush()
	if more := len(recs) - len(shown); more > 0 {
		fmt.Fprintf(w, "… and %d more (--limit 0 lists every run)\n", more)
	}
	fmt.Fprintln(w, "\nFrom the loopgate_runs projection, which trails the events by up to a quarter second; loopgate audit RUN replays a run's events.")
}
