// Package cli is the loopgate command line. Each subcommand is a function
// that takes its arguments and writes to injected streams, so tests run
// them against buffers; cmd/loopgate only wires the process to Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/loopgate/loopgate/worker"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1 // bad usage, bad config, infrastructure failure
	exitStopped  = 2 // the run stopped for a reason other than done
	exitRejected = 3 // the task was rejected at intake
	// exitApprovalRejected: loopgate recorded an approval message as
	// deciding nothing (approval_rejected: not_authorized, self_approval,
	// not_pending, …).
	exitApprovalRejected = 4
	// exitUnfinished: the command stopped following a run before the run
	// ended (--timeout, Ctrl-C, SIGTERM); the run goes on without it.
	exitUnfinished = 5
)

// defaultNATS is where the client commands look for a loopgate: serve's
// default --listen.
const defaultNATS = "nats://127.0.0.1:4222"

// env is what every subcommand writes to and reads from.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

type command struct {
	name, summary string
	run           func(ctx context.Context, e env, args []string) int
}

func commands() []command {
	return []command{
		{"demo", "run a CityOps scenario end to end on an embedded server and show its timeline", runDemo},
		{"serve", "run workers, embedding a nats-server unless --nats is given", runServe},
		{"worker", "run workers only, against an external NATS (--nats required)", runWorker},
		{"submit", "publish a task, follow its run to the end, print the answer", runSubmit},
		{"audit", "replay one run's events from the stream", runAudit},
		{"bench", "drive a running deployment with tasks; report runs/s, events/s against raw appends (--raw), and any run lost, stuck or broken", runBench},
		{"runs", "count the runs by status and stop reason, and list them (stuck ones first)", runRunsList},
		{"pending", "list the calls waiting for a human, each with its exact action", runPending},
		{"approve", "approve one pending call (or answer an unknown outcome with --decision)", runApprove},
		{"deny", "deny one pending call, with a reason the model will see", runDeny},
		{"cancel", "cancel a run: it stops at its next boundary (at once if parked), finished cancelled", runCancel},
		{"approval-payload", "print a signed approval (or denial) message and the nats pub line that sends it", runApprovalPayload},
		{"keys", "make an approver's signing key pair (keys new), or show a seed's public key", runKeys},
		{"tools", "list tool manifests and, with --nats, the tool services found and any mismatch", runTools},
		{"version", "print loopgate's version, the revision it was built from and the Go version", runVersion},
	}
}

// Main runs the command line and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := env{stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitError
		}
		return exitOK
	}
	if args[0] == "--version" {
		return runVersion(ctx, e, args[1:])
	}
	var names []string
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
		names = append(names, c.name)
	}
	fmt.Fprintf(stderr, "loopgate: unknown command %q%s\nRun 'loopgate help' for the commands.\n", args[0], didYouMean(args[0], names, "%q"))
	return exitError
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "loopgate runs AI agents as bounded, audited state machines on NATS JetStream.")
	fmt.Fprintln(w, "\nUsage: loopgate <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'loopgate <command> -h' for a command's flags.")
}

// parseFlags parses a subcommand's flags. It returns false when the
// command should exit with code: after -h, having printed the usage to
// stderr; after a bad flag, having printed two lines there (flagError),
// not the whole usage.
func parseFlags(fs *flag.FlagSet, e env, args []string) (code int, ok bool) {
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(e.stderr)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return exitOK, false
	}
	fmt.Fprintln(e.stderr, flagError(fs, err))
	return exitError, false
}

// parseOnlyFlags is parseFlags for a command that takes no positional
// arguments. Go's flag package stops at the first one and leaves the rest
// unread, so a stray word would silently drop every flag after it
// (loopgate serve extra --data /srv/x served ./loopgate-data): refuse it.
func parseOnlyFlags(fs *flag.FlagSet, e env, args []string) (code int, ok bool) {
	if code, ok := parseFlags(fs, e, args); !ok {
		return code, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "%s: unexpected argument %q (the flags after it would not be read)\nRun '%s -h' for its flags.\n", fs.Name(), fs.Arg(0), fs.Name())
		return exitError, false
	}
	return 0, true
}

// parseInterspersed parses flags that may come before, between or after
// positional arguments (loopgate approve RUN CALL --as ID), and returns
// the positional ones.
func parseInterspersed(fs *flag.FlagSet, e env, args []string) (pos []string, code int, ok bool) {
	for {
		if code, ok := parseFlags(fs, e, args); !ok {
			return nil, code, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		// After "--" everything is positional.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), 0, true
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func fail(e env, format string, args ...any) int {
	return failCode(e, exitError, format, args...)
}

// notStored explains a publish that JetStream refused for an outage of its
// store (worker.StoreUnavailable: full, or no leader to answer): the raw API
// error names a code, not that nothing was stored, nor what to do. again
// says how to send it again.
func notStored(err error, again string) error {
	if !worker.StoreUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w\nJetStream cannot store anything now (its store is full, or its cluster has no leader to answer): nothing was stored; make room or wait, then %s", err, again)
}

// failCode prints an error like fail and returns code.
func failCode(e env, code int, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(e.stderr, "loopgate: "+strings.TrimSpace(msg))
	return code
}
