package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// forEachSyncR3 is forEachSync on a three-server cluster (startCluster)
// with loopgate's layout at 3 replicas.
func forEachSyncR3(b *testing.B, fn func(b *testing.B, j *journal.Journal)) {
	for _, s := range syncSettings {
		b.Run("sync="+s, func(b *testing.B) {
			_, j := startCluster(b, s)
			fn(b, j)
		})
	}
}

// startCluster starts three JetStream servers in this process, clustered
// over loopback routes, each with its own file store (all on the one disk
// of this machine) and the given fsync setting (natstest.StartClusterWith),
// with loopgate's layout at 3 replicas and the production AckWait, and
// returns it and a journal on an in-process connection to the first. It is a
// stand-in for a real cluster: no network latency, but three servers'
// fsyncs on one disk and three servers on this machine's CPUs.
func startCluster(b *testing.B, syncInterval string) (*natstest.Cluster, *journal.Journal) {
	b.Helper()
	c := natstest.StartClusterWith(b, natstest.ClusterOptions{SyncInterval: syncInterval, Layout: journal.Layout{AckWait: 30 * time.Second}})
	ctx := b.Context()
	deadline := time.Now().Add(30 * time.Second)
	j, err := journal.New(ctx, c.JS)
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
	return c, j
}
