package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/worker"
)

// stackOptions say how to assemble a running loopgate.
type stackOptions struct {
	cfg          *config.Config
	natsURL      string // external NATS; empty embeds a server
	listen       string // embedded server's address
	dataDir      string // JetStream store (embedded) and tool files (outbox)
	syncInterval string
	replicas     int
	ackWait      time.Duration // 0: journal's default
	maxDeliver   int           // 0: journal's default
	crash        func(point string)
	workers      int // 0: no workers (a client-only stack)
	log          *slog.Logger
}

// stack is a running loopgate: maybe an embedded server, a connection,
// the JetStream layout, and a worker pool.
type stack struct {
	srv     *natsd.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	journal *journal.Journal
	pool    *worker.Pool
	outbox  string
}

// builtins are the Go tools compiled into this binary: the CityOps
// example's, writing drafts under outbox.
func builtins(outbox string) (tools.Builtins, error) {
	b := tools.Builtins{}
	if err := cityops.Register(b, cityops.Options{Outbox: outbox}); err != nil {
		return nil, err
	}
	return b, nil
}

func startStack(ctx context.Context, o stackOptions) (_ *stack, err error) {
	s := &stack{outbox: filepath.Join(o.dataDir, "outbox")}
	defer func() {
		if err != nil {
			s.close(context.Background())
		}
	}()
	if o.natsURL == "" {
		s.srv, err = natsd.Start(natsd.Config{
			Listen:       o.listen,
			StoreDir:     filepath.Join(o.dataDir, "jetstream"),
			SyncInterval: o.syncInterval,
			Logger:       o.log,
		})
		if err != nil {
			return nil, err
		}
		s.nc, err = s.srv.Connect(nats.Name("loopgate"))
	} else {
		s.nc, err = nats.Connect(o.natsURL, nats.Name("loopgate"), nats.MaxReconnects(-1))
	}
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, err
	}
	if err := journal.Ensure(ctx, s.js, journal.Layout{Replicas: o.replicas, AckWait: o.ackWait, MaxDeliver: o.maxDeliver}); err != nil {
		return nil, err
	}
	if s.journal, err = journal.New(ctx, s.js); err != nil {
		return nil, err
	}
	if o.workers == 0 {
		return s, nil
	}
	b, err := builtins(s.outbox)
	if err != nil {
		return nil, err
	}
	reg, err := tools.NewRegistry(o.cfg.Tools, b)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	s.pool, err = worker.New(worker.Deps{JS: s.js, Journal: s.journal, App: o.cfg, Registry: reg}, &worker.Config{Workers: o.workers, Logger: o.log, Crash: o.crash,
		// Batching a step's events pays on replicated streams only (one
		// Raft proposal); on one server it costs more (docs/durability.md).
		BatchEvents: o.replicas > 1})
	if err != nil {
		return nil, err
	}
	if err := s.pool.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// close stops the workers (letting runs in progress finish for a while),
// then the connection and the embedded server.
func (s *stack) close(ctx context.Context) error {
	var errs []error
	if s.pool != nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs = append(errs, s.pool.Stop(ctx))
		cancel()
	}
	if s.nc != nil {
		errs = append(errs, s.nc.Drain())
	}
	if s.srv != nil {
		s.srv.Shutdown()
	}
	return errors.Join(errs...)
}

// connect is the client side for submit and audit: a connection and the
// journal, nothing else.
func connect(ctx context.Context, url string) (*nats.Conn, jetstream.JetStream, *journal.Journal, error) {
	nc, err := nats.Connect(url, nats.Name("loopgate-cli"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	j, err := journal.New(ctx, js)
	if err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("is loopgate running against %s? %w", url, err)
	}
	return nc, js, j, nil
}
