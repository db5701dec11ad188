package natsd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// SyncAlways is the SyncInterval value that fsyncs every JetStream write.
const SyncAlways = "always"

// ErrStoreInUse means another server, in this process or another, runs on
// the StoreDir. Two servers on one JetStream store would corrupt it.
var ErrStoreInUse = errors.New("natsd: store directory in use by another server")

// lockFile is the file in StoreDir whose lock marks the store as in use.
const lockFile = "loopgate.lock"

// readyTimeout bounds how long Start waits for the server to accept clients.
const readyTimeout = 10 * time.Second

// Config configures an embedded server. The zero value is not usable:
// StoreDir is required.
type Config struct {
	// Listen is the client address, host:port. Port 0 picks a free port.
	// Defaults to 127.0.0.1 on a free port, or with a ConfigFile to the
	// file's listen (a free port if it names none).
	Listen string
	// StoreDir is the directory of the JetStream file store. Required.
	StoreDir string
	// SyncInterval is how often JetStream fsyncs its files: "always" (every
	// write) or a Go duration such as "2m". Defaults to "always".
	SyncInterval string
	// ServerName names the server in JetStream metadata and monitoring.
	// Defaults to the ConfigFile's server_name, else "loopgate".
	ServerName string
	// ConfigFile is a nats-server configuration file (the format of
	// `nats-server -c`) to start from: accounts, users and permissions,
	// TLS, limits. Listen, StoreDir and SyncInterval still decide where the
	// server listens and stores, whatever the file says (its listen/port
	// only when Listen is empty); JetStream is always on. An account whose
	// users run loopgate needs `jetstream: enabled` in the file. See
	// deploy/nats-accounts.conf. Defaults to "": no file, no
	// authentication, one global account.
	ConfigFile string
	// Logger receives the server's log lines: warnings and errors at their
	// levels, notices at Debug, the server's debug and trace output below
	// Debug (enabled only if the logger is). Defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.ConfigFile == "" {
		// With a file, an empty Listen and ServerName leave the file's.
		c.Listen = cmp.Or(c.Listen, "127.0.0.1:0")
		c.ServerName = cmp.Or(c.ServerName, "loopgate")
	}
	c.SyncInterval = cmp.Or(c.SyncInterval, SyncAlways)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// options validates c (with defaults applied) and turns it into server
// options. Errors name the offending field.
func (c Config) options() (*server.Options, error) {
	if c.StoreDir == "" {
		return nil, errors.New("natsd: Config.StoreDir is required")
	}
	opts := &server.Options{}
	if c.ConfigFile != "" {
		fileOpts, err := server.ProcessConfigFile(c.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("natsd: Config.ConfigFile %q: %w", c.ConfigFile, err)
		}
		opts = fileOpts
		if c.Listen == "" {
			c.Listen = net.JoinHostPort(cmp.Or(opts.Host, "127.0.0.1"), strconv.Itoa(max(opts.Port, 0)))
		}
	}
	host, portStr, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("natsd: Config.Listen %q: want host:port: %w", c.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("natsd: Config.Listen %q: port must be a number from 0 to 65535", c.Listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT // nats-server reads 0 as "the default port 4222"
	}
	if host == "" {
		host = "0.0.0.0" // Go's ":4222" means every interface; say so explicitly
	}
	opts.ServerName = cmp.Or(c.ServerName, opts.ServerName, "loopgate")
	opts.Host, opts.Port = host, port
	opts.JetStream = true
	opts.StoreDir = c.StoreDir
	opts.NoSigs = true // the embedding process owns signal handling
	opts.SyncAlways, opts.SyncInterval = false, 0
	if c.SyncInterval == SyncAlways {
		opts.SyncAlways = true
	} else {
		d, err := time.ParseDuration(c.SyncInterval)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("natsd: Config.SyncInterval %q: want %q or a positive duration like \"2m\"", c.SyncInterval, SyncAlways)
		}
		opts.SyncInterval = d
	}
	return opts, nil
}

// Server is a running embedded nats-server with JetStream. Its methods are
// safe for concurrent use.
type Server struct {
	ns       *server.Server
	lock     *os.File // held until Shutdown; nil where unsupported
	shutdown sync.Once
}

// Start starts a server and waits (up to 10s) until it accepts clients and
// JetStream is enabled. A bad Config is an error naming the field; so is a
// server that cannot start (address in use, unusable StoreDir). A StoreDir
// another server holds is ErrStoreInUse (on unix, where Start locks the
// directory until Shutdown). Callers must call Shutdown.
func Start(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	lock, err := lockStore(cfg.StoreDir)
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		unlock(lock)
		return nil, fmt.Errorf("natsd: new server: %w", err)
	}
	logs := &logAdapter{log: cfg.Logger.With("component", "nats-server")}
	ctx := context.Background()
	ns.SetLoggerV2(logs,
		cfg.Logger.Enabled(ctx, levelServerDebug),
		cfg.Logger.Enabled(ctx, levelServerTrace),
		false)

	// Server.Start returns once listeners and JetStream are set up; on a
	// failure it logs a fatal line and returns early, which we report.
	ns.Start()
	fail := func(err error) (*Server, error) {
		ns.Shutdown()
		ns.WaitForShutdown()
		unlock(lock)
		return nil, err
	}
	if msg := logs.fatal.Load(); msg != nil {
		return fail(fmt.Errorf("natsd: start (Config.Listen %q, Config.StoreDir %q): %s", cfg.Listen, cfg.StoreDir, *msg))
	}
	if !ns.ReadyForConnections(readyTimeout) {
		return fail(fmt.Errorf("natsd: server on %q not ready for connections after %s", cfg.Listen, readyTimeout))
	}
	if !ns.JetStreamEnabled() {
		return fail(fmt.Errorf("natsd: JetStream did not start (Config.StoreDir %q)", cfg.StoreDir))
	}
	return &Server{ns: ns, lock: lock}, nil
}

func unlock(f *os.File) {
	if f != nil {
		f.Close() // closing releases the lock
	}
}

// ClientURL is the URL other processes connect to, e.g.
// "nats://127.0.0.1:4222". A server listening on every interface reports
// 127.0.0.1.
func (s *Server) ClientURL() string {
	u, err := url.Parse(s.ns.ClientURL())
	if err != nil {
		return s.ns.ClientURL()
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	}
	return u.String()
}

// Connect opens a client connection over an in-process pipe (no TCP; about
// twice the throughput of loopback). opts are applied after the in-process
// option. A server with TLS needs none of it in process. The caller
// closes the connection, before Shutdown.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.InProcessServer(s.ns)}, opts...)
	// The server offers in-process clients TLS but never requires it (a
	// server with a tls block reports a tls:// URL, which would make the
	// client insist on it): no certificates to set up.
	addr := s.ClientURL()
	if u, err := url.Parse(addr); err == nil && u.Scheme == "tls" {
		u.Scheme = "nats"
		addr = u.String()
	}
	nc, err := nats.Connect(addr, all...)
	if err != nil {
		return nil, fmt.Errorf("natsd: connect in-process: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server, closing every client connection, and returns
// once it has fully stopped and flushed JetStream, releasing the StoreDir.
// It is idempotent; concurrent callers all wait for the one shutdown.
func (s *Server) Shutdown() {
	s.shutdown.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		unlock(s.lock)
	})
}

// Levels of the server's own debug and trace lines, below slog.LevelDebug
// so that a Debug logger shows the server's notices but not its chatter.
const (
	levelServerDebug = slog.LevelDebug - 4
	levelServerTrace = slog.LevelDebug - 8
)

// logAdapter routes nats-server logging to slog. Fatal lines never exit the
// process; the first one is kept so Start can report it.
type logAdapter struct {
	log   *slog.Logger
	fatal atomic.Pointer[string]
}

func (l *logAdapter) logf(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.log.Log(ctx, level, fmt.Sprintf(format, v...))
}

func (l *logAdapter) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l *logAdapter) Warnf(format string, v ...any)   { l.logf(slog.LevelWarn, format, v) }
func (l *logAdapter) Errorf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l *logAdapter) Debugf(format string, v ...any)  { l.logf(levelServerDebug, format, v) }
func (l *logAdapter) Tracef(format string, v ...any)  { l.logf(levelServerTrace, format, v) }

func (l *logAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.fatal.CompareAndSwap(nil, &msg)
	l.log.Error(msg, "fatal", true)
}
