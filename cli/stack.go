package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/examples/cityops"
	"github.com/loopgate/loopgate/internal/natsconn"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/providers"
	"github.com/loopgate/loopgate/seal"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/worker"
)

// stackOptions say how to assemble a running loopgate.
type stackOptions struct {
	cfg          *config.Config
	natsURL      string // external NATS; empty embeds a server
	natsConfig   string // embedded server's nats-server config file; empty: none
	auth         natsAuth
	listen       string // embedded server's address
	dataDir      string // JetStream store (embedded) and tool files (outbox)
	syncInterval string
	replicas     int
	groupCommit  bool          // journal.WithGroupCommit
	ackWait      time.Duration // 0: journal's default
	maxDeliver   int           // 0: journal's default
	idemMaxAge   time.Duration // 0: journal's default
	crash        func(point string)
	metrics      worker.Metrics // nil: none
	workers      int            // 0: no workers (a client-only stack)
	log          *slog.Logger
}

// layout is what the stack asks journal.Ensure for.
func (o stackOptions) layout() journal.Layout {
	return journal.Layout{Replicas: o.replicas, AckWait: o.ackWait, MaxDeliver: o.maxDeliver, IdempotencyMaxAge: o.idemMaxAge}
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
	var kek *seal.LocalKey
	if o.workers > 0 {
		if kek, err = workersKey(o.cfg); err != nil {
			return nil, err
		}
	}
	s := &stack{outbox: filepath.Join(o.dataDir, "outbox")}
	var refused refusalWatch
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
			ConfigFile:   o.natsConfig,
			Logger:       o.log,
		})
		if err != nil {
			return nil, err
		}
		// In process: no TLS to set up (the server does not ask for it).
		var opts []nats.Option
		if opts, err = o.auth.options(false); err != nil {
			return nil, err
		}
		s.nc, err = s.srv.Connect(append(opts, nats.Name("loopgate"), logAsyncErrors(o.log, refused.heard))...)
	} else {
		var opts []nats.Option
		if opts, err = o.auth.options(true); err != nil {
			return nil, err
		}
		opts = append(opts, nats.Name("loopgate"), nats.MaxReconnects(-1), logAsyncErrors(o.log, refused.heard))
		// In process, the server cannot stop answering while this process
		// runs; over the network it can (natsconn).
		opts = append(opts, natsconn.Liveness(o.log)...)
		// A worker started while its servers are down (a restart of the
		// whole deployment, a node being replaced) waits for them like it
		// waits for JetStream below, instead of exiting: an exploratory
		// kill -9 run saw a replacement worker started during a one-second
		// server restart exit with "no servers available".
		err = untilJetStreamAnswers(ctx, o.log, "connect to NATS", func(context.Context) (err error) {
			s.nc, err = nats.Connect(o.natsURL, opts...)
			return err
		})
	}
	if err != nil {
		if o.natsConfig != "" || errors.Is(err, nats.ErrAuthorization) {
			// In process, a refused login is only a closed pipe.
			return nil, fmt.Errorf("connect to NATS: %w (is this a user of the server's config? --nats-user and --nats-password, --nkey or --creds)", err)
		}
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, err
	}
	err = untilJetStreamAnswers(ctx, o.log, "ensure the layout", refused.step(s.nc, func(ctx context.Context) error {
		return journal.Ensure(ctx, s.js, o.layout())
	}))
	if err != nil {
		return nil, err
	}
	err = untilJetStreamAnswers(ctx, o.log, "open the journal", refused.step(s.nc, func(ctx context.Context) (err error) {
		var opts []journal.Option
		if o.groupCommit {
			opts = append(opts, journal.WithGroupCommit(0))
		}
		s.journal, err = journal.New(ctx, s.js, opts...)
		return err
	}))
	if err != nil {
		return nil, err
	}
	if o.workers == 0 {
		return s, nil
	}
	b, err := builtins(s.outbox)
	if err != nil {
		return nil, err
	}
	reg, err := tools.NewRegistry(o.cfg.Tools, b, tools.WithConn(s.nc))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	models := map[string]model.Model{}
	for name, p := range o.cfg.Agents {
		m, err := providers.Build(p.Model, model.Env{ReadFile: o.cfg.ReadFile, Logger: o.log})
		if err != nil {
			return nil, fmt.Errorf("agent %q: %w", name, err)
		}
		models[name] = m
	}
	deps := worker.Deps{JS: s.js, Journal: s.journal, App: o.cfg, Registry: reg, Models: models}
	if kek != nil {
		if deps.Sealer, err = keyring(ctx, s.js, kek); err != nil {
			return nil, err
		}
	}
	s.pool, err = worker.New(deps, &worker.Config{Workers: o.workers, Logger: o.log, Crash: o.crash, Metrics: o.metrics,
		// Batching a step's events pays on replicated streams only (one
		// Raft proposal); on one server it costs more (docs/durability.md).
		BatchEvents: o.replicas > 1,
		// With group commit a step's events, appended together, share a
		// batch with other runs' under load.
		StageEvents: o.groupCommit})
	if err != nil {
		return nil, err
	}
	if err := untilJetStreamAnswers(ctx, o.log, "start the workers", refused.step(s.nc, s.pool.Start)); err != nil {
		return nil, err
	}
	return s, nil
}

// jetStreamPatience is how long a starting process waits for JetStream to
// answer before giving up.
const jetStreamPatience = 2 * time.Minute

// untilJetStreamAnswers runs step until it succeeds, fails for a reason
// waiting will not change, ctx is done or jetStreamPatience has passed. A
// JetStream cluster that just lost or regained a server answers nothing,
// or "temporarily unavailable", while it elects leaders (4 to 9 s per
// group); a worker started then waits rather than exits (make soak
// started workers during a failover and saw them exit on the first
// timeout).
func untilJetStreamAnswers(ctx context.Context, log *slog.Logger, what string, step func(context.Context) error) error {
	deadline := time.Now().Add(jetStreamPatience)
	for attempt := 1; ; attempt++ {
		err := step(ctx)
		if err == nil || !jetStreamBusy(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		wait := min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)
		log.WarnContext(ctx, "NATS does not answer yet; trying again", "step", what, "attempt", attempt, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// refusalWatch ends a startup step at once when the server refuses this
// user an operation. A refused request is never answered: the step would
// wait as long as its context allows (journal.Ensure has no deadline of
// its own), then untilJetStreamAnswers would try again until its patience
// ran out — a worker user started with another user's --inbox-prefix
// logged "NATS does not answer yet" for two minutes. The connection's
// error handler reports the refusal (heard) while the step waits.
type refusalWatch struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc // the step's in progress; nil between steps
}

// heard cancels the step in progress with err, a permission violation.
func (w *refusalWatch) heard(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel(err)
	}
}

// step wraps a startup step on nc: a refusal heard while it runs ends it,
// with an error that names the refusal (and that jetStreamBusy does not
// take for an outage).
func (w *refusalWatch) step(nc *nats.Conn, step func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		w.mu.Lock()
		w.cancel = cancel
		w.mu.Unlock()
		err := step(ctx)
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
		if err != nil && errors.Is(context.Cause(ctx), nats.ErrPermissionViolation) {
			if refused := refusal(nc, err); refused != nil {
				return refused
			}
		}
		return err
	}
}

// errCodeNoPeers is JetStream's "no suitable peers for placement" (the
// jetstream package has no name for it); its description lists why.
const errCodeNoPeers jetstream.ErrorCode = 10005

// placementMisfits are the reasons of a placement error that waiting does
// not fix: the servers lack room, or their tags do not fit the request.
var placementMisfits = []string{"insufficient storage", "tag", "jetstream not enabled in cluster"}

// jetStreamBusy reports whether err is NATS or JetStream not answering for
// now: no server reachable, a timeout, no responders, a 503 other than
// "JetStream is not enabled", or a replicated stream or bucket that cannot
// be placed on enough servers yet: one is down, or has not joined or been
// heard from since the cluster started (make soak met it when workers
// started the moment their cluster did). A refused login, a TLS error or
// servers that lack room or the right tags are not: they will not go away
// by waiting. More replicas than the cluster has servers looks the same as
// servers that have not joined yet, so it too is retried until the
// patience runs out, with the server's reason in the log.
func jetStreamBusy(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrPermissionViolation):
		// A refusal (refusal) wraps the timeout it caused; waiting will
		// not make the server allow it.
		return false
	case errors.As(err, &apiErr):
		if apiErr.ErrorCode == errCodeNoPeers {
			return !slices.ContainsFunc(placementMisfits, func(r string) bool { return strings.Contains(apiErr.Description, r) })
		}
		return apiErr.Code == 503 && apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabled &&
			apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabledForAccount
	case errors.Is(err, nats.ErrNoServers),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse):
		return true
	}
	return false
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
		// Drain returns at once and finishes in the background, and the
		// process exits right after close. Flush first, so the acks of the
		// runs just settled reach the server; lost, their messages came
		// back after AckWait to whoever was left (make soak saw it).
		if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("flush before drain: %w", err))
		}
		errs = append(errs, s.nc.Drain())
	}
	if s.srv != nil {
		s.srv.Shutdown()
	}
	return errors.Join(errs...)
}

// connect is the client side for submit and audit: a connection and the
// journal, nothing else; extra options come last. It authenticates as the
// environment says (authFromEnv), or as the URL does
// (nats://user:password@host:port).
func connect(ctx context.Context, url string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, *journal.Journal, error) {
	opts, err := authFromEnv().options(true)
	if err != nil {
		return nil, nil, nil, err
	}
	// Pings: `bench` and `audit --follow` outlive a server that may stop
	// answering (natsconn); to the other commands they cost nothing.
	opts = append(opts, nats.Name("loopgate-cli"), nats.Timeout(5*time.Second), nats.ErrorHandler(quietRefusals))
	opts = append(opts, natsconn.Pings()...)
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to %s: %w", natsconn.RedactedURLs(url), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	j, err := journal.New(ctx, js)
	if err != nil {
		refused := refusal(nc, err)
		nc.Close()
		if refused != nil {
			return nil, nil, nil, refused
		}
		return nil, nil, nil, fmt.Errorf("is loopgate running against %s? %w", natsconn.RedactedURLs(url), err)
	}
	return nc, js, j, nil
}

// quietRefusals is the client commands' asynchronous error handler. A
// permission violation is left to the command's error, which names it
// (refusal): nats.go's default handler would print it to the process's
// stderr as well. Any other error is printed there as that handler does.
func quietRefusals(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		fmt.Fprintf(os.Stderr, "nats: %v\n", err)
	}
}

// refusal explains err by the permission violation the server last
// reported on nc, if any: a request the server refuses is never answered,
// so what the client sees is only a timeout.
func refusal(nc *nats.Conn, err error) error {
	if perr := nc.LastError(); errors.Is(perr, nats.ErrPermissionViolation) {
		return fmt.Errorf("%s refused this user: %w (%w)", nc.ConnectedUrlRedacted(), perr, err)
	}
	return nil
}

// natsAuth says how to authenticate to a NATS server that requires it
// (deploy/nats-accounts.conf): a user and password, a JWT .creds file or
// an nkey seed file (one of them), the inbox prefix the user may
// subscribe to, and the TLS files. The zero value connects anonymously
// with the default _INBOX prefix, as a server without authorization
// expects.
type natsAuth struct {
	user, password  string
	creds, nkeySeed string
	inboxPrefix     string
	tlsCA           string
	tlsCert, tlsKey string
}

// authEnv names the environment variables authFromEnv reads, after the
// nats CLI's where it has one.
var authEnv = struct{ user, password, creds, nkey, inbox, ca, cert, key string }{
	"NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "NATS_NKEY", "NATS_INBOX_PREFIX", "NATS_CA", "NATS_CERT", "NATS_KEY",
}

// authFromEnv is how submit, audit, pending, approve and deny
// authenticate: NATS_USER and NATS_PASSWORD, NATS_CREDS (a .creds file),
// NATS_NKEY (an nkey seed file), NATS_INBOX_PREFIX, and NATS_CA, NATS_CERT,
// NATS_KEY for TLS. None set: no authentication.
func authFromEnv() natsAuth {
	return natsAuth{}.orEnv()
}

// orEnv fills the fields a flag left empty from the environment.
func (a natsAuth) orEnv() natsAuth {
	or := func(v *string, name string) {
		if *v == "" {
			*v = os.Getenv(name)
		}
	}
	or(&a.user, authEnv.user)
	or(&a.password, authEnv.password)
	or(&a.creds, authEnv.creds)
	or(&a.nkeySeed, authEnv.nkey)
	or(&a.inboxPrefix, authEnv.inbox)
	or(&a.tlsCA, authEnv.ca)
	or(&a.tlsCert, authEnv.cert)
	or(&a.tlsKey, authEnv.key)
	return a
}

// register adds the flags of a (serve, worker). Their defaults come from
// the environment after parsing (orEnv), so -h never prints a password.
func (a *natsAuth) register(fs *flag.FlagSet) {
	fs.StringVar(&a.user, "nats-user", "", "NATS user to connect as (env "+authEnv.user+")")
	fs.StringVar(&a.password, "nats-password", "", "its password (env "+authEnv.password+"; prefer the environment: flags show in ps)")
	fs.StringVar(&a.creds, "creds", "", "NATS JWT credentials file, instead of a user and password (env "+authEnv.creds+")")
	fs.StringVar(&a.nkeySeed, "nkey", "", "NATS nkey seed file, instead of a user and password (env "+authEnv.nkey+")")
	fs.StringVar(&a.inboxPrefix, "inbox-prefix", "", "reply inbox prefix the NATS user may subscribe to, e.g. _INBOX_worker (env "+authEnv.inbox+")")
	fs.StringVar(&a.tlsCA, "tls-ca", "", "CA certificate to verify the NATS server with (env "+authEnv.ca+")")
	fs.StringVar(&a.tlsCert, "tls-cert", "", "client certificate for mutual TLS (env "+authEnv.cert+")")
	fs.StringVar(&a.tlsKey, "tls-key", "", "its private key (env "+authEnv.key+")")
}

// options turns a into connection options; TLS ones only if withTLS (an
// in-process connection has no TLS to set up). Conflicting settings are
// an error naming them.
func (a natsAuth) options(withTLS bool) ([]nats.Option, error) {
	var kinds []string
	if a.user != "" || a.password != "" {
		kinds = append(kinds, "user and password")
	}
	if a.creds != "" {
		kinds = append(kinds, "creds file")
	}
	if a.nkeySeed != "" {
		kinds = append(kinds, "nkey seed")
	}
	switch {
	case len(kinds) > 1:
		return nil, fmt.Errorf("nats: authenticate one way, not with a %s and a %s", kinds[0], kinds[1])
	case a.password != "" && a.user == "":
		return nil, errors.New("nats: a password without a user (--nats-user, " + authEnv.user + ")")
	}
	var opts []nats.Option
	switch {
	case a.user != "":
		opts = append(opts, nats.UserInfo(a.user, a.password))
	case a.creds != "":
		opts = append(opts, nats.UserCredentials(a.creds))
	case a.nkeySeed != "":
		o, err := nats.NkeyOptionFromSeed(a.nkeySeed)
		if err != nil {
			return nil, fmt.Errorf("nats: nkey seed file %s: %w", a.nkeySeed, err)
		}
		opts = append(opts, o)
	}
	if a.inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(a.inboxPrefix))
	}
	if !withTLS {
		return opts, nil
	}
	if a.tlsCA != "" {
		opts = append(opts, nats.RootCAs(a.tlsCA))
	}
	if (a.tlsCert == "") != (a.tlsKey == "") {
		return nil, errors.New("nats: a client certificate needs both --tls-cert and --tls-key")
	}
	if a.tlsCert != "" {
		opts = append(opts, nats.ClientCert(a.tlsCert, a.tlsKey))
	}
	return opts, nil
}

// subscriptionKind names a nats.SubscriptionType for the log.
func subscriptionKind(t nats.SubscriptionType) string {
	switch t {
	case nats.AsyncSubscription:
		return "handler"
	case nats.SyncSubscription:
		return "sync"
	case nats.ChanSubscription:
		return "chan"
	case nats.PullSubscription:
		return "pull"
	}
	return "unknown"
}

// logAsyncErrors logs what the server reports without failing a call, a
// permission violation above all: a refused request is otherwise only a
// timeout. It also passes each permission violation to onRefusal.
func logAsyncErrors(log *slog.Logger, onRefusal func(error)) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		attrs := []any{"err", err}
		if sub != nil {
			// The kind and the count say whose messages were lost: a
			// slow consumer on a bare inbox is a pull (chan, a Fetch or
			// Next, whose buffer is twice its batch) or a subscription
			// with a handler that fell behind its pending limits.
			attrs = append(attrs, "subject", sub.Subject, "subscription", subscriptionKind(sub.Type()))
			if n, derr := sub.Dropped(); derr == nil {
				attrs = append(attrs, "dropped", n)
			}
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			log.Error("nats: the server refused an operation of this user (see deploy/nats-accounts.conf)", attrs...)
			onRefusal(err)
			return
		}
		log.Warn("nats: asynchronous error", attrs...)
	})
}
