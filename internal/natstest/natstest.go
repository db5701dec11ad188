// Package natstest starts a real embedded nats-server with loopgate's
// JetStream layout for tests.
package natstest

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
)

// Env is a running server with the layout ensured and a journal open on it.
type Env struct {
	Server  *natsd.Server
	Conn    *nats.Conn // in-process connection
	JS      jetstream.JetStream
	Journal *journal.Journal
	// Dir is the server's StoreDir, a t.TempDir.
	Dir string

	opts Options
}

// Options tune StartWith. The zero value is what Start uses.
type Options struct {
	// Layout is passed to journal.Ensure. Defaults to the journal defaults
	// with an AckWait of 5s.
	Layout journal.Layout
	// SyncInterval of the server. Defaults to "always", as in production;
	// "2m" is faster where fsyncs dominate a test.
	SyncInterval string
	// Logger of the server. Defaults to one that discards everything below
	// warnings and writes warnings and errors to t.Log.
	Logger *slog.Logger
	// MaxFileStore caps the bytes the server's JetStream may store on
	// disk (max_file_store), for tests of a full store. Defaults to 0: the
	// server's own limit.
	MaxFileStore int64
	// MaxPayload is the server's max_payload, the largest message it
	// takes. Defaults to 0: the server's 1 MiB.
	MaxPayload int32
	// BatchMaxMsgs caps the messages of one atomic batch (jetstream {
	// limits { batch { max_msgs } } }). Defaults to 0: the server's 1000.
	BatchMaxMsgs int
}

// Start starts a server on a random port with StoreDir t.TempDir(),
// ensures the layout, connects in-process and opens a journal. Everything
// is shut down in t.Cleanup. It fails the test on any error.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Env {
	t.Helper()
	opts.Layout.AckWait = cmp.Or(opts.Layout.AckWait, 5*time.Second)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	env := &Env{Dir: t.TempDir(), opts: opts}
	env.start(t)
	if err := journal.Ensure(t.Context(), env.JS, opts.Layout); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	env.open(t)
	return env
}

// Restart stops the server and starts a new one on the same Dir, as after
// a crash of the whole process, then reconnects and reopens the journal.
// Fields of env are replaced; values taken from them before are closed.
func (env *Env) Restart(t testing.TB) {
	t.Helper()
	env.Conn.Close()
	env.Server.Shutdown()
	env.start(t)
	env.open(t)
}

func (env *Env) start(t testing.TB) {
	t.Helper()
	cfg := natsd.Config{
		StoreDir:     env.Dir,
		SyncInterval: env.opts.SyncInterval,
		Logger:       env.opts.Logger,
	}
	var limits []byte
	if n := env.opts.MaxFileStore; n > 0 {
		limits = fmt.Appendf(limits, "jetstream { max_file_store: %d }\n", n)
	}
	if n := env.opts.MaxPayload; n > 0 {
		limits = fmt.Appendf(limits, "max_payload: %d\n", n)
	}
	if n := env.opts.BatchMaxMsgs; n > 0 {
		limits = fmt.Appendf(limits, "jetstream { limits { batch { max_msgs: %d } } }\n", n)
	}
	if len(limits) > 0 {
		cfg.ConfigFile = filepath.Join(t.TempDir(), "limits.conf")
		if err := os.WriteFile(cfg.ConfigFile, limits, 0o600); err != nil {
			t.Fatalf("natstest: %v", err)
		}
	}
	s, err := natsd.Start(cfg)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(s.Shutdown)
	nc, err := s.Connect(nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(nc.Close) // runs before s.Shutdown
	// A roomy default timeout: on a busy shared disk a stream create with
	// SyncAlways can stall for seconds.
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	env.Server, env.Conn, env.JS = s, nc, js
}

func (env *Env) open(t testing.TB) {
	t.Helper()
	j, err := journal.New(t.Context(), env.JS)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	env.Journal = j
}

// tWriter writes log lines to t.Log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
