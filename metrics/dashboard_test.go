package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopgate/loopgate/metrics"
)

// TestTheDashboardQueriesOnlyMetricsLoopgateExposes: deploy/grafana-
// dashboard.json is valid JSON whose panels query loopgate metrics, and
// every loopgate_ metric a query names (a histogram's by its _bucket,
// _sum or _count series) is one a Recorder or a Cluster describes.
func TestTheDashboardQueriesOnlyMetricsLoopgateExposes(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana-dashboard.json: %v", err)
	}
	exposed := describedNames(t)
	name := regexp.MustCompile(`loopgate_[a-z_]+`)
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			found := name.FindAllString(target.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q queries no loopgate metric: %q", p.Title, target.Expr)
			}
			for _, n := range found {
				if !exposed[n] {
					n = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
				}
				if !exposed[n] {
					t.Errorf("panel %q queries %s, which loopgate does not expose", p.Title, n)
				}
				queried[n] = true
			}
		}
	}
	for n := range exposed {
		if !queried[n] {
			t.Errorf("no panel shows %s", n)
		}
	}
}

// describedNames are the names of the metrics a Recorder and a Cluster
// describe.
func describedNames(t *testing.T) map[string]bool {
	t.Helper()
	var reg registered
	if _, err := metrics.NewRecorder(&reg); err != nil {
		t.Fatal(err)
	}
	reg = append(reg, metrics.NewCluster(nil, 0)) // described only: it reads JetStream at Collect
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range reg {
			c.Describe(ch)
		}
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read a name in %s", d)
		}
		names[m[1]] = true
	}
	if !names["loopgate_runs_started_total"] || !names["loopgate_runs_parked"] {
		t.Fatalf("the Recorder and the Cluster describe %v", names)
	}
	return names
}

// registered is a prometheus.Registerer that keeps what is registered.
type registered []prometheus.Collector

func (r *registered) Register(c prometheus.Collector) error {
	*r = append(*r, c)
	return nil
}

func (r *registered) MustRegister(cs ...prometheus.Collector) { *r = append(*r, cs...) }

func (r *registered) Unregister(prometheus.Collector) bool { return false }
