package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natsconn"
	"github.com/loopgate/loopgate/journal"
)

// publishTimeout bounds the publish of a task.
const publishTimeout = 30 * time.Second

func runSubmit(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate submit", flag.ContinueOnError)
	var (
		natsURL = fs.String("nats", defaultNATS, "NATS URL of a running loopgate")
		file    = fs.String("file", "", "task JSON file ('-' for stdin), the whole task: instead of --task-id, --tenant, --agent, --principal, --roles, --input, --dry-run and --session")
		tf      = registerTaskFlags(fs, "what the agent is asked to do")
		taskID  = fs.String("task-id", "", "client task id (default: a new UUID); resubmitting one finds its run")
		dryRun  = fs.Bool("dry-run", false, "preview writes without executing them")
		session = fs.String("session", "", "session id: the run sees the compacted conversation of the session's earlier runs")
		timeout = fs.Duration("timeout", 5*time.Minute, "how long to follow the run")
		asJSON  = fs.Bool("json", false, "print events as JSON lines")
		publish = fs.Bool("no-follow", false, "publish the task and print its run id, without following the run (all a user that may only publish tasks can do)")
	)
	if code, ok := parseOnlyFlags(fs, e, args); !ok {
		return code
	}
	if *timeout <= 0 {
		// Refused before the task is published: a follow that ends at
		// once would say the run was interrupted.
		return fail(e, "submit: --timeout must be positive (it bounds how long submit follows the run; the run itself goes on)")
	}
	var payload []byte
	var task events.Task
	if *file != "" {
		// The file is the whole task, sent as written: a task flag beside
		// it would be silently dropped.
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if taskFlagNames[f.Name] {
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			return fail(e, "submit: --file is the whole task; %s cannot be used with it (set them in the file)", strings.Join(given, ", "))
		}
		var err error
		if *file == "-" {
			payload, err = readAll(e.stdin)
		} else {
			payload, err = os.ReadFile(*file)
		}
		if err != nil {
			return fail(e, "read task: %v", err)
		}
		if err := json.Unmarshal(payload, &task); err != nil {
			return fail(e, "task file %s is not a task: %v", *file, err)
		}
		if task.TaskID == "" || task.Tenant == "" {
			return fail(e, "task file %s: task_id and tenant are required", *file)
		}
	} else {
		task = tf.task()
		task.TaskID, task.DryRun, task.SessionID = *taskID, *dryRun, *session
		if task.TaskID == "" {
			task.TaskID = uuid.NewString()
		}
		// Without HTML escapes, as events are stored: a task's input is
		// bounded in bytes (intake.max_input_bytes, max_task_bytes) as sent.
		payload, _ = events.EncodeData(task)
	}
	if !events.ValidToken(task.Tenant) {
		return fail(e, "tenant %q is not a valid subject token", task.Tenant)
	}
	if !events.ValidTaskID(task.TaskID) {
		// Workers would reject it, under a run id of their own making:
		// refuse it here, where the sender can fix it.
		return fail(e, "task_id %q (--task-id): want 1 to 128 letters, digits and, after the first, '.', '_', ':' or '-'", task.TaskID)
	}
	runID := events.RunID(task.Tenant, task.TaskID)
	// The publish has a deadline of its own: --timeout is how long to
	// follow the run, and a short one must not report as failed a task
	// that was stored. A refusal by the server ends it at once.
	pctx, pcancel := context.WithTimeout(ctx, publishTimeout)
	defer pcancel()
	refused := &clientRefusal{cancel: pcancel}
	var (
		nc  *nats.Conn
		js  jetstream.JetStream
		j   *journal.Journal
		err error
	)
	if *publish {
		nc, js, err = connectPublisher(*natsURL, refused.option())
	} else {
		// The journal is opened first: a user that may not read runs
		// learns so before anything is published.
		nc, js, j, err = connect(pctx, *natsURL, refused.option())
	}
	if err != nil {
		if v := refused.violation(); v != "" {
			return fail(e, "submit: %s refused this user reading runs (%s): nothing was submitted; a user that may only publish tasks submits with --no-follow", natsconn.RedactedURLs(*natsURL), v)
		}
		return fail(e, "%v", err)
	}
	defer nc.Close()
	ack, err := js.Publish(pctx, events.TaskSubject(task.Tenant), payload, jetstream.WithMsgID(taskMsgID(task.Tenant, task.TaskID)))
	if err != nil {
		if v := refused.violation(); v != "" {
			return fail(e, "submit: %s refused this user publishing a task of tenant %s (%s): nothing was submitted", natsconn.RedactedURLs(*natsURL), task.Tenant, v)
		}
		return fail(e, "publish task: %v", notStored(err, fmt.Sprintf("submit the same task again with --task-id %s (its task id makes that safe)", task.TaskID)))
	}
	pcancel()
	if *publish {
		return printSubmitted(e, task.TaskID, runID, ack.Duplicate, *asJSON, *natsURL)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if !*asJSON {
		dup := ""
		if ack.Duplicate {
			dup = " (duplicate task id: following the existing run)"
		}
		fmt.Fprintf(e.stdout, "submitted task %s as run %s%s\n\n", task.TaskID, runID, dup)
	}
	return follow(ctx, e, j, followed{runID: runID, filter: events.RunFilter(task.Tenant, runID), asJSON: *asJSON, natsURL: *natsURL, timeout: *timeout})
}

// printSubmitted reports a task published with --no-follow: its run id
// alone on stdout (or, with asJSON, a JSON line of task id, run id and
// whether the task id was a duplicate), and how to follow the run on
// stderr.
func printSubmitted(e env, taskID, runID string, duplicate, asJSON bool, natsURL string) int {
	if asJSON {
		b, _ := json.Marshal(struct {
			TaskID    string `json:"task_id"`
			RunID     string `json:"run_id"`
			Duplicate bool   `json:"duplicate"`
		}{taskID, runID, duplicate})
		fmt.Fprintln(e.stdout, string(b))
		return exitOK
	}
	fmt.Fprintln(e.stdout, runID)
	dup := ""
	if duplicate {
		dup = " (duplicate task id: the run is the existing one)"
	}
	fmt.Fprintf(e.stderr, "submitted task %s as run %s%s; follow it with: loopgate audit %s --follow%s\n", taskID, runID, dup, runID, natsFlag(natsURL))
	return exitOK
}

// connectPublisher connects as connect does, without opening the
// journal: a user that may only publish tasks has no right to read the
// events stream.
func connectPublisher(url string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	opts, err := authFromEnv().options(true)
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, nats.Name("loopgate-cli"), nats.Timeout(5*time.Second))
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", natsconn.RedactedURLs(url), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// clientRefusal holds the first permission violation the server reports
// on a client command's connection and cancels the operation waiting on
// it: a refused request is never answered, so it would otherwise end only
// at its timeout. Its handler replaces nats.go's default, which prints to
// the process's stderr what the command's error names. Safe for
// concurrent use.
type clientRefusal struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	first  string
}

func (r *clientRefusal) option() nats.Option {
	return nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			quietRefusals(nc, sub, err)
			return
		}
		r.mu.Lock()
		if r.first == "" {
			// The server's own words: Permissions Violation for Publish to "…".
			r.first = strings.TrimPrefix(err.Error(), nats.ErrPermissionViolation.Error()+": ")
		}
		r.mu.Unlock()
		r.cancel()
	})
}

// violation is the server's refusal, or "" if there was none.
func (r *clientRefusal) violation() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// taskMsgID is a task's Nats-Msg-Id: its tenant and task id. JetStream
// deduplicates across the whole LOOPGATE_WORK stream, and the run id is of
// tenant + task_id, so a bare task id would drop another tenant's task with
// the same id as a duplicate of this one. Neither a tenant nor a task id
// holds a '/', so no two tasks share one.
func taskMsgID(tenant, taskID string) string { return tenant + "/" + taskID }

// followed is what follow follows and how.
type followed struct {
	runID, filter string
	asJSON        bool
	natsURL       string // named in hints
	// timeout is what bounds the follow's context (0: nothing does),
	// named when it ends the follow first.
	timeout time.Duration
	// summary: the end is followed, as audit's, by each gated call's
	// story and where the run's time went.
	summary bool
}

// follow prints a run's events until it finishes or is rejected, and
// returns the exit code its end deserves. When the run parks it says how
// to answer what it waits for (on stderr with asJSON), and keeps
// following: the run goes on once someone decides.
func follow(ctx context.Context, e env, j *journal.Journal, f followed) int {
	tl := &timeline{w: e.stdout, asJSON: f.asJSON, width: 160, hints: e.stdout, natsURL: f.natsURL}
	if f.asJSON {
		tl.hints = e.stderr
	}
	var seen []events.Event
	for ev, err := range j.Watch(ctx, f.filter) {
		if err != nil {
			return fail(e, "follow run: %v", err)
		}
		tl.print(ev)
		if f.summary {
			seen = append(seen, ev)
		}
		switch ev.Type {
		case events.TypeRejected:
			return exitRejected
		case events.TypeFinished:
			tl.end(ev)
			if f.summary && !f.asJSON {
				summarize(e.stdout, seen, time.Now())
			}
			var d events.FinishedData
			if ev.Decode(&d) == nil && d.Reason == events.ReasonDone {
				return exitOK
			}
			return exitStopped
		}
	}
	if ctx.Err() != nil {
		return stoppedFollowing(e, ctx.Err(), f.runID, f.natsURL, f.timeout)
	}
	return fail(e, "follow run: the watch ended before the run did")
}

// stoppedFollowing says that a command stopped following run runID before
// the run ended, because its context ended with err (its timeout passed, or
// it was interrupted), that the run goes on all the same, and how to
// follow it again. A run is not the client's to stop: nothing a client
// does by leaving changes it.
func stoppedFollowing(e env, err error, runID, natsURL string, timeout time.Duration) int {
	why := "interrupted"
	if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
		why = fmt.Sprintf("--timeout %s passed", timeout)
	}
	return failCode(e, exitUnfinished, "%s: stopped following run %s, which has not ended and goes on without this command; follow it with: loopgate audit %s --follow%s",
		why, runID, runID, natsFlag(natsURL))
}

// taskFlagNames are submit's flags that build a task, which --file
// replaces: registerTaskFlags's and submit's own.
var taskFlagNames = map[string]bool{
	"tenant": true, "agent": true, "principal": true, "roles": true, "input": true,
	"task-id": true, "dry-run": true, "session": true,
}

// taskFlags are the flags that describe a task: submit's, and bench's for
// each task it publishes.
type taskFlags struct {
	tenant, agent, principal, roles, input *string
}

func registerTaskFlags(fs *flag.FlagSet, inputUsage string) taskFlags {
	return taskFlags{
		tenant:    fs.String("tenant", "cityops", "tenant"),
		agent:     fs.String("agent", "escalation-assistant", "agent profile"),
		principal: fs.String("principal", "dev@cityops", "principal id"),
		roles:     fs.String("roles", "operator", "principal roles, comma-separated"),
		input:     fs.String("input", "Show me the oldest open sanitation complaints and draft escalations for them.", inputUsage),
	}
}

// task is the task the flags describe, without a task id.
func (f taskFlags) task() events.Task {
	in, _ := events.EncodeData(*f.input)
	return events.Task{Tenant: *f.tenant, Agent: *f.agent, Input: in,
		Principal: events.Principal{ID: *f.principal, Roles: splitList(*f.roles)}}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
