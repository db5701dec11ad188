package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/events"
)

// runBench drives a running deployment with tasks, from outside, and says
// how fast its runs went and whether every one of them ended whole: the
// tool for "kill workers and servers under load, and check nothing was
// lost, stuck or done twice", and for setting loopgate's event rate
// against the raw append rate of the same servers (--raw).
func runBench(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate bench", flag.ContinueOnError)
	var (
		natsURL  = fs.String("nats", defaultNATS, "NATS URL(s) of a running loopgate, comma-separated: the bench follows the cluster when a server dies")
		runs     = fs.Int("runs", 100, "tasks to submit (each a run)")
		conc     = fs.Int("concurrency", 16, "runs in flight at once: a run that ends makes room for the next task")
		tf       = registerTaskFlags(fs, "what each run is asked to do")
		approver = fs.String("approver", "supervisor@cityops", "approve every question of the bench's runs as this approver once the run parks on it (\"\": leave them to humans)")
		keyFile  = fs.String("key", "", "the approver's nkey seed file (default: the CityOps example's key for --approver, if it has one)")
		prefix   = fs.String("prefix", "", "task id prefix: tasks are <prefix>-1, <prefix>-2, … (default: bench- and a random id; a prefix used before names runs that exist, which this bench does not see again)")
		raw      = fs.Bool("raw", false, "first measure raw conditional appends (--concurrency writers, 300-byte messages) on a scratch stream made like LOOPGATE_EVENTS, and set the event rate against it")
		rawFor   = fs.Duration("raw-for", 5*time.Second, "how long --raw appends")
		timeout  = fs.Duration("timeout", 10*time.Minute, "stop waiting for the runs after this long; runs not ended by then are reported stuck")
		progress = fs.Duration("progress", 5*time.Second, "print the runs ended so far this often (0: only the report; never with --json)")
		asJSON   = fs.Bool("json", false, "print the report as one JSON object")
	)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate bench [--runs N] [--concurrency C] [--raw] [--approver ID] [--key FILE] [--progress D] [--timeout D] [--nats URL[,URL…]] [--json] [task flags]")
		fs.PrintDefaults()
	}
	if code, ok := parseOnlyFlags(fs, e, args); !ok {
		return code
	}
	switch {
	case *runs < 1:
		return fail(e, "--runs %d: want at least 1", *runs)
	case *conc < 1:
		return fail(e, "--concurrency %d: want at least 1", *conc)
	case *timeout <= 0:
		return fail(e, "--timeout %s: want a positive duration", *timeout)
	case *progress < 0:
		return fail(e, "--progress %s: want 0 (off) or a positive duration", *progress)
	case *raw && *rawFor <= 0:
		return fail(e, "--raw-for %s: want a positive duration", *rawFor)
	case !events.ValidToken(*tf.tenant):
		return fail(e, "--tenant %q is not a valid subject token", *tf.tenant)
	}
	if *prefix == "" {
		*prefix = "bench-" + uuid.NewString()[:8]
	}
	if !events.ValidToken(*prefix) {
		return fail(e, "--prefix %q: use letters, digits, '-' and '_'", *prefix)
	}
	var key nkeys.KeyPair
	if *approver != "" {
		var err error
		if *keyFile != "" {
			key, err = readKey(e, *keyFile)
		} else {
			key, err = demoKey(*approver)
		}
		if err != nil {
			return fail(e, "--key: %v", err)
		}
	}

	// A bench is meant to outlive servers dying: reconnect for as long as it runs.
	nc, js, j, err := connect(ctx, *natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fail(e, "%v", err)
	}
	defer nc.Close()

	task := tf.task()
	// The bench follows the events stream from its end: runs of a prefix
	// used before would never show there, and be reported lost.
	first := events.RunID(task.Tenant, *prefix+"-1")
	if _, used, err := j.Last(ctx, task.Tenant, first); err != nil {
		return fail(e, "%v", err)
	} else if used {
		return fail(e, "--prefix %q was used before: run %s (task %s-1) exists; choose another prefix", *prefix, first, *prefix)
	}
	rep := benchReport{NATS: nc.ConnectedUrlRedacted(), Tenant: task.Tenant, Agent: task.Agent, Runs: *runs, Concurrency: *conc, Prefix: *prefix, Approver: *approver}
	if !*asJSON {
		against := rep.NATS
		if n := len(strings.Split(*natsURL, ",")); n > 1 {
			// It follows the others if this one dies.
			against += fmt.Sprintf(" (connected; %d servers given)", n)
		}
		fmt.Fprintf(e.stdout, "loopgate bench: %s of %s for %s, %d at once, against %s (task ids %s-1…)\n",
			plural(*runs, "run"), printable(task.Agent), task.Tenant, *conc, against, *prefix)
	}
	if *raw {
		r, err := measureRaw(ctx, js, *conc, *rawFor)
		if err != nil {
			if refused := refusal(nc, err); refused != nil {
				err = refused
			}
			return fail(e, "raw appends: %v", err)
		}
		rep.Raw = &r
		if !*asJSON {
			fmt.Fprintf(e.stdout, "raw conditional appends: %s, %d-byte messages, %s storage, %d replica(s): %.0f/s over %.1f s\n",
				plural(r.Writers, "writer"), r.Bytes, strings.ToLower(r.Storage), r.Replicas, r.PerSec, r.Elapsed.Seconds())
		}
	}

	lctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	l := newLoad(js, task, *prefix, *runs, *conc, *approver, key)
	if *progress > 0 && !*asJSON {
		fmt.Fprintln(e.stdout)
		l.progress, l.progressEvery = e.stdout, *progress
	}
	if err := l.run(lctx); err != nil {
		if refused := refusal(nc, err); refused != nil {
			err = refused
		}
		return fail(e, "%v", err)
	}
	// Interrupted (Ctrl-C, SIGTERM), not timed out: the runs not ended
	// were only not waited for.
	rep.Interrupted = ctx.Err() != nil
	rep.fill(l)
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		rep.print(e.stdout)
	}
	switch {
	case rep.whole():
		return exitOK
	case rep.Interrupted && len(rep.Problems)+len(rep.Refused) == 0 && rep.endedDone():
		return exitUnfinished
	}
	return exitStopped
}

// benchReport is what loopgate bench found.
type benchReport struct {
	NATS        string     `json:"nats"`
	Tenant      string     `json:"tenant"`
	Agent       string     `json:"agent"`
	Prefix      string     `json:"prefix"`
	Approver    string     `json:"approver,omitempty"`
	Runs        int        `json:"runs"`
	Concurrency int        `json:"concurrency"`
	Raw         *rawResult `json:"raw,omitempty"`

	Submitted int           `json:"submitted"`
	Ended     int           `json:"ended"`
	Elapsed   time.Duration `json:"elapsed_ns"` // first task published → last run ended
	Events    int           `json:"events"`     // of the runs that ended
	ToolSteps int           `json:"tool_steps"` // of the runs that ended
	RunsPerS  float64       `json:"runs_per_sec"`
	EventsPS  float64       `json:"events_per_sec"`
	StepsPS   float64       `json:"tool_steps_per_sec"`
	XRaw      float64       `json:"x_raw,omitempty"` // events/s over raw appends/s
	// RunTime is each ended run's time from its task's publish to its end:
	// p50, p95, max.
	RunTime [3]time.Duration `json:"run_time_ns"`
	// EndsPerSecond counts the runs that ended in each second since the
	// first task: a dip shows where servers or workers died.
	EndsPerSecond []int          `json:"ends_per_second"`
	Reasons       map[string]int `json:"reasons"` // finished reasons, and "rejected"
	Approvals     int            `json:"approvals_sent"`
	Refused       []string       `json:"approvals_refused,omitempty"`
	PublishRetry  int            `json:"publishes_retried"`
	Lost          []string       `json:"lost,omitempty"`  // submitted, no event at all
	Stuck         []string       `json:"stuck,omitempty"` // started, not ended
	// Interrupted says bench was stopped (Ctrl-C, SIGTERM) before every
	// run ended: the runs it did not wait for are Unfinished, neither lost
	// nor stuck (those it parked wait for approvals it no longer sends).
	Interrupted bool                `json:"interrupted,omitempty"`
	Unfinished  []string            `json:"unfinished,omitempty"`
	Problems    map[string][]string `json:"problems,omitempty"` // by run id: what its trail breaks
}

func (rep *benchReport) fill(l *load) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rep.Reasons = map[string]int{}
	rep.Problems = map[string][]string{}
	var times []time.Duration
	for _, r := range l.order {
		if r.submitted.IsZero() {
			continue
		}
		rep.Submitted++
		v := r.check.Verdict()
		if len(v.Problems) > 0 {
			rep.Problems[r.runID] = v.Problems
		}
		switch {
		case v.Events == 0 && rep.Interrupted:
			rep.Unfinished = append(rep.Unfinished, fmt.Sprintf("run %s (task %s): not started yet", r.runID, r.taskID))
			continue
		case v.Events == 0:
			rep.Lost = append(rep.Lost, fmt.Sprintf("run %s (task %s): no event", r.runID, r.taskID))
			continue
		case !v.Finished():
			state := "running, last event " + string(r.lastType)
			if v.Parked {
				state = "parked"
			}
			line := fmt.Sprintf("run %s (task %s): %s after %s", r.runID, r.taskID, state, plural(v.Events, "event"))
			if rep.Interrupted {
				rep.Unfinished = append(rep.Unfinished, line)
			} else {
				rep.Stuck = append(rep.Stuck, line)
			}
			continue
		case v.End == events.TypeRejected:
			rep.Reasons["rejected"]++
		default:
			rep.Reasons[string(v.Reason)]++
		}
		if !r.ended.IsZero() {
			// The rates are of the runs that ended, over the time they
			// took: the events of a run still going (stuck, or waiting
			// for a human) used to count too, in a window that does not
			// hold all of them, and lifted events/s of a failed bench.
			rep.Events += v.Events
			rep.ToolSteps += r.executed
			rep.Ended++
			times = append(times, r.ended.Sub(r.submitted))
			if s := int(r.ended.Sub(l.began) / time.Second); s >= 0 {
				for len(rep.EndsPerSecond) <= s {
					rep.EndsPerSecond = append(rep.EndsPerSecond, 0)
				}
				rep.EndsPerSecond[s]++
			}
		}
	}
	rep.Approvals, rep.Refused, rep.PublishRetry = l.answered, slices.Clone(l.refused), l.pubErrs+l.ansErrs
	if rep.Ended > 0 {
		rep.Elapsed = l.last.Sub(l.began)
		secs := rep.Elapsed.Seconds()
		rep.RunsPerS, rep.EventsPS, rep.StepsPS = float64(rep.Ended)/secs, float64(rep.Events)/secs, float64(rep.ToolSteps)/secs
		if rep.Raw != nil && rep.Raw.PerSec > 0 {
			rep.XRaw = rep.EventsPS / rep.Raw.PerSec
		}
		slices.Sort(times)
		at := func(q float64) time.Duration { return times[min(len(times)-1, int(q*float64(len(times))))] }
		rep.RunTime = [3]time.Duration{at(0.5), at(0.95), times[len(times)-1]}
	}
}

// whole reports whether every run was submitted, ended done and left a
// trail without a problem.
func (rep *benchReport) whole() bool {
	return rep.Submitted == rep.Runs && rep.Reasons[string(events.ReasonDone)] == rep.Runs &&
		len(rep.Lost)+len(rep.Stuck)+len(rep.Unfinished)+len(rep.Problems)+len(rep.Refused) == 0
}

// endedDone reports whether every run that ended ended done.
func (rep *benchReport) endedDone() bool {
	n := 0
	for _, c := range rep.Reasons {
		n += c
	}
	return rep.Reasons[string(events.ReasonDone)] == n
}

// benchListed is how many lost, stuck or broken runs the text report
// names; --json has them all.
const benchListed = 10

func (rep *benchReport) print(w io.Writer) {
	fmt.Fprintln(w)
	if rep.Ended == 0 {
		fmt.Fprintf(w, "no run ended (%d submitted)\n", rep.Submitted)
	} else {
		line := fmt.Sprintf("%s ended in %.1f s: %.1f runs/s, %.0f events/s", plural(rep.Ended, "run"), rep.Elapsed.Seconds(), rep.RunsPerS, rep.EventsPS)
		if rep.Raw != nil {
			line += fmt.Sprintf(" (%.2f × raw)", rep.XRaw)
		}
		fmt.Fprintf(w, "%s, %.0f tool steps/s\n", line, rep.StepsPS)
		fmt.Fprintf(w, "run time (task published → run ended): p50 %s, p95 %s, max %s\n",
			rep.RunTime[0].Round(time.Millisecond), rep.RunTime[1].Round(time.Millisecond), rep.RunTime[2].Round(time.Millisecond))
		if len(rep.EndsPerSecond) > 2 {
			inner := slices.Clone(rep.EndsPerSecond[1 : len(rep.EndsPerSecond)-1]) // whole seconds of steady load
			slices.Sort(inner)
			low := slices.Index(rep.EndsPerSecond[1:len(rep.EndsPerSecond)-1], inner[0]) + 1
			fmt.Fprintf(w, "runs ended per second: median %d, lowest %d (from +%ds), highest %d\n",
				inner[len(inner)/2], inner[0], low, inner[len(inner)-1])
		}
	}
	if rep.Approvals > 0 || rep.Approver != "" {
		fmt.Fprintf(w, "approvals sent as %s: %d", printable(rep.Approver), rep.Approvals)
		if len(rep.Refused) > 0 {
			fmt.Fprintf(w, ", %d refused", len(rep.Refused))
		}
		fmt.Fprintln(w)
	}
	if rep.PublishRetry > 0 {
		fmt.Fprintf(w, "publishes sent again after JetStream did not take them: %d\n", rep.PublishRetry)
	}
	var reasons []string
	for _, r := range slices.Sorted(maps.Keys(rep.Reasons)) {
		reasons = append(reasons, fmt.Sprintf("%s %d", r, rep.Reasons[r]))
	}
	if len(reasons) > 0 {
		fmt.Fprintf(w, "ended: %s\n", strings.Join(reasons, ", "))
	}
	fmt.Fprintf(w, "trails checked: %s, %d with problems; lost %d, stuck %d, not submitted %d\n",
		plural(rep.Submitted, "run"), len(rep.Problems), len(rep.Lost), len(rep.Stuck), rep.Runs-rep.Submitted)
	if rep.Interrupted {
		fmt.Fprintf(w, "interrupted: %s had not ended, neither lost nor stuck: bench stopped waiting for them; they go on (the parked ones wait for approvals bench no longer sends: loopgate pending)\n",
			plural(len(rep.Unfinished), "run"))
	}
	list := func(title string, lines []string) {
		for i, s := range lines {
			if i == benchListed {
				fmt.Fprintf(w, "  … %d more (--json lists them all)\n", len(lines)-i)
				break
			}
			fmt.Fprintf(w, "  %s %s\n", title, printable(s))
		}
	}
	list("lost:", rep.Lost)
	list("stuck:", rep.Stuck)
	list("unfinished:", rep.Unfinished)
	list("refused:", rep.Refused)
	var problems []string
	for _, id := range slices.Sorted(maps.Keys(rep.Problems)) {
		for _, p := range rep.Problems[id] {
			problems = append(problems, "run "+id+": "+p)
		}
	}
	list("problem:", problems)
	if rep.whole() {
		fmt.Fprintf(w, "every run ended done, with a whole trail and no call taking effect twice\n")
	}
}
