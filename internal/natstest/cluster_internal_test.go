package natstest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A route port another process took between its pick and the server's
// listen fails that start at once, naming the port, and the cluster
// starts on other ports (CI met the taken port as "server s2 not ready").
func TestAClusterStartsAgainWhenARoutePortIsTaken(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var attempts []int
	o := ClusterOptions{NoLayout: true, routePorts: func(attempt int) ([]int, error) {
		attempts = append(attempts, attempt)
		ports, err := freePorts(attempt)
		if attempt == 1 {
			ports[1] = taken.Addr().(*net.TCPAddr).Port
		}
		return ports, err
	}}

	ports, _ := freePorts(1)
	ports[1] = taken.Addr().(*net.TCPAddr).Port
	_, err = startServers(t, o, ports, clusterServerOptions(t, o))
	if err == nil || !strings.Contains(err.Error(), "router port") {
		t.Fatalf("start on a taken route port = %v, want the server's listen error", err)
	}

	c := StartClusterWith(t, o)
	if len(attempts) != 2 {
		t.Errorf("attempts = %v, want a second one on other ports", attempts)
	}
	if _, err := c.JS.AccountInfo(t.Context()); err != nil {
		t.Errorf("the cluster started again does not answer: %v", err)
	}
}

// A server restarted after another took its route port while it was down
// listens for routes on a port of its own and joins the cluster again: a
// replicated stream is current on all three servers once more.
func TestAServerRestartsWhenItsRoutePortWasTaken(t *testing.T) {
	c := StartClusterWith(t, ClusterOptions{NoLayout: true})
	ctx := t.Context()
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	port := c.Servers[2].ClusterAddr().Port
	c.Shutdown(2)
	taken, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("take the route port: %v", err)
	}
	defer taken.Close()

	c.Restart(t, 2)
	if got := c.Servers[2].ClusterAddr().Port; got == port {
		t.Fatalf("restarted on the taken route port %d", port)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.JS.Stream(ctx, "R")
		if err == nil {
			cl := st.CachedInfo().Cluster
			current := 0
			for _, r := range cl.Replicas {
				if r.Current {
					current++
				}
			}
			if cl.Leader != "" && current == 2 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream never had all three servers current again (last: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
