package natstest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/journal"
)

// Cluster is three JetStream servers in this process, clustered over
// loopback routes, with loopgate's layout at three replicas.
type Cluster struct {
	Servers []*server.Server
	// Conn is an in-process connection to the first server, and JS is on
	// it.
	Conn *nats.Conn
	JS   jetstream.JetStream

	options []func() *server.Options // each server's, for Restart
}

// Shutdown stops server i (not 0, which holds Conn) as if it died.
func (c *Cluster) Shutdown(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// Restart starts server i again on its store, after Shutdown, with
// JetStream (see ClusterOptions.JetStreamOff), and fails the test if it
// cannot.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	if err := c.TryRestart(t, i); err != nil {
		t.Fatal(err)
	}
}

// restartWait bounds how long a restarted server may take to listen
// once started. Its listeners come up in goroutines of their own, late on
// a loaded machine under -race; the 10 s this used to be could not tell
// that from a port taken, which now shows at once as a fatal error.
const restartWait = 60 * time.Second

// TryRestart is Restart for a goroutine other than the test's: it returns
// the error instead. The server's route port was free while it was down,
// so a server of a parallel test may have taken it; then it listens for
// routes on a port of its own, and the others learn that port from the
// routes it opens to them.
func (c *Cluster) TryRestart(t testing.TB, i int) error {
	so := c.options[i]()
	s, err := c.startAgain(t, so)
	if errors.Is(err, errFatal) {
		so = c.options[i]()
		so.Cluster.Port = server.RANDOM_PORT
		s, err = c.startAgain(t, so)
	}
	if err != nil {
		return fmt.Errorf("natstest: cluster: restart %s: %w", so.ServerName, err)
	}
	c.Servers[i] = s
	return nil
}

// errFatal marks a server that stopped on a fatal error, such as its
// route port taken.
var errFatal = errors.New("fatal")

func (c *Cluster) startAgain(t testing.TB, so *server.Options) (*server.Server, error) {
	s, err := server.NewServer(so)
	if err != nil {
		return nil, err
	}
	fatal := &fatalLog{}
	s.SetLogger(fatal, false, false)
	start := time.Now()
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	for !s.ReadyForConnections(50 * time.Millisecond) {
		if msg := fatal.first(); msg != "" {
			s.Shutdown()
			s.WaitForShutdown()
			return nil, fmt.Errorf("%w: %s", errFatal, msg)
		}
		if time.Since(start) > restartWait {
			return nil, fmt.Errorf("not ready %s after its start", restartWait)
		}
	}
	return s, nil
}

// ClusterOptions tune StartClusterWith.
type ClusterOptions struct {
	// SyncInterval of every server: "always", or a duration. Defaults to
	// "2m": the tests are about replication, not fsyncs.
	SyncInterval string
	// Layout is passed to journal.Ensure, with Replicas 3. Defaults to the
	// journal defaults with an AckWait of 5s.
	Layout journal.Layout
	// NoLayout leaves the cluster empty: StartClusterWith only waits for
	// JetStream to answer, and the test ensures the layout itself.
	NoLayout bool
	// JetStreamOff lists servers (by index, not 0) that start without
	// JetStream, as a server that has not joined the JetStream cluster
	// yet; Restart starts them with it.
	JetStreamOff []int

	// routePorts picks the servers' route ports for an attempt (from 1);
	// nil: freePorts. A test of the retry hands out a taken one.
	routePorts func(attempt int) ([]int, error)
}

// StartCluster is StartClusterWith the default options.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{})
}

// StartClusterWith starts the cluster, waits for a meta leader and ensures
// the layout with Replicas 3 (unless NoLayout). Everything is shut down in
// t.Cleanup.
func StartClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	o.Layout.Replicas = 3
	o.Layout.AckWait = cmp.Or(o.Layout.AckWait, 5*time.Second)
	opts := clusterServerOptions(t, o)

	// The route ports are picked free and then closed, so another server
	// of a parallel test can take one before ours listens on it: then the
	// cluster starts again on other ports.
	pick := o.routePorts
	if pick == nil {
		pick = freePorts
	}
	var c *Cluster
	for attempt := 1; ; attempt++ {
		ports, err := pick(attempt)
		if err != nil {
			t.Fatalf("natstest: cluster: route ports: %v", err)
		}
		if c, err = startServers(t, o, ports, opts); err == nil {
			break
		}
		if attempt == clusterStartTries {
			t.Fatalf("natstest: cluster: %v (%d attempts)", err, attempt)
		}
		t.Logf("natstest: cluster: %v; starting again on other ports", err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(c.Servers[0]))
	if err != nil {
		t.Fatalf("natstest: cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	if c.JS, err = jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second)); err != nil {
		t.Fatalf("natstest: cluster: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		if o.NoLayout {
			_, err = c.JS.AccountInfo(ctx) // answered once there is a meta leader
		} else {
			err = journal.Ensure(ctx, c.JS, o.Layout)
		}
		cancel()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: cluster: ensure the layout: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// clusterServerOptions returns how server i of the cluster is configured.
func clusterServerOptions(t testing.TB, o ClusterOptions) func(i, port int, routes []*url.URL, store string) *server.Options {
	return func(i, port int, routes []*url.URL, store string) *server.Options {
		so := &server.Options{
			ServerName: fmt.Sprintf("s%d", i+1), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: store, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: port},
			Routes:  routes,
			// As deploy/nats-cluster.conf: a pool's step batches are
			// not refused for being more than 50 open at once.
			JetStreamLimits: server.JSLimitOpts{MaxBatchInflightPerStream: 1000},
		}
		switch o.SyncInterval {
		case "always":
			so.SyncAlways = true
		case "":
			so.SyncInterval = 2 * time.Minute
		default:
			d, err := time.ParseDuration(o.SyncInterval)
			if err != nil {
				t.Fatalf("natstest: cluster: sync interval: %v", err)
			}
			so.SyncInterval = d
		}
		return so
	}
}

// clusterStartTries bounds the starts of a cluster whose route port was
// taken.
const clusterStartTries = 3

// startServers starts the three servers on route ports free a moment ago
// and waits until each listens. A server that cannot (its port taken
// since) fails the attempt at once, with every server of it shut down.
func startServers(t testing.TB, o ClusterOptions, ports []int, opts func(i, port int, routes []*url.URL, store string) *server.Options) (*Cluster, error) {
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := &Cluster{}
	shutdown := func() {
		for _, s := range c.Servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	fatal := &fatalLog{}
	for i := range ports {
		store := t.TempDir()
		c.options = append(c.options, func() *server.Options { return opts(i, ports[i], routes, store) })
		so := c.options[i]()
		so.JetStream = !slices.Contains(o.JetStreamOff, i)
		s, err := server.NewServer(so)
		if err != nil {
			shutdown()
			return nil, err
		}
		s.SetLogger(fatal, false, false)
		s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		c.Servers = append(c.Servers, s)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range c.Servers {
		for !s.ReadyForConnections(50 * time.Millisecond) {
			if msg := fatal.first(); msg != "" {
				shutdown()
				return nil, fmt.Errorf("server %s: %s", s.Name(), msg)
			}
			if time.Now().After(deadline) {
				shutdown()
				return nil, fmt.Errorf("server %s not ready", s.Name())
			}
		}
	}
	return c, nil
}

// freePorts returns three loopback ports free a moment ago.
func freePorts(int) ([]int, error) {
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	return ports, nil
}

// fatalLog is the cluster servers' logger: it keeps only the first fatal
// error (such as a route port taken), which a server without a logger
// would not say.
type fatalLog struct {
	mu  sync.Mutex
	msg string
}

func (l *fatalLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msg == "" {
		l.msg = fmt.Sprintf(format, v...)
	}
}

func (l *fatalLog) first() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msg
}

func (*fatalLog) Noticef(string, ...any) {}
func (*fatalLog) Warnf(string, ...any)   {}
func (*fatalLog) Errorf(string, ...any)  {}
func (*fatalLog) Debugf(string, ...any)  {}
func (*fatalLog) Tracef(string, ...any)  {}

// Topologies names the two a behaviour that must hold on both is tested
// on, for StartTopology.
var Topologies = []string{"one server", "three servers"}

// StartTopology starts one server, or three clustered (loopgate's layout
// at three replicas), as named by Topologies, and returns a JetStream on
// it.
func StartTopology(t testing.TB, name string) jetstream.JetStream {
	t.Helper()
	if name == Topologies[0] {
		return Start(t).JS
	}
	return StartCluster(t).JS
}
