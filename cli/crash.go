package cli

import (
	"log/slog"
	"os"
	"strings"
)

// crashEnv names the fault-injection switch: LOOPGATE_CRASH_AT=<point>
// makes a serve or worker process exit at once, like a SIGKILL, the first
// time it reaches that point of a run. Points: before:<event type>,
// after:<event type> (started, proposed, validated, approval_requested,
// parked, approved, executing, executed, observed, finished, …),
// after:side_effect (a write's tool returned, nothing recorded yet) and
// after:idempotency_record (recorded in KV, no executed event yet). It is
// for soak tests; unset, the default, it does nothing.
const crashEnv = "LOOPGATE_CRASH_AT"

// crashExitCode is what a process killed by the hook exits with.
const crashExitCode = 86

// crashHook returns the pool's Crash hook for the point named in spec, or
// nil when spec is empty.
func crashHook(spec string, log *slog.Logger) func(string) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil
	}
	log.Warn("fault injection armed: this process will exit at a crash point", "point", spec)
	return func(point string) {
		if point == spec {
			// No cleanup, no flush: a crash is a crash.
			os.Exit(crashExitCode)
		}
	}
}
