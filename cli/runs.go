package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"golang.org/x/sync/errgroup"
)

// runRunsList is `loopgate runs`: the runs projection (loopgate_runs) and
// the tasks rejected at intake, counted by status and stop reason, and
// listed: the runs still going, oldest update first (where one that is
// stuck shows), then the finished runs and rejected tasks, newest first.
func runRunsList(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate runs", flag.ContinueOnError)
	var (
		natsURL = fs.String("nats", defaultNATS, "NATS URL of a running loopgate")
		tenant  = fs.String("tenant", "", "only this tenant's runs (default: every tenant)")
		status  = fs.String("status", "", "only runs in this status: running, parked, finished, or rejected (tasks rejected at intake, with the reason)")
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
	case "", journal.RunRunning, journal.RunParked, journal.RunFinished, statusRejected:
	default:
		return fail(e, "runs: --status %q: want running, parked, finished or rejected", *status)
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
	runs, undecoded, err := checkWithEvents(ctx, j, recs)
	if err != nil {
		return fail(e, "runs: %v", cmp.Or(refusal(nc, err), err))
	}
	for _, err := range undecoded {
		// Listed as its record says; the operator learns which run to audit.
		fmt.Fprintf(e.stderr, "loopgate: runs: %v (listed as its record says)\n", err)
	}
	rejected, err := rejectedTasks(ctx, j, *tenant, runs)
	if err != nil {
		return fail(e, "runs: %v", cmp.Or(refusal(nc, err), err))
	}
	runs = append(runs, rejected...)
	runs = slices.DeleteFunc(runs, func(r listedRun) bool {
		return (*status != "" && r.Status != *status) || (*reason != "" && r.Reason != *reason)
	})
	sortRuns(runs)
	if *asJSON {
		for _, r := range runs {
			b, _ := json.Marshal(r)
			fmt.Fprintln(e.stdout, string(b))
		}
		return exitOK
	}
	printRuns(e.stdout, runs, runsScope(*tenant, *status, *reason), *limit, time.Now())
	return exitOK
}

// listedRun is a run as loopgate runs shows it: its projection record,
// brought up to date by its last event where the run is not finished.
type listedRun struct {
	journal.RunRecord
	// Projected is the status the projection record says, when the
	// events say otherwise: a worker process that stopped abruptly
	// (kill -9) loses the updates it had not yet written, up to a quarter
	// second's worth.
	Projected string `json:"projected_status,omitempty"`
	// Rejection is why a task of status statusRejected was rejected: the
	// field at fault and the reason, as its rejected event says.
	Rejection string `json:"rejection,omitempty"`
}

// statusRejected is the status loopgate runs gives a task rejected at
// intake. Such a task never became a run: the projection has no record of
// it, and its rejected event, the only event under its run id (the task's,
// or one derived from the message when the task has no usable task id),
// is all there is.
const statusRejected = "rejected"

// rejectedTasks reads the rejected events of tenant (every tenant if
// empty) and returns them as listed tasks of status statusRejected,
// leaving out any run listed already.
func rejectedTasks(ctx context.Context, j *journal.Journal, tenant string, listed []listedRun) ([]listedRun, error) {
	evs, err := j.Replay(ctx, events.EventSubject(cmp.Or(tenant, "*"), "*", events.TypeRejected))
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(listed))
	for _, r := range listed {
		seen[r.RunID] = true
	}
	var out []listedRun
	for _, ev := range evs {
		if seen[ev.RunID] {
			continue
		}
		var d events.RejectedData
		_ = ev.Decode(&d) // a rejection that does not decode is listed without its reason
		out = append(out, listedRun{
			RunRecord: journal.RunRecord{RunID: ev.RunID, Tenant: ev.Tenant, TaskID: d.TaskID, Status: statusRejected, LastSeq: ev.Seq, Updated: ev.Time},
			Rejection: cmp.Or(d.Field, "(message)") + ": " + d.Reason,
		})
	}
	return out, nil
}

// checkWithEvents reads the last event of each run the projection does
// not say is finished (one message get each, a few at a time) and takes
// the run's status, last seq and last change from it. A finished record
// is final: a run's finish is its last event. A run whose last event is
// not a valid event (written by a foreign publisher) keeps its record's
// status and is returned in undecoded, so that one bad message names its
// run rather than failing the whole listing; any other error fails it.
func checkWithEvents(ctx context.Context, j *journal.Journal, recs []journal.RunRecord) (out []listedRun, undecoded []error, err error) {
	out = make([]listedRun, len(recs))
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, rec := range recs {
		out[i].RunRecord = rec
		if rec.Status == journal.RunFinished {
			continue
		}
		g.Go(func() error {
			ev, ok, err := j.Last(ctx, rec.Tenant, rec.RunID)
			if de := (*journal.DecodeError)(nil); errors.As(err, &de) {
				mu.Lock()
				undecoded = append(undecoded, err)
				mu.Unlock()
				return nil
			}
			if err != nil || !ok {
				return err
			}
			status, reason := statusOf(ev)
			if ev.Type.IsRecord() {
				// A record (an answer that decided nothing, a model call
				// lost to the run's driver) leaves the run as it was,
				// parked or not, finished or not: the events say.
				var ferr error
				if status, reason, ferr = statusFolded(ctx, j, rec.Tenant, rec.RunID); ferr != nil {
					if ctx.Err() != nil {
						return ferr
					}
					// Listed as projected, the cause named, as for a
					// last event that does not decode.
					mu.Lock()
					undecoded = append(undecoded, ferr)
					mu.Unlock()
					return nil
				}
			}
			r := &out[i]
			if status != rec.Status {
				r.Projected = rec.Status
			}
			r.Status, r.Reason, r.LastSeq, r.Updated = status, reason, ev.Seq, ev.Time
			return nil
		})
	}
	err = g.Wait()
	slices.SortFunc(undecoded, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return out, undecoded, err
}

// statusOf is the status a run is in after its event ev, and the reason
// if that ends it.
func statusOf(ev events.Event) (status, reason string) {
	switch ev.Type {
	case events.TypeFinished:
		var d events.FinishedData
		_ = json.Unmarshal(ev.Data, &d)
		return journal.RunFinished, string(d.Reason)
	case events.TypeParked:
		return journal.RunParked, ""
	default:
		return journal.RunRunning, ""
	}
}

// statusFolded is the status of a run, and the reason if it has ended,
// from all its events.
func statusFolded(ctx context.Context, j *journal.Journal, tenant, runID string) (status, reason string, err error) {
	evs, _, err := j.Load(ctx, tenant, runID)
	if err != nil {
		return "", "", err
	}
	st, err := events.Fold(evs)
	switch {
	case err != nil:
		return "", "", fmt.Errorf("run %s: %w", runID, err)
	case st.Finished != nil:
		return journal.RunFinished, string(st.Finished.Reason), nil
	case st.IsParked:
		return journal.RunParked, "", nil
	}
	return journal.RunRunning, "", nil
}

// sortRuns puts the runs still going first, oldest update first, then the
// finished runs and rejected tasks, newest first.
func sortRuns(runs []listedRun) {
	ended := func(r listedRun) bool { return r.Status == journal.RunFinished || r.Status == statusRejected }
	slices.SortStableFunc(runs, func(a, b listedRun) int {
		af, bf := ended(a), ended(b)
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

// printRuns prints the counts of runs by status (and of the finished by
// reason), then at most limit of them (0: all) as a table.
func printRuns(w io.Writer, recs []listedRun, scope string, limit int, now time.Time) {
	if len(recs) == 0 {
		fmt.Fprintf(w, "no runs (%s)\n", scope)
		return
	}
	byStatus, byReason := map[string]int{}, map[string]int{}
	for _, r := range recs {
		byStatus[r.Status]++
		if r.Status == journal.RunFinished {
			byReason[cmp.Or(r.Reason, "?")]++
		}
	}
	var counts []string
	for _, s := range slices.Sorted(maps.Keys(byStatus)) {
		c := fmt.Sprintf("%s %d", s, byStatus[s])
		if s == journal.RunFinished {
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
	fmt.Fprintln(tw, "RUN\tTENANT\tAGENT\tSTATUS\tREASON\tEVENTS\tLAST CHANGE")
	for _, r := range shown {
		status := r.Status
		if r.Projected != "" {
			status += "*"
		}
		reason := cmp.Or(r.Reason, "-")
		if r.Status == statusRejected {
			reason = string(compact([]byte(printable(r.Rejection)), 80))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s ago\n", r.RunID, r.Tenant, cmp.Or(r.Agent, "-"), status, reason, r.LastSeq, now.Sub(r.Updated).Round(time.Second))
	}
	tw.Flush()
	if more := len(recs) - len(shown); more > 0 {
		fmt.Fprintf(w, "… and %d more (--limit 0 lists every run)\n", more)
	}
	behind := func(rs []listedRun) (n int) {
		for _, r := range rs {
			if r.Projected != "" {
				n++
			}
		}
		return n
	}
	if stale := behind(recs); stale > 0 {
		// The count is of every run matched, the marks only of those
		// listed: say how many of them the table shows.
		which := plural(stale, "run")
		if listed := behind(shown); listed < stale {
			which += fmt.Sprintf(" (%d of them listed)", listed)
		}
		fmt.Fprintf(w, "\n* %s: the projection's record is behind the run's events (a record not written yet, or a worker stopped before writing it: the next worker to take the run writes it); shown as the events say.\n", which)
	}
	fmt.Fprintln(w, "\nFrom the loopgate_runs projection; each run not finished there is checked against its last event. loopgate audit RUN replays a run's events.")
	if byStatus[statusRejected] > 0 {
		fmt.Fprintln(w, "Rejected tasks never became runs: they are read from their rejected events (the reason is the field at fault and why).")
	}
}
