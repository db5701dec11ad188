package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/worker"
)

// Recorder is worker.Metrics on Prometheus counters and histograms. Its
// labels take only the values worker.Metrics is given: agent, tool and
// model names from the config, and reason, status and outcome from fixed
// sets. A Recorder counts what its own process did: across the processes
// of a pool, sum.
type Recorder struct {
	runsStarted      *prometheus.CounterVec
	runsFinished     *prometheus.CounterVec
	steps            *prometheus.CounterVec
	toolCalls        *prometheus.CounterVec
	toolDuration     *prometheus.HistogramVec
	modelCalls       *prometheus.CounterVec
	modelDuration    *prometheus.HistogramVec
	modelTokens      *prometheus.CounterVec
	modelCost        *prometheus.CounterVec
	approvalsAsked   *prometheus.CounterVec
	approvalsDecided *prometheus.CounterVec
	approvalWait     *prometheus.HistogramVec
	eventsAppended   prometheus.Counter
	appendDuration   prometheus.Histogram
	outages          prometheus.Counter
	retries          prometheus.Counter
	redeliveries     prometheus.Counter
	poisonStops      prometheus.Counter
}

var _ worker.Metrics = (*Recorder)(nil)

// NewRecorder makes a Recorder and registers its metrics on reg. It fails
// when reg holds metrics of the same names (one Recorder per registry).
func NewRecorder(reg prometheus.Registerer) (*Recorder, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	r := &Recorder{
		runsStarted:      counter("loopgate_runs_started_total", "Runs whose started event this process stored.", "agent"),
		runsFinished:     counter("loopgate_runs_finished_total", "Runs whose finished event this process stored, by reason.", "agent", "reason"),
		steps:            counter("loopgate_steps_total", "Steps: proposed events (the model's decisions) this process stored.", "agent"),
		toolCalls:        counter("loopgate_tool_calls_total", "Tool calls ended (executed events stored), by tool and status.", "tool", "status"),
		toolDuration:     histogram("loopgate_tool_call_duration_seconds", "How long tool calls took, by tool.", latencyBuckets, "tool"),
		modelCalls:       counter("loopgate_model_calls_total", "Model calls on record (proposed and discarded events stored), by agent and model.", "agent", "model"),
		modelDuration:    histogram("loopgate_model_call_duration_seconds", "How long model calls took, by model.", modelBuckets, "model"),
		modelTokens:      counter("loopgate_model_tokens_total", "Tokens of model calls on record, by model and direction (input, output).", "model", "direction"),
		modelCost:        counter("loopgate_model_cost_usd_total", "What model calls on record cost in USD by the config's pricing, by model.", "model"),
		approvalsAsked:   counter("loopgate_approvals_requested_total", "Questions to a human (approval_requested events stored), by tool.", "tool"),
		approvalsDecided: counter("loopgate_approvals_decided_total", "Questions decided (approved events recorded), by outcome.", "outcome"),
		approvalWait:     histogram("loopgate_approval_wait_seconds", "How long a decided question waited, by outcome.", waitBuckets, "outcome"),
		eventsAppended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loopgate_events_appended_total", Help: "Run events this process appended."}),
		appendDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "loopgate_append_duration_seconds", Help: "How long an append of a run's events took, outage waits included.", Buckets: appendBuckets}),
		outages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loopgate_jetstream_outages_total", Help: "Writes or messages this process began holding because JetStream could not take them."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loopgate_jetstream_retries_total", Help: "Tries again of writes or messages held through a JetStream outage."}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loopgate_work_redeliveries_total", Help: "Work messages this process took that had been delivered before."}),
		poisonStops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loopgate_poison_stops_total", Help: "Runs stopped (or tasks rejected) by this process because their work message ran out of deliveries."}),
	}
	for _, c := range []prometheus.Collector{
		r.runsStarted, r.runsFinished, r.steps, r.toolCalls, r.toolDuration, r.modelCalls, r.modelDuration,
		r.modelTokens, r.modelCost, r.approvalsAsked, r.approvalsDecided, r.approvalWait,
		r.eventsAppended, r.appendDuration, r.outages, r.retries, r.redeliveries, r.poisonStops,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Buckets, in seconds: tool calls run from a millisecond to minutes;
// model calls from a tenth of a second to minutes; a question waits from
// seconds to its TTL (hours); an append takes a millisecond or a few, an
// fsync's worth, and longer only under load or through an outage.
var (
	latencyBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	modelBuckets   = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120}
	waitBuckets    = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600}
	appendBuckets  = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30}
)

// RunStarted implements worker.Metrics.
func (r *Recorder) RunStarted(agent string) { r.runsStarted.WithLabelValues(agent).Inc() }

// RunFinished implements worker.Metrics.
func (r *Recorder) RunFinished(agent string, reason events.Reason) {
	r.runsFinished.WithLabelValues(agent, string(reason)).Inc()
}

// Step implements worker.Metrics.
func (r *Recorder) Step(agent string) { r.steps.WithLabelValues(agent).Inc() }

// ToolCall implements worker.Metrics.
func (r *Recorder) ToolCall(tool, status string, took time.Duration) {
	r.toolCalls.WithLabelValues(tool, status).Inc()
	r.toolDuration.WithLabelValues(tool).Observe(took.Seconds())
}

// ModelCall implements worker.Metrics.
func (r *Recorder) ModelCall(agent, model string, took time.Duration, usage events.Usage, costUSD float64) {
	r.modelCalls.WithLabelValues(agent, model).Inc()
	r.modelDuration.WithLabelValues(model).Observe(took.Seconds())
	r.modelTokens.WithLabelValues(model, "input").Add(float64(max(usage.InputTokens, 0)))
	r.modelTokens.WithLabelValues(model, "output").Add(float64(max(usage.OutputTokens, 0)))
	r.modelCost.WithLabelValues(model).Add(max(costUSD, 0))
}

// ApprovalRequested implements worker.Metrics.
func (r *Recorder) ApprovalRequested(tool string) { r.approvalsAsked.WithLabelValues(tool).Inc() }

// ApprovalDecided implements worker.Metrics.
func (r *Recorder) ApprovalDecided(outcome string, waited time.Duration) {
	r.approvalsDecided.WithLabelValues(outcome).Inc()
	r.approvalWait.WithLabelValues(outcome).Observe(max(waited, 0).Seconds())
}

// EventsAppended implements worker.Metrics.
func (r *Recorder) EventsAppended(n int, took time.Duration) {
	r.eventsAppended.Add(float64(n))
	r.appendDuration.Observe(took.Seconds())
}

// Outage implements worker.Metrics.
func (r *Recorder) Outage() { r.outages.Inc() }

// Retry implements worker.Metrics.
func (r *Recorder) Retry() { r.retries.Inc() }

// Redelivered implements worker.Metrics.
func (r *Recorder) Redelivered() { r.redeliveries.Inc() }

// PoisonStop implements worker.Metrics.
func (r *Recorder) PoisonStop() { r.poisonStops.Inc() }
