package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
)

// expectedReason is how each CityOps scenario is meant to end; the demo
// exits non-zero if a scenario ends any other way.
var expectedReason = map[string]events.Reason{
	"happy":      events.ReasonDone,
	"runaway":    events.ReasonMaxSteps,
	"correction": events.ReasonDone,
	"slow":       events.ReasonDone,
	"dry-run":    events.ReasonDone,
	"repeat":     events.ReasonRepeatedCall,
	"invalid":    events.ReasonInvalidDecisions,
}

func runDemo(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate demo", flag.ContinueOnError)
	var (
		scenario = fs.String("scenario", "happy", "scenario: "+scenarioNames())
		keep     = fs.Bool("keep", false, "keep the temporary data directory (printed at the end)")
		logLevel = fs.String("log-level", "warn", "log level of the embedded stack")
		asJSON   = fs.Bool("json", false, "print events as JSON lines")
		interact = fs.Bool("interactive", false, "show each gated write's exact action and ask approve? [y/N] on stdin instead of approving it")
		approver = fs.String("approver", "supervisor@cityops", "who the demo approves as: try intern@cityops (may approve nothing) or dev@cityops (the task's own principal)")
	)
	if code, ok := parseOnlyFlags(fs, e, args); !ok {
		return code
	}
	sc, ok := cityops.ScenarioByName(*scenario)
	if !ok {
		return fail(e, "demo: unknown scenario %q; choose one of %s", *scenario, scenarioNames())
	}
	// The demo's approver signs with its example key: the example policy
	// requires signed approvals.
	key, err := demoKey(*approver)
	if err != nil {
		return fail(e, "demo: %v", err)
	}
	if key != nil {
		defer key.Wipe()
	}
	e.stderr = &syncWriter{w: e.stderr} // the workers log there too
	log, err := newLogger(e.stderr, "text", *logLevel)
	if err != nil {
		return fail(e, "%v", err)
	}
	cfg, err := loadConfig("")
	if err != nil {
		return fail(e, "%v", err)
	}
	dir, err := os.MkdirTemp("", "loopgate-demo-")
	if err != nil {
		return fail(e, "demo: %v", err)
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	groupCommit, _ := chooseGroupCommit("auto", true, "always", 1) // as serve on its embedded server
	s, err := startStack(ctx, stackOptions{cfg: cfg, dataDir: dir, workers: 2, log: log, syncInterval: "always", groupCommit: groupCommit})
	if err != nil {
		return fail(e, "%v", err)
	}
	defer s.close(context.Background())

	input, _ := json.Marshal(sc.Input)
	task := events.Task{
		TaskID:    "demo-" + sc.Name + "-" + uuid.NewString()[:8],
		Tenant:    "cityops",
		Principal: events.Principal{ID: "dev@cityops", Roles: []string{"operator"}},
		Agent:     sc.Agent,
		Input:     input,
		DryRun:    sc.DryRun,
	}
	payload, _ := json.Marshal(task)
	runID := events.RunID(task.Tenant, task.TaskID)
	if !*asJSON {
		fmt.Fprintf(e.stdout, "loopgate demo — scenario %q: %s\n", sc.Name, sc.Description)
		fmt.Fprintf(e.stdout, "embedded nats-server %s, data in %s\n", s.srv.ClientURL(), dir)
		fmt.Fprintf(e.stdout, "task %s → run %s (agent %s, principal %s)\n", task.TaskID, runID, task.Agent, task.Principal.ID)
		fmt.Fprintf(e.stdout, "input: %s\n", sc.Input)
		signed := "signed with its example key from examples/cityops/keys"
		if key == nil {
			signed = "unsigned: the example has no key for " + printable(*approver)
		}
		if *interact {
			fmt.Fprintf(e.stdout, "gated writes: you decide each one as %s at the prompt below, %s\n\n", printable(*approver), signed)
		} else {
			fmt.Fprintf(e.stdout, "gated writes: the demo supervisor %s approves each one through the approvals subject, %s (--interactive to decide yourself)\n\n",
				printable(*approver), signed)
		}
	}
	timeout := 2 * time.Minute
	if *interact {
		timeout = time.Hour // a person is answering
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The demo's approver writes beside the timeline, or to stderr when
	// stdout is JSON lines.
	aw := e.stdout
	if *asJSON {
		aw = e.stderr
	}
	var prompt *prompter
	if *interact {
		prompt = newPrompter(e.stdin, aw)
		defer prompt.stop()
	}
	sup := newDemoApprover(*approver, key, s.js, aw, prompt)
	if _, err := s.js.Publish(ctx, events.TaskSubject(task.Tenant), payload, jetstream.WithMsgID(taskMsgID(task.Tenant, task.TaskID))); err != nil {
		return fail(e, "demo: publish task: %v", err)
	}
	tl := &timeline{w: e.stdout, asJSON: *asJSON, width: 160}
	var finished *events.FinishedData
	for ev, err := range s.journal.Watch(ctx, events.RunFilter(task.Tenant, runID)) {
		if err != nil {
			return fail(e, "demo: watch run: %v", err)
		}
		tl.print(ev)
		if code, done, err := sup.observe(ctx, ev); done {
			return failCode(e, code, "demo: %v", err)
		} else if err != nil {
			return fail(e, "demo: %v", err)
		}
		if ev.Type == events.TypeFinished {
			tl.end(ev)
			finished = new(events.FinishedData)
			_ = ev.Decode(finished)
			break
		}
		if ev.Type == events.TypeRejected {
			break
		}
	}
	if finished == nil {
		return fail(e, "demo: run did not finish: %v", ctx.Err())
	}
	if !*asJSON {
		n := listOutbox(e.stdout, s.outbox)
		if finished.Final != nil && len(finished.Final.DraftsCreated) != n && !sc.DryRun {
			fmt.Fprintf(e.stdout, "note: the answer claims %s and the outbox holds %d: a final answer is the model's word, the trail above is what happened\n",
				plural(len(finished.Final.DraftsCreated), "draft"), n)
		}
		if *keep {
			fmt.Fprintf(e.stdout, "\nreplay it any time: loopgate serve --data %s, then loopgate audit %s\n", dir, runID)
			fmt.Fprintf(e.stdout, "data kept in %s\n", dir)
		} else {
			// The data goes with the demo: say how to keep it.
			fmt.Fprintf(e.stdout, "\nto replay it later, run the demo with --keep: its data is removed now\n")
		}
	}
	want := expectedReason[sc.Name]
	if *interact && want == events.ReasonDone && finished.Reason == events.ReasonCompletionUnverified {
		// The script's final answer claims every draft it proposed,
		// whatever the human at the prompt decided: loopgate refusing
		// the claim of a denied draft is the demo working.
		want = finished.Reason
	}
	if want != "" && finished.Reason != want {
		fmt.Fprintf(e.stderr, "loopgate demo: scenario %s ended %s, expected %s\n", sc.Name, finished.Reason, want)
		return exitStopped
	}
	return exitOK
}

// listOutbox shows the drafts a run wrote, with their status line, and
// returns how many there are.
func listOutbox(w io.Writer, dir string) int {
	entries, _ := os.ReadDir(dir)
	if len(entries) == 0 {
		fmt.Fprintln(w, "\noutbox: empty — nothing was written")
		return 0
	}
	fmt.Fprintf(w, "\noutbox (%s): %s\n", dir, plural(len(entries), "draft"))
	for _, ent := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, ent.Name()))
		first, _, _ := strings.Cut(string(b), "\n")
		fmt.Fprintf(w, "  %s  %s\n", ent.Name(), first)
	}
	return len(entries)
}

func scenarioNames() string {
	var names []string
	for _, s := range cityops.Scenarios() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}
