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
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadProject loads ../../compose.yaml as docker compose does; dir is the
// repository, where it resolves build contexts.
func loadProject(t *testing.T, profiles ...string) (p *types.Project, dir string) {
	t.Helper()
	path, err := filepath.Abs("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithWorkingDirectory(filepath.Dir(path)), cli.WithOsEnv, cli.WithProfiles(profiles))
	if err != nil {
		t.Fatal(err)
	}
	p, err = opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose.yaml does not load: %v", err)
	}
	return p, filepath.Dir(path)
}

func TestComposeFileIsValidAndDescribesTheCluster(t *testing.T) {
	p, _ := loadProject(t)
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

// The bench service loads the cluster from inside its network with
// loopgate bench, against all three nodes, only when asked for.
func TestComposeHasABenchOnlyWhenAskedFor(t *testing.T) {
	p, _ := loadProject(t)
	if _, err := p.GetService("bench"); err == nil {
		t.Error("bench starts with docker compose up: it should sit behind a profile")
	}
	p, _ = loadProject(t, "bench")
	b, err := p.GetService("bench")
	if err != nil {
		t.Fatalf("service bench with its profile: %v", err)
	}
	entry := strings.Join(b.Entrypoint, " ")
	if b.Image != "loopgate" || b.Build == nil || b.Build.Target != "loopgate" ||
		entry != "/usr/local/bin/loopgate bench --nats=nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222 --runs=500 --concurrency=64" {
		t.Errorf("bench: image %q, build %+v, entrypoint %q: want loopgate bench against the three nodes, 500 runs, 64 at once", b.Image, b.Build, entry)
	}
}

// TestComposeBuildsTheServerItIsTestedWith checks that the nats nodes run
// the nats-server that go.mod pins (built by the Dockerfile's nats stage),
// not a registry image of another release, and that both images create,
// as their non-root user, the directories compose mounts volumes on.
func TestComposeBuildsTheServerItIsTestedWith(t *testing.T) {
	p, repo := loadProject(t)
	stages, last := dockerfileStages(t, "../../Dockerfile")
	wantTarget := map[string]string{"nats-1": "nats", "nats-2": "nats", "nats-3": "nats", "worker": "loopgate"}
	for name, target := range wantTarget {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		if s.Build == nil {
			t.Errorf("%s: image %q is pulled, want it built by the Dockerfile (target %s)", name, s.Image, target)
			continue
		}
		if s.Build.Target != target {
			t.Errorf("%s: build target %q, want %q", name, s.Build.Target, target)
		}
		if _, ok := stages[s.Build.Target]; !ok {
			t.Errorf("%s: the Dockerfile has no stage %q (stages %v)", name, s.Build.Target, stages)
		}
		if s.Build.Context != repo {
			t.Errorf("%s: build context %q, want the repository %q", name, s.Build.Context, repo)
		}
	}
	build := strings.Join(stages["build"], "\n")
	if !strings.Contains(build, "go build -trimpath -o /out/nats-server github.com/nats-io/nats-server/v2") {
		t.Error("the build stage does not build nats-server from go.mod's version")
	}
	for stage, dir := range map[string]string{"nats": "/data", "loopgate": "/var/lib/loopgate"} {
		if !slices.ContainsFunc(stages[stage], func(l string) bool {
			return strings.HasPrefix(l, "COPY ") && strings.Contains(l, "--chown=65532:65532") && strings.HasSuffix(l, " "+dir)
		}) {
			t.Errorf("stage %s does not create %s owned by the non-root user", stage, dir)
		}
	}
	if last != "loopgate" {
		t.Errorf("the Dockerfile's last stage is %q, want loopgate (the default target)", last)
	}
}

// dockerfileStages returns the Dockerfile's instructions by stage name
// (continuation lines joined, spaces collapsed) and the last stage's name.
func dockerfileStages(t *testing.T, path string) (stages map[string][]string, last string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	stages = map[string][]string{}
	for line := range strings.Lines(text) {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); f[0] == "FROM" {
			last = ""
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				last = f[3]
			}
			stages[last] = nil
			continue
		}
		stages[last] = append(stages[last], line)
	}
	return stages, last
}

// TestTheBuildImageHasTheGoThatGoModNeeds checks that the Dockerfile's
// build stage names a golang image whose Go is at least go.mod's go
// directive. The official images set GOTOOLCHAIN=local, so a bare
// golang:1.26 that a machine pulled before go.mod's patch release (or
// still has cached) refuses to build the module at all.
func TestTheBuildImageHasTheGoThatGoModNeeds(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var need string
	for line := range strings.Lines(string(mod)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "go" {
			need = f[1]
		}
	}
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var image string
	for line := range strings.Lines(string(df)) {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "FROM" && f[3] == "build" {
			image = f[1]
		}
	}
	tag, ok := strings.CutPrefix(image, "golang:")
	if need == "" || !ok {
		t.Fatalf("go.mod's go %q, the build stage's image %q: want a go directive and a golang image", need, image)
	}
	tag, _, _ = strings.Cut(tag, "-") // golang:1.26.8-bookworm
	if goVersionLess(tag, need) {
		t.Errorf("the build stage's image %s has Go %s at the least, go.mod needs %s: name that patch release or a later one", image, tag, need)
	}
}

// goVersionLess compares dotted Go versions (1.26, 1.26.5); a missing
// part counts as 0, the least a floating tag like golang:1.26 may be.
func goVersionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
