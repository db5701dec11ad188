package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/examples/cityops"
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
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.configPath, "config", "", "config file (default: the built-in CityOps example)")
	fs.StringVar(&f.listen, "listen", "", "embedded server's client address (default 127.0.0.1:4222)")
	fs.StringVar(&f.data, "data", "", "data directory: JetStream store and tool files (default ./loopgate-data)")
	fs.IntVar(&f.workers, "workers", 0, "concurrent runs (default 4)")
	fs.StringVar(&f.natsURL, "nats", "", "external NATS URL(s), comma-separated; embeds no server")
	fs.StringVar(&f.natsConfig, "nats-config", "", "nats-server config file for the embedded server: accounts, users, permissions, TLS (e.g. deploy/nats-accounts.conf)")
	f.auth.register(fs)
	fs.StringVar(&f.logFormat, "log-format", "auto", "log format: auto (tint on a terminal, else JSON), text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.syncInterval, "sync-interval", "", `embedded server fsync: "always" (default) or a duration such as 2m`)
	fs.IntVar(&f.replicas, "replicas", 0, "replicas of the streams and KV buckets loopgate creates (default 1; existing ones are never lowered)")
	fs.StringVar(&f.groupCommit, "group-commit", "", "appends of different runs waiting at once share atomic batches: auto (default: on with the embedded server at sync-interval always and one replica), on or off")
	fs.DurationVar(&f.ackWait, "ack-wait", 0, "how long a worker may hold a work message without a heartbeat (default 30s)")
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
	f.register(fs)
	if code, ok := parseOnlyFlags(fs, e, args); !ok {
		return code
	}
	return serve(ctx, e, f, false)
}

func runWorker(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate worker", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	if code, ok := parseOnlyFlags(fs, e, args); !ok {
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
	cfg, err := loadConfig(f.configPath)
	if err != nil {
		return fail(e, "%v", err)
	}
	if f.natsConfig != "" && f.natsURL != "" {
		return fail(e, "--nats-config configures the embedded server; with --nats there is none (configure that server instead)")
	}
	groupCommit, err := chooseGroupCommit(cmp.Or(f.groupCommit, cfg.Server.GroupCommit), f.natsURL == "",
		cmp.Or(f.syncInterval, cfg.Server.SyncInterval), cmp.Or(f.replicas, cfg.Server.Replicas))
	if err != nil {
		return fail(e, "%v", err)
	}
	o := stackOptions{
		cfg:          cfg,
		natsURL:      f.natsURL,
		natsConfig:   f.natsConfig,
		auth:         f.auth.orEnv(),
		listen:       cmp.Or(f.listen, cfg.Server.Listen),
		dataDir:      cmp.Or(f.data, cfg.Server.Data),
		syncInterval: cmp.Or(f.syncInterval, cfg.Server.SyncInterval),
		replicas:     cmp.Or(f.replicas, cfg.Server.Replicas),
		groupCommit:  groupCommit,
		ackWait:      cmp.Or(f.ackWait, cfg.Server.AckWait.D()),
		maxDeliver:   cfg.Server.MaxDeliver,
		crash:        crashHook(os.Getenv(crashEnv), log),
		workers:      cmp.Or(f.workers, cfg.Server.Workers),
		log:          log,
	}
	for _, w := range shortBudgets(cfg, o.ackWait) {
		log.WarnContext(ctx, w)
	}
	procs := []any{"gomaxprocs", runtime.GOMAXPROCS(0)}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.SetDefaultGOMAXPROCS()
		def := runtime.GOMAXPROCS(0)
		if n := chooseProcs(f.natsURL == "", o.syncInterval, def); n != def {
			runtime.GOMAXPROCS(n)
			defer runtime.SetDefaultGOMAXPROCS()
			procs = []any{"gomaxprocs", n, "gomaxprocs_default", def}
		}
	}
	s, err := startStack(ctx, o)
	if err != nil {
		return fail(e, "%v", err)
	}
	where := f.natsURL
	if s.srv != nil {
		where = s.srv.ClientURL()
	}
	log.InfoContext(ctx, "loopgate serving", append([]any{"nats", where, "embedded", s.srv != nil, "data", o.dataDir,
		"workers", o.workers, "sync_interval", o.syncInterval, "group_commit", o.groupCommit, "agents", len(cfg.Agents), "tools", len(cfg.Tools)},
		procs...)...)
	if !workerOnly {
		fmt.Fprintf(e.stdout, "loopgate serving on %s (data %s, %d workers); tasks go to loopgate.tasks.<tenant>\n", where, o.dataDir, o.workers)
	}
	<-ctx.Done()
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
