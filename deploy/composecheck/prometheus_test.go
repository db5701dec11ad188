package composecheck

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/compose-spec/compose-go/v2/types"
)

// TestPrometheusScrapesTheWorkers: compose.yaml runs a Prometheus whose
// config (deploy/prometheus.yml, mounted read-only) finds every worker
// container by the service's name and scrapes the port the workers serve
// their metrics on (--metrics-listen).
func TestPrometheusScrapesTheWorkers(t *testing.T) {
	p, _ := loadProject(t)
	prom, err := p.GetService("prometheus")
	if err != nil {
		t.Fatalf("service prometheus: %v", err)
	}
	if !slices.ContainsFunc(prom.Volumes, func(v types.ServiceVolumeConfig) bool {
		return strings.HasSuffix(v.Source, "/deploy/prometheus.yml") && v.Target == "/etc/prometheus/prometheus.yml" && v.ReadOnly
	}) {
		t.Errorf("prometheus does not mount deploy/prometheus.yml read-only at /etc/prometheus/prometheus.yml: %+v", prom.Volumes)
	}
	if !slices.Contains(prom.Command, "--config.file=/etc/prometheus/prometheus.yml") {
		t.Errorf("prometheus command %q does not read the mounted config", prom.Command)
	}
	w, _ := p.GetService("worker")
	var port string
	for _, a := range w.Command {
		if addr, ok := strings.CutPrefix(a, "--metrics-listen="); ok {
			_, port, _ = strings.Cut(addr, ":")
		}
	}
	if port == "" {
		t.Fatalf("worker command %q serves no metrics (--metrics-listen)", w.Command)
	}
	b, err := os.ReadFile("../prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
			DNS     []struct {
				Names []string `yaml:"names"`
				Type  string   `yaml:"type"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &conf); err != nil {
		t.Fatalf("deploy/prometheus.yml: %v", err)
	}
	found := false
	for _, sc := range conf.ScrapeConfigs {
		for _, d := range sc.DNS {
			if slices.Contains(d.Names, "worker") && d.Type == "A" && port == strconv.Itoa(d.Port) {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("deploy/prometheus.yml scrapes no A records of \"worker\" on port %s: %+v", port, conf.ScrapeConfigs)
	}
}
