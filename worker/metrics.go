package worker

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
)

// Metrics is told what a pool does, at the one place where each thing
// happens, so each is counted once by the process that did it: summed
// across the processes of a pool, it counts the pool's work. Every label
// value it is given comes from the config (agent, tool, model) or from a
// fixed set (reason, status, outcome), never a run id or free text.
// Methods are called from many goroutines at once and must not block.
//
// Runs, steps, tool calls, model calls and approval questions are counted
// from the events that hold them, when those are durable (a step's events
// appended together are counted together, once the append succeeds):
// what the metrics say, the trails say.
type Metrics interface {
	// RunStarted: a run's started event is stored.
	RunStarted(agent string)
	// RunFinished: a run's finished event is stored, for reason.
	RunFinished(agent string, reason events.Reason)
	// Step: a proposed event (the model's decision of a step) is stored.
	Step(agent string)
	// ToolCall: an executed event is stored: the call's end, with its
	// status (events.Exec*) and how long the tool took.
	ToolCall(tool, status string, took time.Duration)
	// ModelCall: a model call is on record (a proposed event, or a
	// discarded one for a call whose decision another pass at the run
	// made): which agent's model answered, model naming it as the config
	// does (provider, or provider/name), with its latency, tokens and cost
	// in USD by the config's pricing (0 when unpriced).
	ModelCall(agent, model string, took time.Duration, usage events.Usage, costUSD float64)
	// ApprovalRequested: an approval_requested event is stored (a
	// question to a human about a call of tool).
	ApprovalRequested(tool string)
	// ApprovalDecided: a decision is recorded as an approved event (the
	// approvals handler's append, durable when it returns; an expiry's,
	// staged with its step's events when the pool batches them): outcome
	// is the decision (approvals.Decision: approve, deny, expired,
	// mark_done, retry, abandon), waited how long the question waited,
	// from its request to its decision.
	ApprovalDecided(outcome string, waited time.Duration)
	// EventsAppended: n events of a run were appended in one store, which
	// took took (outage waits included).
	EventsAppended(n int, took time.Duration)
	// Outage: the pool began holding a write or a message because
	// JetStream could not take it (its store full, its cluster electing,
	// no answer).
	Outage()
	// Retry: a write or message held through an outage was tried again.
	Retry()
	// Redelivered: a worker took a work message delivered before.
	Redelivered()
	// PoisonStop: this process stopped a run (or rejected a task) whose
	// work message ran out of deliveries.
	PoisonStop()
}

// noMetrics is the Metrics of a pool given none.
type noMetrics struct{}

func (noMetrics) RunStarted(string)                                              {}
func (noMetrics) RunFinished(string, events.Reason)                              {}
func (noMetrics) Step(string)                                                    {}
func (noMetrics) ToolCall(string, string, time.Duration)                         {}
func (noMetrics) ModelCall(string, string, time.Duration, events.Usage, float64) {}
func (noMetrics) ApprovalRequested(string)                                       {}
func (noMetrics) ApprovalDecided(string, time.Duration)                          {}
func (noMetrics) EventsAppended(int, time.Duration)                              {}
func (noMetrics) Outage()                                                        {}
func (noMetrics) Retry()                                                         {}
func (noMetrics) Redelivered()                                                   {}
func (noMetrics) PoisonStop()                                                    {}

// metrics is the pool's Metrics, never nil.
func (p *Pool) metrics() Metrics {
	if p.opts.Metrics == nil {
		return noMetrics{}
	}
	return p.opts.Metrics
}

// stored tells the pool's Metrics about evs, a run's events an append has
// just made durable, in took.
func (r *run) stored(evs []events.Event, took time.Duration) {
	m := r.p.metrics()
	if _, ok := m.(noMetrics); ok {
		return
	}
	agent := r.task.Agent
	for i := range evs {
		e := &evs[i]
		switch e.Type {
		case events.TypeStarted:
			m.RunStarted(agent)
		case events.TypeProposed:
			m.Step(agent)
			var d events.ProposedData
			_ = e.Decode(&d)
			m.ModelCall(agent, r.p.modelLabel(agent), time.Duration(d.LatencyMS)*time.Millisecond, d.Usage, d.CostUSD)
		case events.TypeDiscarded:
			var d events.DiscardedData
			_ = e.Decode(&d)
			m.ModelCall(agent, r.p.modelLabel(agent), time.Duration(d.LatencyMS)*time.Millisecond, d.Usage, d.CostUSD)
		case events.TypeExecuted:
			var d events.ExecutedData
			_ = e.Decode(&d)
			m.ToolCall(e.Tool, d.Status, time.Duration(d.LatencyMS)*time.Millisecond)
		case events.TypeApprovalRequested:
			m.ApprovalRequested(e.Tool)
		case events.TypeFinished:
			var d events.FinishedData
			_ = e.Decode(&d)
			m.RunFinished(agent, d.Reason)
		}
	}
	m.EventsAppended(len(evs), took)
}

// modelLabel names an agent's model as the config does: its provider,
// and the model's name where the config gives one. An agent no longer
// configured (a run stopped after its profile was removed) has "unknown".
func (p *Pool) modelLabel(agent string) string {
	prof, ok := p.app.Agents[agent]
	switch {
	case !ok:
		return "unknown"
	case prof.Model.Name == "":
		return prof.Model.Provider
	}
	return prof.Model.Provider + "/" + prof.Model.Name
}

// redelivery tells the pool's Metrics when msg was delivered before.
func (p *Pool) redelivery(msg jetstream.Msg) {
	if _, none := p.metrics().(noMetrics); none {
		return
	}
	if meta, err := msg.Metadata(); err == nil && meta.NumDelivered > 1 {
		p.metrics().Redelivered()
	}
}

// poisonStopped tells the pool's Metrics of a poison stop recorded
// (err nil), and returns err.
func (p *Pool) poisonStopped(err error) error {
	if err == nil {
		p.metrics().PoisonStop()
	}
	return err
}

// hold is one write or message a pool holds through an outage (patiently,
// waitOutOutage): while any is held the pool is not Ready.
type hold struct {
	p     *Pool
	began bool
}

// failed notes a try JetStream could not take: the first begins the hold.
func (h *hold) failed() {
	if !h.began {
		h.began = true
		h.p.holding.Add(1)
		h.p.metrics().Outage()
	}
}

// retry notes that the held write or message is tried again.
func (h *hold) retry() { h.p.metrics().Retry() }

// end ends the hold, if it began.
func (h *hold) end() {
	if h.began {
		h.began = false
		h.p.holding.Add(-1)
	}
}

// Errors of Ready.
var (
	// ErrNotStarted: the pool has not started (Start), so it has no
	// consumer bound.
	ErrNotStarted = errors.New("worker: pool not started")
	// ErrDraining: the pool is stopping (Stop) and takes no more work.
	ErrDraining = errors.New("worker: pool stopping")
	// ErrOutage: JetStream does not take the pool's writes or pulls now.
	ErrOutage = errors.New("worker: JetStream outage")
)

// Ready reports whether the pool takes and does work now: nil when it is
// started, bound to the workers consumer, not stopping, its pulls of work
// succeed and it holds no write or message through an outage; otherwise
// ErrNotStarted, ErrDraining or ErrOutage. It says nothing of the NATS
// connection, which its caller owns. It is safe to call at any time from
// any goroutine, and cheap.
func (p *Pool) Ready() error {
	p.mu.Lock()
	started, stopped := p.started, p.stopped
	p.mu.Unlock()
	switch {
	case !started:
		return ErrNotStarted
	case stopped:
		return ErrDraining
	case p.fetching.failing.Load() || p.holding.Load() > 0:
		return ErrOutage
	}
	return nil
}
