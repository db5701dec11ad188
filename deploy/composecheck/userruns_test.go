package composecheck

import (
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
)

// `docker compose run --rm bench` used to start the bench as soon as the
// worker containers had started. Workers take seconds (15 s on a cold
// cluster here, over a minute with the accounts block merged in) to
// create the streams; until then `loopgate bench` exits 1 at once with
// "journal: open stream LOOPGATE_EVENTS (was Ensure run?): … stream not
// found" (it does not wait as workers do). The bench waits for workers
// that serve: a worker healthcheck and depends_on condition
// service_healthy.
func TestBenchWaitsForWorkersThatServe(t *testing.T) {
	p, _ := loadProject(t, "bench")
	b, err := p.GetService("bench")
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.GetService("worker")
	if err != nil {
		t.Fatal(err)
	}
	if dep, ok := b.DependsOn["worker"]; !ok || dep.Condition != types.ServiceConditionHealthy {
		t.Errorf("bench depends_on worker with condition %q, want %q: the bench starts before the workers have created the streams and fails with \"stream not found\"",
			dep.Condition, types.ServiceConditionHealthy)
	}
	if w.HealthCheck == nil || w.HealthCheck.Disable || len(w.HealthCheck.Test) == 0 {
		t.Errorf("worker has no healthcheck: nothing tells compose when the workers serve (e.g. loopgate runs against the cluster succeeds)")
	}
}

// `docker compose run --rm bench --runs 2000 --raw` (compose.yaml's own
// example) replaces the service's command, so --concurrency=64 used to go
// with it and the bench ran 16 at once (bench's default). The defaults
// compose means to keep are in the entrypoint, where a later flag of the
// user's still wins.
func TestBenchOverrideKeepsItsConcurrency(t *testing.T) {
	p, _ := loadProject(t, "bench")
	b, err := p.GetService("bench")
	if err != nil {
		t.Fatal(err)
	}
	// What `docker compose run --rm bench --runs 2000 --raw` executes.
	args := append(slices.Clone(b.Entrypoint), "--runs", "2000", "--raw")
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("nats", "", "")
	runs := fs.Int("runs", 100, "")
	conc := fs.Int("concurrency", 16, "")
	fs.Bool("raw", false, "")
	if len(args) < 2 || args[1] != "bench" {
		t.Fatalf("bench entrypoint %q", b.Entrypoint)
	}
	if err := fs.Parse(args[2:]); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	if *runs != 2000 || *conc != 64 {
		t.Errorf("docker compose run --rm bench --runs 2000 --raw runs %q: %d runs, %d at once; want 2000 runs, 64 at once as the service's default",
			args, *runs, *conc)
	}
}

// Pins the README: every worker shares one outbox ("one volume, as
// compose.yaml mounts it"), a named volume at <--data>/outbox, and the
// image creates that directory owned by the non-root user so the volume
// starts out writable (without it Docker creates the mount point as root).
func TestWorkersShareOneOutboxOwnedByTheirUser(t *testing.T) {
	p, _ := loadProject(t)
	w, err := p.GetService("worker")
	if err != nil {
		t.Fatal(err)
	}
	data := ""
	for _, a := range w.Command {
		if v, ok := strings.CutPrefix(a, "--data="); ok {
			data = v
		}
	}
	if data == "" {
		t.Fatalf("worker command %q sets no --data=", w.Command)
	}
	i := slices.IndexFunc(w.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == data+"/outbox" })
	if i < 0 {
		t.Fatalf("worker mounts nothing on %s/outbox: each container would keep its own outbox", data)
	}
	if v := w.Volumes[i]; v.Type != types.VolumeTypeVolume || v.Source == "" {
		t.Errorf("outbox mount %+v: want a named volume, shared by every worker", v)
	} else if _, ok := p.Volumes[v.Source]; !ok {
		t.Errorf("outbox volume %q is not declared at the top level", v.Source)
	}
	stages, _ := dockerfileStages(t, "../../Dockerfile")
	if !slices.ContainsFunc(stages["build"], func(l string) bool {
		return strings.Contains(l, "mkdir -p") && strings.Contains(l, "/out/loopgate-data/outbox")
	}) {
		t.Error("the build stage does not create loopgate-data/outbox: the outbox volume would be mounted on a root-owned directory")
	}
	if data != "/var/lib/loopgate" {
		t.Errorf("--data=%s, but the Dockerfile creates /var/lib/loopgate for the non-root user", data)
	}
}

// Pins what compose runs against the real binaries: every flag of the
// worker and bench command lines is one loopgate accepts, the nats
// services' --config is nats-server's, and deploy/nats-cluster.conf parses
// (nats-server -t) with NATS_NAME set as compose sets it. Builds both from
// the main module (a few seconds with the build cache of the module's own
// builds and tests; skipped with -short).
func TestComposeCommandLinesMatchTheBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds loopgate and nats-server")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go in PATH")
	}
	bin := t.TempDir()
	build := func(out, pkg string) string {
		t.Helper()
		path := filepath.Join(bin, out)
		cmd := exec.Command(gobin, "build", "-o", path, pkg)
		cmd.Dir = "../.."
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		return path
	}
	loopgate := build("loopgate", "./cmd/loopgate")
	natsServer := build("nats-server", "github.com/nats-io/nats-server/v2")

	help := func(bin string, args ...string) string {
		b, _ := exec.Command(bin, args...).CombinedOutput() // -h exits non-zero
		return string(b)
	}
	checkFlags := func(service string, args []string, usage string) {
		t.Helper()
		for _, a := range args {
			name, ok := strings.CutPrefix(a, "--")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			if !strings.Contains(usage, "  -"+name+" ") && !strings.Contains(usage, "  -"+name+"\n") &&
				!strings.Contains(usage, "--"+name) {
				t.Errorf("%s: flag --%s is not in its binary's usage:\n%s", service, name, usage)
			}
		}
	}

	p, _ := loadProject(t, "bench")
	w, _ := p.GetService("worker")
	if len(w.Command) == 0 || w.Command[0] != "worker" {
		t.Fatalf("worker command %q", w.Command)
	}
	checkFlags("worker", w.Command[1:], help(loopgate, "worker", "-h"))
	b, _ := p.GetService("bench")
	if len(b.Entrypoint) < 2 || b.Entrypoint[0] != "/usr/local/bin/loopgate" || b.Entrypoint[1] != "bench" {
		t.Fatalf("bench entrypoint %q", b.Entrypoint)
	}
	checkFlags("bench", append(slices.Clone(b.Entrypoint[2:]), b.Command...), help(loopgate, "bench", "-h"))

	for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
		s, _ := p.GetService(n)
		checkFlags(n, s.Command, help(natsServer, "--help"))
		name := s.Environment["NATS_NAME"]
		if name == nil || *name != n {
			t.Errorf("%s: NATS_NAME %v, want %s (server_name: $NATS_NAME)", n, name, n)
			continue
		}
		cmd := exec.Command(natsServer, "-c", "../nats-cluster.conf", "-t")
		cmd.Env = append(os.Environ(), "NATS_NAME="+*name)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: nats-server -c deploy/nats-cluster.conf -t: %v\n%s", n, err, out)
		}
	}
}

// The cluster has no authorization and the example policy's approver
// keys are committed (examples/cityops/keys), yet nats-1 used to publish
// "4222:4222" and "8222:8222", which Docker binds on every interface of
// the host (0.0.0.0), past most host firewalls: anyone who reached the
// host can submit tasks, sign approvals as supervisor@cityops with the
// public key, publish events and read the monitoring endpoint. Everything
// else in loopgate listens on loopback by default (serve's 127.0.0.1:4222,
// deploy/nats-accounts.conf, the README's cluster without Docker), and
// compose.yaml's own instructions connect to nats://127.0.0.1:4222.
func TestPublishedPortsStayOnLoopback(t *testing.T) {
	p, _ := loadProject(t, "bench")
	for _, s := range p.Services {
		for _, port := range s.Ports {
			if port.Published == "" {
				continue
			}
			if port.HostIP != "127.0.0.1" && port.HostIP != "::1" {
				t.Errorf("%s publishes %s on host address %q (every interface): want 127.0.0.1:%s:%d",
					s.Name, port.Published, port.HostIP, port.Published, port.Target)
			}
		}
	}
}
