package natsd

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestTheComposeClusterConfig reads deploy/nats-cluster.conf, which each
// nats node of compose.yaml runs, with nats-server's own parser (no
// Docker engine runs in CI), and checks what loopgate relies on: fsync
// before every acknowledgement, the three-node cluster, and room for a
// busy pool's atomic batches.
func TestTheComposeClusterConfig(t *testing.T) {
	t.Setenv("NATS_NAME", "nats-1")
	o, err := server.ProcessConfigFile("../deploy/nats-cluster.conf")
	if err != nil {
		t.Fatalf("deploy/nats-cluster.conf: %v", err)
	}
	if o.ServerName != "nats-1" {
		t.Errorf("server_name = %q, want $NATS_NAME", o.ServerName)
	}
	if !o.JetStream || !o.SyncAlways {
		t.Errorf("jetstream %v, sync_interval always %v: want both", o.JetStream, o.SyncAlways)
	}
	if o.Cluster.Name != "loopgate" || len(o.Routes) != 3 {
		t.Errorf("cluster %q with %d routes, want loopgate with 3", o.Cluster.Name, len(o.Routes))
	}
	if got := o.JetStreamLimits.MaxBatchInflightPerStream; got < 256 {
		t.Errorf("jetstream.limits.batch.max_inflight_per_stream = %d, want room for a busy pool's batches (≥ 256)", got)
	}
}
