package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/loopgate/loopgate/events"
)

func runAudit(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate audit", flag.ContinueOnError)
	var (
		natsURL = fs.String("nats", "nats://127.0.0.1:4222", "NATS URL")
		tenant  = fs.String("tenant", "", "the run's tenant (default: any)")
		follow_ = fs.Bool("follow", false, "keep printing new events until the run finishes")
		asJSON  = fs.Bool("json", false, "print events as JSON lines (the stored envelopes)")
	)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate audit RUN_ID [--follow] [--json] [--nats URL] [--tenant T]")
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
	}
	if runID == "" || !events.ValidToken(runID) {
		fs.Usage()
		return exitError
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
		return follow(ctx, e, j, filter, *asJSON)
	}
	evs, err := j.Replay(ctx, filter)
	if err != nil {
		return fail(e, "read run %s: %v", runID, err)
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
	return exitOK
}

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }
