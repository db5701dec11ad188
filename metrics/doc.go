// Package metrics exposes what loopgate does as Prometheus metrics:
// Recorder counts what a worker pool does (worker.Metrics), Cluster reads
// the queue's backlog and the runs waiting for a human from JetStream at
// scrape time. Both register on a *prometheus.Registry the process makes
// and passes in: there is no global registry. docs/metrics.md lists every
// metric.
package metrics
