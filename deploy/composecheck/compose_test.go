// Package composecheck validates ../../compose.yaml the way docker compose
// does (compose-go, the library docker compose is built on), since no
// Docker engine runs where the tests run. It is a module of its own so the
// main module does not carry compose-go's dependencies.
package composecheck

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

func TestComposeFileIsValidAndDescribesTheCluster(t *testing.T) {
	path, err := filepath.Abs("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithWorkingDirectory(filepath.Dir(path)), cli.WithOsEnv)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose.yaml does not load: %v", err)
	}
	for _, name := range []string{"nats-1", "nats-2", "nats-3", "worker"} {
		if _, err := p.GetService(name); err != nil {
			t.Errorf("service %s: %v", name, err)
		}
	}
	w, _ := p.GetService("worker")
	cmd := strings.Join(w.Command, " ")
	for _, want := range []string{"worker", "--replicas=3", "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("worker command %q lacks %q", cmd, want)
		}
	}
	if w.Deploy == nil || w.Deploy.Replicas == nil || *w.Deploy.Replicas < 2 {
		t.Errorf("worker pool should start at least 2 workers")
	}
	conf, err := os.ReadFile("../nats-cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
		if !strings.Contains(string(conf), "nats://"+n+":6222") {
			t.Errorf("cluster routes lack %s", n)
		}
		s, _ := p.GetService(n)
		if !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == "/data" }) {
			t.Errorf("%s keeps no JetStream data on a volume", n)
		}
	}
	if !strings.Contains(string(conf), "sync_interval: always") {
		t.Error("the cluster config must fsync every write")
	}
}
