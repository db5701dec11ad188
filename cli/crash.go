package cli

import (
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
)

// crashEnv names the fault-injection switch: LOOPGATE_CRASH_AT=<point>
// makes a serve or worker process exit at once, like a SIGKILL, the first
// time it reaches that point of a run. Points: before:<event type>,
// after:<event type> (started, proposed, validated, approval_requested,
// parked, approved, executing, executed, observed, finished, …),
// before:claim (a write's executing stored and its deadline checked, its
// operation not yet claimed in KV), before:side_effect (a write claimed,
// its tool not started),
// after:side_effect (a write's tool returned, nothing recorded yet),
// after:idempotency_record (recorded in KV, no executed event yet),
// before:decision (an approval checked, its decision not yet written to
// the approval's entry), after:approved (the decision recorded, the
// run's wake-up not yet published), deliver:approval (an approval message
// taken, not yet read) and before:load (a task or a wake-up taken, its run
// not yet read).
//
// LOOPGATE_CRASH_AT=freeze:<point> stops the process there instead
// (SIGSTOP to itself, as a frozen VM or a debugger would): it holds what it
// held, sends no heartbeat, and goes on where it was when something sends
// it SIGCONT. It is for soak tests; unset, the default, it does nothing.
const crashEnv = "LOOPGATE_CRASH_AT"

// freezePrefix marks a spec that freezes the process rather than ending it.
const freezePrefix = "freeze:"

// crashExitCode is what a process killed by the hook exits with.
const crashExitCode = 86

// crashHook returns the pool's Crash hook for the point named in spec, or
// nil when spec is empty.
func crashHook(spec string, log *slog.Logger) func(string) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil
	}
	if point, ok := strings.CutPrefix(spec, freezePrefix); ok {
		log.Warn("fault injection armed: this process will stop itself at a point", "point", point)
		var frozen atomic.Bool // once: after SIGCONT the process goes on for good
		return func(p string) {
			if p == point && frozen.CompareAndSwap(false, true) {
				log.Warn("fault injection: stopping this process", "point", point, "pid", os.Getpid())
				freeze()
			}
		}
	}
	log.Warn("fault injection armed: this process will exit at a crash point", "point", spec)
	return func(point string) {
		if point == spec {
			// No cleanup, no flush: a crash is a crash.
			os.Exit(crashExitCode)
		}
	}
}
