// Command cityops-tools serves the CityOps example's tools over NATS, as a
// process of their own: it alone holds the complaints data, the outbox the
// drafts go to and the CityOps credentials (CITYOPS_TOOLS_TOKEN), and
// loopgate workers configured with examples/cityops/remote.yaml call it by
// request/reply.
//
//	CITYOPS_TOOLS_TOKEN=example cityops-tools --nats nats://127.0.0.1:4222 --outbox ./cityops-outbox
//
// Every tool is an endpoint of one micro service, "cityops-tools", on
// <prefix>.<tool> (default cityops.tools.lookup_complaints, …), in one queue
// group: start more processes to share the calls. The tools are the Go
// builtins of examples/cityops, wrapped with toolsvc.Builtin.
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/internal/natsconn"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/toolsvc"
)

// tokenEnv names the variable holding the CityOps credentials.
const tokenEnv = "CITYOPS_TOOLS_TOKEN"

// version of the service, in $SRV.INFO.
const version = "1.0.0"

// ownerSchema is complaint_owner's argument schema: the same contract as
// its manifest in examples/cityops/remote.yaml (it has no schema file).
const ownerSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{"id":{"type":"string","minLength":1,"maxLength":64}}}`

// served lists the tools and their argument schemas (a path in
// cityops.Files, or the schema itself).
var served = []struct{ name, schema string }{
	{cityops.ToolLookupComplaints, "schemas/lookup_complaints.schema.json"},
	{cityops.ToolSlowLookup, "schemas/lookup_complaints.schema.json"},
	{cityops.ToolGetProcedure, "schemas/get_procedure.schema.json"},
	{cityops.ToolDraftEscalation, "schemas/draft_escalation.schema.json"},
	{cityops.ToolDraftStatus, "schemas/draft_status.schema.json"},
	{cityops.ResolverComplaintOwner, ownerSchema},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole command: it serves until ctx ends and returns the exit
// code (0 after a clean stop, 1 on any error, 2 on bad usage).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cityops-tools", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// No default value in the flag: the usage text prints defaults, and
	// $NATS_URL may carry a password.
	natsURL := fs.String("nats", "", "NATS URL(s), comma-separated (default $NATS_URL or "+nats.DefaultURL+")")
	outbox := fs.String("outbox", "./cityops-outbox", "directory draft_escalation writes drafts to")
	prefix := fs.String("prefix", "cityops.tools", "subject prefix: each tool answers on <prefix>.<tool>")
	queue := fs.String("queue", "", `queue group of every endpoint (default "q", micro's default)`)
	only := fs.String("tools", "", "comma-separated tools to serve (default all: "+strings.Join(names(), ",")+")")
	slow := fs.Duration("slow-delay", 30*time.Second, "how long slow_lookup hangs")
	maxConcurrent := fs.Int("max-concurrent", 64, "calls handled at once; more are answered 503 (transient)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	*natsURL = cmp.Or(*natsURL, getenv("NATS_URL"), nats.DefaultURL)
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "cityops-tools: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// The credentials a real CityOps backend would take. They stay in this
	// process: no reply, header or $SRV answer carries them, and the log
	// names them by a fingerprint.
	token := getenv(tokenEnv)
	if token == "" {
		fmt.Fprintf(stderr, "cityops-tools: %s is not set: this process holds the CityOps credentials (any value will do for the example)\n", tokenEnv)
		return 2
	}
	want, err := selected(*only)
	if err != nil {
		fmt.Fprintf(stderr, "cityops-tools: --tools: %v\n", err)
		return 2
	}

	builtins := tools.Builtins{}
	if err := cityops.Register(builtins, cityops.Options{Outbox: *outbox, SlowDelay: *slow}); err != nil {
		fmt.Fprintf(stderr, "cityops-tools: %v\n", err)
		return 1
	}
	// Liveness: a tool service on a server that stopped answering would
	// leave every call to its tools to time out until its pings noticed.
	nc, err := nats.Connect(*natsURL, append(natsconn.Liveness(log), nats.Name("cityops-tools"), nats.MaxReconnects(-1))...)
	if err != nil {
		fmt.Fprintf(stderr, "cityops-tools: connect to %s: %v\n", natsconn.RedactedURLs(*natsURL), err)
		return 1
	}
	defer nc.Close()

	svc, err := toolsvc.New(nc, &toolsvc.Config{
		Name:          "cityops-tools",
		Version:       version,
		Description:   "CityOps 311 tools: complaints, procedures, escalation drafts",
		QueueGroup:    *queue,
		MaxConcurrent: *maxConcurrent,
		Logger:        log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "cityops-tools: %v\n", err)
		return 1
	}
	var subjects []string
	for _, t := range served {
		if !want[t.name] {
			continue
		}
		schema, err := argsSchema(t.schema)
		if err != nil {
			fmt.Fprintf(stderr, "cityops-tools: %s: %v\n", t.name, err)
			return 1
		}
		subject := *prefix + "." + t.name
		if err := svc.Add(t.name, subject, toolsvc.Builtin(builtins[t.name]), toolsvc.ArgsSchema(schema)); err != nil {
			fmt.Fprintf(stderr, "cityops-tools: %v\n", err)
			return 1
		}
		subjects = append(subjects, subject)
	}
	if err := svc.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "cityops-tools: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "cityops-tools serving %d tools on %s: %s\n", len(subjects), nc.ConnectedUrlRedacted(), strings.Join(subjects, " "))
	log.Info("serving", "tools", len(subjects), "outbox", *outbox, "credentials", fingerprint(token))

	<-ctx.Done()
	log.Info("stopping: finishing calls in progress")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := 0
	if err := svc.Stop(sctx); err != nil {
		log.Warn("stop", "err", err)
		code = 1
	}
	if err := nc.Drain(); err != nil {
		log.Warn("drain", "err", err)
	}
	return code
}

// fingerprint names a secret in logs without showing it.
func fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:4])
}

func names() []string {
	var out []string
	for _, t := range served {
		out = append(out, t.name)
	}
	return out
}

// selected parses --tools.
func selected(list string) (map[string]bool, error) {
	want := map[string]bool{}
	if strings.TrimSpace(list) == "" {
		for _, n := range names() {
			want[n] = true
		}
		return want, nil
	}
	for n := range strings.SplitSeq(list, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(names(), n) {
			return nil, fmt.Errorf("unknown tool %q (known: %s)", n, strings.Join(names(), ", "))
		}
		want[n] = true
	}
	return want, nil
}

// argsSchema returns a schema given inline or as a path in cityops.Files.
func argsSchema(s string) (json.RawMessage, error) {
	if strings.HasPrefix(s, "{") {
		return json.RawMessage(s), nil
	}
	b, err := cityops.Files.ReadFile(s)
	if err != nil {
		return nil, err
	}
	return b, nil
}
