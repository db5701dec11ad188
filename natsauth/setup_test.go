package natsauth_test

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// configFile is the example the tests prove, used as shipped.
const configFile = "../deploy/nats-accounts.conf"

// Roles of the example and their placeholder passwords, as in the file.
const (
	roleUpstream = "upstream"
	roleApprover = "approver"
	roleAuditor  = "auditor"
	roleWorker   = "worker"
	roleTools    = "tools"
)

var passwords = map[string]string{
	roleUpstream: "upstream-change-me",
	roleApprover: "approver-change-me",
	roleAuditor:  "auditor-change-me",
	roleWorker:   "worker-change-me",
	roleTools:    "tools-change-me",
}

// inboxPrefix is the only inbox a role may subscribe to.
func inboxPrefix(user string) string { return "_INBOX_" + user }

// waitFor bounds every wait for the server: for a refusal, an ack, an
// event. Nothing in these tests sleeps.
const waitFor = 10 * time.Second

type bundle struct {
	srv *natsd.Server
	url string
}

// setup starts a server from the example config on a free TCP port, with
// its JetStream store in a temp dir, and ensures loopgate's layout as the
// worker, as every loopgate process does at startup.
func setup(t *testing.T) *bundle {
	t.Helper()
	srv, err := natsd.Start(natsd.Config{
		ConfigFile:   configFile,
		Listen:       "127.0.0.1:0",
		StoreDir:     t.TempDir(),
		SyncInterval: "2m", // these tests are about permissions, not fsyncs
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("start server from %s: %v", configFile, err)
	}
	t.Cleanup(srv.Shutdown)
	b := &bundle{srv: srv, url: srv.ClientURL()}
	w := b.as(t, roleWorker)
	if err := journal.Ensure(t.Context(), w.js, journal.Layout{AckWait: 5 * time.Second}); err != nil {
		t.Fatalf("ensure layout as worker: %v", err)
	}
	w.noViolations(t)
	return b
}

// client is a connection as one role. Every permission violation the
// server reports on it is collected.
type client struct {
	user string
	nc   *nats.Conn
	js   jetstream.JetStream

	mu         sync.Mutex
	violations []string
	changed    chan struct{} // closed and replaced on each violation
}

// as connects over TCP as user, with the user's inbox prefix.
func (b *bundle) as(t *testing.T, user string) *client {
	t.Helper()
	c := &client{user: user, changed: make(chan struct{})}
	nc, err := nats.Connect(b.url,
		nats.Name("natsauth-"+user),
		nats.UserInfo(user, passwords[user]),
		nats.CustomInboxPrefix(inboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				c.record(err.Error())
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(waitFor))
	if err != nil {
		t.Fatal(err)
	}
	c.nc, c.js = nc, js
	return c
}

func (c *client) record(v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, v)
	close(c.changed)
	c.changed = make(chan struct{})
}

// violated reports whether the server refused a kind ("Publish" or
// "Subscription") on a subject matching pattern (a NATS subject, where *
// and > match tokens), and a channel closed at the next report.
func (c *client) violated(kind, pattern string) (bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.violations {
		m := violationRe.FindStringSubmatch(v)
		if m != nil && m[1] == kind && subjectMatches(pattern, m[2]) {
			return true, nil
		}
	}
	return false, c.changed
}

// violationRe parses the server's refusal as nats.go reports it.
var violationRe = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// subjectMatches reports whether subject matches pattern, token by token.
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

// noViolations fails the test if the server refused anything on c so
// far. A flush round trip first: the server reports a violation before it
// answers the ping that follows it.
func (c *client) noViolations(t *testing.T) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", c.user, err)
	}
	if err := c.nc.LastError(); err != nil {
		t.Errorf("%s: the server refused something it must allow: %v", c.user, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.violations {
		t.Errorf("%s: the server refused something it must allow: %s", c.user, v)
	}
}

// deniedPublish runs op, which publishes (directly, or as a JetStream
// request) on subject, and waits until the server refuses that publish.
// op gets a context cancelled once the refusal arrives, so a request that
// would wait for an answer that never comes returns then. op succeeding is
// a failure: the server let the role do it.
// The subject may contain wildcards, for subjects that name a random
// consumer.
func (c *client) deniedPublish(t *testing.T, subject string, op func(ctx context.Context) error) {
	t.Helper()
	c.denied(t, "Publish", subject, op)
}

// deniedSubscribe subscribes to subject and waits until the server refuses
// the subscription. A refused subscription never delivers anything.
func (c *client) deniedSubscribe(t *testing.T, subject string) {
	t.Helper()
	c.denied(t, "Subscription", subject, func(context.Context) error {
		_, err := c.nc.SubscribeSync(subject)
		return sent(err)
	})
}

// publish is a core publish as an operation for deniedPublish.
func (c *client) publish(subject string) func(context.Context) error {
	return func(context.Context) error {
		return sent(c.nc.Publish(subject, []byte(`{}`)))
	}
}

// errSent is what an operation whose only answer is the server's refusal
// (a core publish, a subscribe) returns once it has sent it.
var errSent = errors.New("sent; only a refusal answers")

func sent(err error) error { return cmp.Or(err, errSent) }

func (c *client) denied(t *testing.T, kind, pattern string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	var opErr error
	opDone := false
	for {
		ok, next := c.violated(kind, pattern)
		if ok {
			cancel()
			if !opDone {
				opErr = <-done
			}
			if opErr == nil {
				t.Errorf("%s: %s to %s was refused, yet the operation reported success", c.user, kind, pattern)
			}
			return
		}
		select {
		case <-next:
		case opErr = <-done:
			opDone = true
			done = nil
			if opErr == nil {
				t.Fatalf("%s: the server allowed what it must refuse (%s to %s)", c.user, kind, pattern)
			}
			_ = c.nc.Flush() // a fire-and-forget publish: make the server read it
		case <-deadline.C:
			t.Fatalf("%s: no permission violation for %s to %s within %s (operation: %v)", c.user, kind, pattern, waitFor, opErr)
		}
	}
}
