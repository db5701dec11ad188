package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loopgate/loopgate/metrics"
)

// metricsServer serves, for serve and worker given --metrics-listen,
// /metrics (Prometheus exposition of the process's own registry),
// /healthz (200 while the process lives) and /readyz (200 only while
// ready says so; docs/metrics.md). It listens from the start, before the
// stack is up: until then /readyz answers 503 "starting".
type metricsServer struct {
	reg      *prometheus.Registry
	recorder *metrics.Recorder
	srv      *http.Server
	addr     string // where it listens, the port chosen if the flag's was 0
	ready    atomic.Pointer[func() error]
	served   chan error
}

// errStarting and errDraining are /readyz's answers before the stack is
// up and once the process is stopping.
var (
	errStarting = errors.New("starting")
	errDraining = errors.New("draining: the process is stopping")
)

// startMetricsServer listens on addr and serves in the background: the
// Go runtime's and the process's metrics, and the workers' (recorder,
// which the stack's pool is given).
func startMetricsServer(addr string, log *slog.Logger) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rec, err := metrics.NewRecorder(reg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %q: %w", addr, err)
	}
	m := &metricsServer{reg: reg, recorder: rec, addr: ln.Addr().String(), served: make(chan error, 1)}
	m.setReady(func() error { return errStarting })
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := (*m.ready.Load())(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { m.served <- m.srv.Serve(ln) }()
	log.Info("serving metrics", "metrics_addr", m.addr, "paths", "/metrics /healthz /readyz")
	return m, nil
}

// setReady makes ready what /readyz asks from now on.
func (m *metricsServer) setReady(ready func() error) { m.ready.Store(&ready) }

// close stops serving, letting requests in progress finish until ctx is
// done. It is safe on a nil server.
func (m *metricsServer) close(ctx context.Context) error {
	if m == nil {
		return nil
	}
	err := m.srv.Shutdown(ctx)
	if serr := <-m.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// ready reports whether the stack does work now: connected to NATS (the
// layout was ensured and the pool bound to its consumer when the stack
// started) and its pool ready (worker.Pool.Ready: not stopping, no
// JetStream outage met). A stack without workers is ready while
// connected.
func (s *stack) ready() error {
	if !s.nc.IsConnected() {
		return fmt.Errorf("not connected to NATS (%s)", s.nc.Status())
	}
	if s.pool == nil {
		return nil
	}
	return s.pool.Ready()
}

// startMetrics starts the metrics server when addr is given, and has the
// stack o describes count into it. Without addr it returns nil, on which
// the other methods do nothing.
func startMetrics(addr string, o *stackOptions) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	m, err := startMetricsServer(addr, o.log)
	if err != nil {
		return nil, err
	}
	o.metrics = m.recorder
	return m, nil
}

// serving has /readyz ask s from now on, and /metrics read the backlog
// and the parked runs from s's JetStream.
func (m *metricsServer) serving(s *stack) {
	if m == nil {
		return
	}
	m.reg.MustRegister(metrics.NewCluster(s.js, 0))
	m.setReady(s.ready)
}

// draining has /readyz answer 503 from now on: the process is stopping.
func (m *metricsServer) draining() {
	if m == nil {
		return
	}
	m.setReady(func() error { return errDraining })
}
