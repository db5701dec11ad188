package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
)

// TestServeCountsAScenarioInItsMetrics: a CityOps run through loopgate
// serve --metrics-listen, its three drafts approved, is counted on
// /metrics as its trail says: one run started and one finished done for
// its agent, its tool calls by tool and status, its questions and their
// decisions, a model call and a step per proposal, and every event
// appended; no label carries a run id. /healthz and /readyz answer 200.
func TestServeCountsAScenarioInItsMetrics(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir(), "--metrics-listen", "127.0.0.1:0")
	addr := metricsAddr(t, srv.stderr.String())
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const agent = "escalation-assistant"
	runID := events.RunID("cityops", "metrics-1")
	msgs := collect(t, nc, runID, func() { publishTask(t, nc, plainTask("metrics-1", agent), "metrics-1") })
	waitFinishedRecord(t, nc, runID)

	// What the trail holds.
	tools := map[[2]string]float64{} // tool, status
	asked := map[string]float64{}    // tool
	var proposals, approved float64
	for _, m := range msgs {
		var e struct {
			Type events.Type `json:"type"`
			Tool string      `json:"tool"`
			Data struct {
				Status   string          `json:"status"`
				Decision json.RawMessage `json:"decision"` // a proposal's is an object
				Reason   string          `json:"reason"`
			} `json:"data"`
		}
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case events.TypeExecuted:
			tools[[2]string{e.Tool, e.Data.Status}]++
		case events.TypeApprovalRequested:
			asked[e.Tool]++
		case events.TypeApproved:
			if string(e.Data.Decision) != `"approve"` {
				t.Fatalf("the approver's decision is recorded as %q", e.Data.Decision)
			}
			approved++
		case events.TypeProposed:
			proposals++
		case events.TypeFinished:
			if e.Data.Reason != "done" {
				t.Fatalf("the run finished %s, want done", e.Data.Reason)
			}
		}
	}
	if len(tools) == 0 || approved != 3 || proposals == 0 {
		t.Fatalf("the scenario's trail has tool calls %v, %v approvals, %v proposals", tools, approved, proposals)
	}

	body := get(t, "http://"+addr+"/metrics", http.StatusOK)
	fams := parseExposition(t, body)
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"loopgate_runs_started_total", map[string]string{"agent": agent}, 1},
		{"loopgate_runs_finished_total", map[string]string{"agent": agent, "reason": "done"}, 1},
		{"loopgate_runs_finished_total", nil, 1},
		{"loopgate_steps_total", map[string]string{"agent": agent}, proposals},
		{"loopgate_model_calls_total", map[string]string{"agent": agent, "model": "scripted"}, proposals},
		{"loopgate_model_call_duration_seconds", map[string]string{"model": "scripted"}, proposals},
		{"loopgate_approvals_requested_total", nil, approved},
		{"loopgate_approvals_decided_total", map[string]string{"outcome": "approve"}, approved},
		{"loopgate_approvals_decided_total", nil, approved},
		{"loopgate_approval_wait_seconds", map[string]string{"outcome": "approve"}, approved},
		{"loopgate_events_appended_total", nil, float64(len(msgs))},
		{"loopgate_poison_stops_total", nil, 0},
		{"loopgate_runs_parked", nil, 0},
		{"loopgate_approvals_pending", nil, 0},
		{"loopgate_work_backlog", map[string]string{"state": "pending"}, 0},
		{"loopgate_jetstream_up", nil, 1},
	}
	var calls float64
	for k, n := range tools {
		want = append(want, struct {
			name   string
			labels map[string]string
			value  float64
		}{"loopgate_tool_calls_total", map[string]string{"tool": k[0], "status": k[1]}, n})
		calls += n
	}
	for tool, n := range asked {
		want = append(want, struct {
			name   string
			labels map[string]string
			value  float64
		}{"loopgate_approvals_requested_total", map[string]string{"tool": tool}, n})
	}
	want = append(want, struct {
		name   string
		labels map[string]string
		value  float64
	}{"loopgate_tool_calls_total", nil, calls}, struct {
		name   string
		labels map[string]string
		value  float64
	}{"loopgate_tool_call_duration_seconds", nil, calls})
	for _, w := range want {
		if got, ok := sample(fams, w.name, w.labels); !ok || got != w.value {
			t.Errorf("%s%v = %v (found %t), want %v", w.name, w.labels, got, ok, w.value)
		}
	}
	if got, _ := sample(fams, "loopgate_append_duration_seconds", nil); got < 1 || got > float64(len(msgs)) {
		t.Errorf("loopgate_append_duration_seconds counts %v appends, want 1 to %d (one per append of one or more events)", got, len(msgs))
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "run_id" || strings.Contains(l.GetValue(), runID) || strings.Contains(l.GetValue(), "metrics-1") {
					t.Errorf("%s has a label naming the run: %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	get(t, "http://"+addr+"/healthz", http.StatusOK)
	get(t, "http://"+addr+"/readyz", http.StatusOK)
}

// TestWorkerIsNotReadyWhileItsNATSServerIsDown: loopgate worker's
// /readyz answers 200 while it serves, 503 while its NATS server is down,
// and 200 again once the server is back; /healthz answers 200 throughout.
func TestWorkerIsNotReadyWhileItsNATSServerIsDown(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	listen := freeAddr(t)
	startNATS := func() *natsd.Server {
		s, err := natsd.Start(natsd.Config{Listen: listen, StoreDir: filepath.Join(store, "jetstream")})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ns := startNATS()
	t.Cleanup(func() { ns.Shutdown() })
	maddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	stderr := &syncBuffer{}
	go func() {
		done <- Main(ctx, []string{"worker", "--nats", "nats://" + listen, "--config", "../examples/cityops/loopgate.yaml",
			"--data", t.TempDir(), "--workers", "1", "--log-format", "json", "--metrics-listen", maddr}, nil, io.Discard, stderr)
	}()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("worker exited %d\n%s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("worker did not stop")
		}
	}()
	base := "http://" + maddr
	untilStatus(t, base+"/readyz", http.StatusOK, stderr)
	get(t, base+"/healthz", http.StatusOK)

	ns.Shutdown()
	untilStatus(t, base+"/readyz", http.StatusServiceUnavailable, stderr)
	get(t, base+"/healthz", http.StatusOK)

	ns = startNATS()
	untilStatus(t, base+"/readyz", http.StatusOK, stderr)
	get(t, base+"/healthz", http.StatusOK)
}

// metricsAddr is the address serve's metrics server listens on, from its
// "serving metrics" log line (written before serve says it serves).
func metricsAddr(t *testing.T, logs string) string {
	t.Helper()
	for line := range strings.Lines(logs) {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"metrics_addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving metrics" && rec.Addr != "" {
			return rec.Addr
		}
	}
	t.Fatalf("no serving metrics line in:\n%s", logs)
	return ""
}

// waitFinishedRecord waits for the runs projection to say the run
// finished: its worker writes the record after the finished event is
// stored and counted, so the metrics count the whole run by then.
func waitFinishedRecord(t *testing.T, nc *nats.Conn, runID string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), journal.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(t.Context(), "cityops."+runID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e := <-w.Updates():
			var rec journal.RunRecord
			if e != nil && json.Unmarshal(e.Value(), &rec) == nil && rec.Status == journal.RunFinished {
				return
			}
		case <-timeout:
			t.Fatalf("run %s has no finished record", runID)
		}
	}
}

// get fetches url and fails the test unless it answers status; it
// returns the body.
func get(t *testing.T, url string, status int) string {
	t.Helper()
	code, body, err := fetch(url)
	if err != nil || code != status {
		t.Fatalf("GET %s: %d %v, want %d\n%s", url, code, err, status, body)
	}
	return body
}

func fetch(url string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// untilStatus asks url until it answers status, for at most 30s: a
// readiness endpoint says what holds now, and has no event to wait on.
func untilStatus(t *testing.T, url string, status int, logs *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		code, body, err := fetch(url)
		if err == nil && code == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q %v; want %d by now\n%s", url, code, body, err, status, logs.String())
		}
		<-tick.C
	}
}

// parseExposition parses a /metrics body in the text format.
func parseExposition(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// sample sums the series of family name whose labels include labels: a
// counter's or gauge's value, a histogram's count of observations.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue series
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		default:
			panic(fmt.Sprintf("%s: unexpected metric type", name))
		}
	}
	return sum, found
}
