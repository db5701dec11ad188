package natstest

import (
	"net"
	"strings"
	"testing"
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
