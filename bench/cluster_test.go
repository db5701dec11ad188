package bench_test

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

// forEachSyncR3 is forEachSync on a three-server cluster (startCluster)
// with loopgate's layout at 3 replicas.
func forEachSyncR3(b *testing.B, fn func(b *testing.B, j *journal.Journal)) {
	for _, s := range syncSettings {
		b.Run("sync="+s, func(b *testing.B) {
			fn(b, startCluster(b, s))
		})
	}
}

// freePort returns a TCP port nobody listens on right now.
func freePort(b *testing.B) int {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts three JetStream servers in this process, clustered
// over loopback routes, each with its own file store (all on the one disk
// of this machine) and the given fsync setting, ensures loopgate's layout
// with 3 replicas, and returns a journal on an in-process connection to
// the first. It is a stand-in for a real cluster: no network latency, but
// three servers' fsyncs on one disk and three servers on this machine's
// CPUs.
func startCluster(b *testing.B, syncInterval string) *journal.Journal {
	b.Helper()
	const n = 3
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(b)
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	servers := make([]*server.Server, n)
	for i := range servers {
		opts := &server.Options{
			ServerName: fmt.Sprintf("s%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   b.TempDir(),
			NoSigs:     true,
			Cluster:    server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		}
		if syncInterval == "always" {
			opts.SyncAlways = true
		} else {
			d, err := time.ParseDuration(syncInterval)
			if err != nil {
				b.Fatal(err)
			}
			opts.SyncInterval = d
		}
		s, err := server.NewServer(opts)
		if err != nil {
			b.Fatal(err)
		}
		s.Start()
		b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		servers[i] = s
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			b.Fatalf("server %s not ready", s.Name())
		}
	}
	nc, err := nats.Connect("", nats.InProcessServer(servers[0]))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	deadline := time.Now().Add(30 * time.Second)
	for !servers[0].JetStreamIsLeader() && !servers[1].JetStreamIsLeader() && !servers[2].JetStreamIsLeader() {
		if time.Now().After(deadline) {
			b.Fatal("no JetStream meta leader")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = journal.Ensure(actx, js, journal.Layout{Replicas: 3})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("ensure on the cluster: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	j, err := journal.New(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	// Wait for the events stream to have a leader and current peers.
	for {
		r := newRun()
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.appendOne(actx, j)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no leader for the events stream")
		}
		time.Sleep(250 * time.Millisecond)
	}
	return j
}
