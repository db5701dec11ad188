package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/internal/natsconn"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
)

// serveFlags are shared by serve and worker.
type serveFlags struct {
	configPath   string
	listen       string
	data         string
	workers      int
	natsURL      string
	natsConfig   string   // embedded server's nats-server config file
	auth         natsAuth // how to connect to a server that requires it
	logFormat    string
	logLevel     string
	syncInterval string
	replicas     int
	groupCommit  string
	ackWait      time.Duration
	// metricsListen is where /metrics, /healthz and /readyz are served;
	// empty: nowhere.
	metricsListen string
	// set holds the flags given on the command line: they override the
	// config file's server section even when zero or empty, so that
	// --workers 0 is refused rather than read as "not given".
	set map[string]bool
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.configPath, "config", "", "config file (default: the built-in CityOps example)")
	fs.StringVar(&f.listen, "listen", "", "embedded server's client address (default $LOOPGATE_LISTEN, else server.listen, else 127.0.0.1:4222; not with --nats)")
	fs.StringVar(&f.data, "data", "", "data directory: JetStream store and tool files (default $LOOPGATE_DATA, else server.data, else ./loopgate-data)")
	fs.IntVar(&f.workers, "workers", 0, "concurrent runs (default 4)")
	fs.StringVar(&f.natsURL, "nats", "", "external NATS URL(s), comma-separated; embeds no server")
	fs.StringVar(&f.natsConfig, "nats-config", "", "nats-server config file for the embedded server: accounts, users, permissions, TLS (e.g. deploy/nats-accounts.conf); not with --nats")
	f.auth.register(fs)
	fs.StringVar(&f.logFormat, "log-format", "auto", "log format: auto (tint on a terminal, else JSON), text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.syncInterval, "sync-interval", "", `embedded server fsync: "always" (default) or a duration such as 2m; not with --nats`)
	fs.IntVar(&f.replicas, "replicas", 0, "replicas of the streams and KV buckets loopgate creates (default 1; existing ones are never lowered)")
	fs.StringVar(&f.groupCommit, "group-commit", "", "appends of different runs waiting at once share atomic batches: auto (default: on with the embedded server at sync-interval always and one replica), on or off")
	fs.DurationVar(&f.ackWait, "ack-wait", 0, "how long a worker may hold a work message without a heartbeat (default 30s)")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (default: none)")
}

// parse parses serve's or worker's arguments into f and records which
// flags were given.
func (f *serveFlags) parse(fs *flag.FlagSet, e env, args []string) (code int, ok bool) {
	f.register(fs)
	if code, ok := parseOnlyFlags(fs, e, args); !ok {
		return code, false
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	f.fromEnv()
	if f.set["nats"] {
		// nats.Connect takes a list with no URL in it for the default
		// 127.0.0.1:4222, and an empty --nats (an unset "$NATS") would
		// embed a server with a store of its own: neither is what was
		// asked.
		var urls []string
		for u := range strings.SplitSeq(f.natsURL, ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
		if len(urls) == 0 {
			fmt.Fprintf(e.stderr, "loopgate: --nats %q names no URL: give the servers to join, comma-separated, or leave --nats out to embed one (serve)\n", f.natsURL)
			return exitError, false
		}
		f.natsURL = strings.Join(urls, ",")
	}
	return 0, true
}

// Environment variables that stand in for --listen and --data when the
// flag is not given, ahead of the config file's server section: the
// container image sets them, so that serve listens where other containers
// reach it and stores its data where its user may write.
const (
	envListen = "LOOPGATE_LISTEN"
	envData   = "LOOPGATE_DATA"
)

// fromEnv takes --listen (for an embedded server only) and --data from
// the environment when they were not given.
func (f *serveFlags) fromEnv() {
	if v := os.Getenv(envListen); v != "" && !f.set["listen"] && !f.set["nats"] {
		f.listen, f.set["listen"] = v, true
	}
	if v := os.Getenv(envData); v != "" && !f.set["data"] {
		f.data, f.set["data"] = v, true
	}
}

// embeddedOnly are the flags that configure the embedded server: with
// --nats there is none, and they would do nothing.
var embeddedOnly = []string{"nats-config", "listen", "sync-interval"}

// checkEmbeddedFlags refuses embedded-server flags given with --nats.
func (f *serveFlags) checkEmbeddedFlags() error {
	if f.natsURL == "" {
		return nil
	}
	var given []string
	for _, name := range embeddedOnly {
		if f.set[name] {
			given = append(given, "--"+name)
		}
	}
	if len(given) == 0 {
		return nil
	}
	return fmt.Errorf("%s: for the embedded server only, and with --nats there is none (configure that server instead)", strings.Join(given, ", "))
}

// orConfig is the flag's value if it was given, else the config file's.
func orConfig[T any](f *serveFlags, name string, flagValue, configValue T) T {
	if f.set[name] {
		return flagValue
	}
	return configValue
}

// checkSettings refuses, before anything starts, the server settings the
// packages below would refuse in their own terms (journal: Layout.Replicas,
// natsd: Config.Listen), which name no flag. A value may come from a flag
// or from the config file, so the error names both. listen and
// syncInterval are checked only for an embedded server: with --nats they
// do not apply.
func checkSettings(o stackOptions, embedded bool) error {
	layout := o.layout().WithDefaults()
	switch {
	case o.workers < 1:
		return fmt.Errorf("--workers (server.workers) %d: want at least 1", o.workers)
	case o.replicas < 1 || o.replicas > 5:
		return fmt.Errorf("--replicas (server.replicas) %d: want 1 to 5", o.replicas)
	case o.ackWait < 100*time.Millisecond:
		return fmt.Errorf("--ack-wait (server.ack_wait) %s: want at least 100ms", o.ackWait)
	case layout.IdempotencyMaxAge < layout.MinIdempotencyMaxAge():
		// The default too: a long enough --ack-wait outgrows it.
		given := layout.IdempotencyMaxAge.String()
		if o.idemMaxAge == 0 {
			given += " (the default)"
		}
		return fmt.Errorf("server.idempotency_max_age %s: want at least %s, a day beyond the %d deliveries' deadlines (--ack-wait, server.max_deliver): a crashed write's record must outlive its run's redeliveries",
			given, layout.MinIdempotencyMaxAge(), layout.MaxDeliver)
	case !embedded:
		return nil
	}
	if o.syncInterval != natsd.SyncAlways {
		if d, err := time.ParseDuration(o.syncInterval); err != nil || d <= 0 {
			return fmt.Errorf("--sync-interval (server.sync_interval) %q: want %q or a positive duration like \"2m\"", o.syncInterval, natsd.SyncAlways)
		}
	}
	_, port, err := net.SplitHostPort(o.listen)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return fmt.Errorf("--listen (server.listen) %q: want host:port, the port a number from 0 to 65535", o.listen)
	}
	return nil
}

// loadConfig reads --config, or the built-in CityOps example.
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Load(cityops.Files, "loopgate.yaml")
	}
	return config.LoadFile(path)
}

func runServe(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate serve", flag.ContinueOnError)
	var f serveFlags
	if code, ok := f.parse(fs, e, args); !ok {
		return code
	}
	return serve(ctx, e, f, false)
}

func runWorker(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate worker", flag.ContinueOnError)
	var f serveFlags
	if code, ok := f.parse(fs, e, args); !ok {
		return code
	}
	if f.natsURL == "" {
		return fail(e, "worker: --nats URL is required (use serve to embed a server)")
	}
	return serve(ctx, e, f, true)
}

func serve(ctx context.Context, e env, f serveFlags, workerOnly bool) int {
	log, err := newLogger(e.stderr, f.logFormat, f.logLevel)
	if err != nil {
		return fail(e, "%v", err)
	}
	if err := f.checkEmbeddedFlags(); err != nil {
		return fail(e, "%v", err)
	}
	cfg, err := loadConfig(f.configPath)
	if err != nil {
		return fail(e, "%v", err)
	}
	embedded := f.natsURL == ""
	o := stackOptions{
		cfg:          cfg,
		natsURL:      f.natsURL,
		natsConfig:   f.natsConfig,
		auth:         f.auth.orEnv(),
		listen:       orConfig(&f, "listen", f.listen, cfg.Server.Listen),
		dataDir:      cmp.Or(f.data, cfg.Server.Data),
		syncInterval: orConfig(&f, "sync-interval", f.syncInterval, cfg.Server.SyncInterval),
		replicas:     orConfig(&f, "replicas", f.replicas, cfg.Server.Replicas),
		// The config's zero ack_wait is the journal's default.
		ackWait:    orConfig(&f, "ack-wait", f.ackWait, cmp.Or(cfg.Server.AckWait.D(), journal.DefaultAckWait)),
		maxDeliver: cfg.Server.MaxDeliver,
		idemMaxAge: cfg.Server.IdempotencyMaxAge.D(),
		crash:      crashHook(os.Getenv(crashEnv), log),
		workers:    orConfig(&f, "workers", f.workers, cfg.Server.Workers),
		log:        log,
	}
	if err := checkSettings(o, embedded); err != nil {
		return fail(e, "%v", err)
	}
	if o.groupCommit, err = chooseGroupCommit(cmp.Or(f.groupCommit, string(cfg.Server.GroupCommit)), embedded, o.syncInterval, o.replicas); err != nil {
		return fail(e, "%v", err)
	}
	for _, w := range shortBudgets(cfg, o.ackWait) {
		log.WarnContext(ctx, w)
	}
	procs := []any{"gomaxprocs", runtime.GOMAXPROCS(0)}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.SetDefaultGOMAXPROCS()
		def := runtime.GOMAXPROCS(0)
		if n := chooseProcs(embedded, o.syncInterval, def); n != def {
			runtime.GOMAXPROCS(n)
			defer runtime.SetDefaultGOMAXPROCS()
			procs = []any{"gomaxprocs", n, "gomaxprocs_default", def}
		}
	}
	ms, err := startMetrics(f.metricsListen, &o)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer ms.close(context.Background())
	s, err := startStack(ctx, o)
	if err != nil && ctx.Err() != nil {
		// Stopped (SIGTERM, SIGINT) while it waited for its servers: a
		// clean stop, not a failure for a supervisor to report.
		log.Info("stopped before serving", "while", err)
		return exitOK
	}
	if err != nil {
		return fail(e, "%v", err)
	}
	where := natsconn.RedactedURLs(f.natsURL)
	if s.srv != nil {
		where = s.srv.ClientURL()
	}
	attrs := []any{"nats", where, "embedded", s.srv != nil, "data", o.dataDir, "workers", o.workers}
	if embedded {
		// An external server's fsync is its own config's: ours says nothing of it.
		attrs = append(attrs, "sync_interval", o.syncInterval)
	}
	attrs = append(attrs, "group_commit", o.groupCommit, "agents", len(cfg.Agents), "tools", len(cfg.Tools))
	ms.serving(s)
	log.InfoContext(ctx, "loopgate serving", append(attrs, procs...)...)
	if !workerOnly {
		fmt.Fprintf(e.stdout, "loopgate serving on %s (data %s, %s); tasks go to loopgate.tasks.<tenant>\n", where, o.dataDir, plural(o.workers, "worker"))
	}
	<-ctx.Done()
	ms.draining()
	log.Info("shutting down: finishing runs in progress")
	if err := s.close(context.Background()); err != nil {
		log.Warn("shutdown", "err", err)
	}
	if o.groupCommit {
		// What group commit did, for an operator weighing the setting.
		g := s.journal.GroupStats()
		log.Info("group commit", "batches", g.Batches, "events_in_batches", g.Events, "appends_alone", g.Alone,
			"batches_refused", g.Refused, "largest_batch_appends", g.MaxShare, "batch_time", g.BatchTime)
	}
	log.Info("stopped")
	return exitOK
}

// chooseProcs is the GOMAXPROCS serve runs with, given the runtime's
// default: with the embedded server at sync interval always, twice the
// default (natsd.Procs says why); otherwise the default. Serve calls it only
// when the GOMAXPROCS environment variable is unset: an operator's choice
// stands.
func chooseProcs(embedded bool, syncInterval string, def int) int {
	if !embedded {
		return def
	}
	return natsd.Procs(syncInterval, def)
}

// chooseGroupCommit resolves the group-commit setting ("auto", "on" or
// "off"; "" is auto). Auto turns it on only where it is known to pay: an
// embedded server that fsyncs every write, with one replica. There every
// append is an fsync the stream does one after another, and a batch of
// many runs' events costs a few (docs/durability.md). With an interval no
// append waits for the disk and a batch costs more than the appends it
// saves; a replicated stream already shares fsyncs in its Raft log; and
// an external server's fsync setting is not visible to a client, so its
// operator decides.
func chooseGroupCommit(setting string, embedded bool, syncInterval string, replicas int) (bool, error) {
	switch setting {
	case "on":
		return true, nil
	case "off":
		return false, nil
	case "", "auto":
		return embedded && cmp.Or(syncInterval, "always") == "always" && replicas <= 1, nil
	}
	return false, fmt.Errorf("--group-commit (server.group_commit) %q: want auto, on or off", setting)
}
