package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/journal"
)

// Cluster is a prometheus.Collector of what JetStream holds for every
// process at once, read at each scrape: the work queue's backlog (the
// workers consumer's messages not yet delivered, and delivered but not
// acknowledged) and the questions awaiting a human, with the runs they
// park (loopgate pending's listing). Every process reports the same
// values: across processes take one (max), do not sum. A scrape costs two
// JetStream requests and one per question pending, all bounded by the
// Cluster's timeout; when one fails, its gauges are left out of that
// scrape and loopgate_jetstream_up is 0.
type Cluster struct {
	js      jetstream.JetStream
	timeout time.Duration

	mu    sync.Mutex
	store *approvals.Store // opened at the first scrape that can

	backlog, parked, pending, up *prometheus.Desc
}

// NewCluster makes a Cluster reading js, each scrape's requests bounded by
// timeout. Zero timeout defaults to 2s.
func NewCluster(js jetstream.JetStream, timeout time.Duration) *Cluster {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return &Cluster{
		js:      js,
		timeout: timeout,
		backlog: prometheus.NewDesc("loopgate_work_backlog",
			"Work messages of the workers consumer: pending (not yet delivered) or ack_pending (delivered, not yet acknowledged).", []string{"state"}, nil),
		parked: prometheus.NewDesc("loopgate_runs_parked",
			"Runs waiting for a human now: runs with a question pending, as loopgate pending lists them.", nil, nil),
		pending: prometheus.NewDesc("loopgate_approvals_pending",
			"Questions awaiting a human now, as loopgate pending lists them.", nil, nil),
		up: prometheus.NewDesc("loopgate_jetstream_up",
			"1 when this scrape's JetStream requests were answered, 0 when one was not.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Cluster) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.parked
	ch <- c.pending
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *Cluster) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	up := 1.0
	if cons, err := c.js.Consumer(ctx, journal.StreamWork, journal.ConsumerWorkers); err == nil {
		info := cons.CachedInfo()
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(info.NumPending), "pending")
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(info.NumAckPending), "ack_pending")
	} else {
		up = 0
	}
	if questions, runs, err := c.waiting(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(questions))
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(runs))
	} else {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}

// waiting counts the questions awaiting a human and the runs they
// belong to, as loopgate pending lists them (approvals.Store.Pending: the
// LOOPGATE_PENDING index, each listing read back from its entry, so a
// listing whose deletion was lost is not counted). It costs a request per
// question pending.
func (c *Cluster) waiting(ctx context.Context) (questions, runs int, err error) {
	store, err := c.approvals(ctx)
	if err != nil {
		return 0, 0, err
	}
	pending, err := store.Pending(ctx, "")
	if err != nil {
		return 0, 0, err
	}
	seen := map[string]bool{}
	for _, e := range pending {
		seen[e.Tenant+"."+e.RunID] = true
	}
	return len(pending), len(seen), nil
}

// approvals opens the approvals store at the first scrape that reaches
// JetStream, and keeps it.
func (c *Cluster) approvals(ctx context.Context) (*approvals.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store != nil {
		return c.store, nil
	}
	kv, err := c.js.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		return nil, err
	}
	index, err := approvals.OpenIndex(ctx, c.js, journal.StreamPending)
	if err != nil {
		return nil, err
	}
	c.store = approvals.NewStore(kv, index)
	return c.store, nil
}
