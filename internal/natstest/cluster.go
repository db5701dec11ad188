package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
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
	// JS is on an in-process connection to the first server.
	JS jetstream.JetStream
}

// StartCluster starts the cluster (sync_interval 2m: the tests are about
// replication, not fsyncs), waits for a meta leader and ensures the layout
// with Replicas 3. Everything is shut down in t.Cleanup.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	const n = 3
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := &Cluster{}
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("s%d", i+1), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(), SyncInterval: 2 * time.Minute, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		})
		if err != nil {
			t.Fatalf("natstest: cluster: %v", err)
		}
		s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		c.Servers = append(c.Servers, s)
	}
	for _, s := range c.Servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("natstest: cluster: server %s not ready", s.Name())
		}
	}
	nc, err := nats.Connect("", nats.InProcessServer(c.Servers[0]))
	if err != nil {
		t.Fatalf("natstest: cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	if c.JS, err = jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second)); err != nil {
		t.Fatalf("natstest: cluster: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err = journal.Ensure(ctx, c.JS, journal.Layout{Replicas: 3, AckWait: 5 * time.Second})
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
