package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// run is one run being worked on by one worker, for as long as it holds the
// run's message. Everything in it is derived from the run's events and the
// config; nothing survives the message.
type run struct {
	p        *Pool
	log      *slog.Logger
	st       *events.RunState
	last     uint64 // stream sequence of the run's last event: the append condition
	task     events.Task
	profile  config.Profile
	limits   events.Limits
	model    model.Model
	specs    []tools.Spec
	offered  []string // tool names the model is shown, sorted
	deadline time.Time
	batch    bool           // stage events and append each step's in one append
	atomic   bool           // ...in one atomic batch (AppendBatch), not one Append
	staged   []events.Event // appended to state, not yet durable
	// fresh holds the calls whose arguments this worker knows in full: it
	// proposed or validated them itself. A call whose stored arguments
	// were redacted cannot be validated or run faithfully by another.
	fresh map[string]bool
	// shredded holds the calls whose sealed arguments cannot be opened
	// because their tenant's data key was deleted (openSealed).
	shredded map[string]bool
	// read is the seq of the run's last event when this worker read it,
	// and proposals the model calls whose proposed events it appended
	// since: together they tell another driver's model calls from its own
	// (proposedByAnother), and its own that the run did not keep
	// (lostProposals), whose usage is charged all the same.
	read      uint64
	proposals []events.DiscardedData
	// fired is when JetStream fired the scheduled wake-up that began this
	// pass (an expiry, a lease's end), by the server's clock: zero for any
	// other message. It says the server's time is at least that.
	fired time.Time
	// clear holds what a model reading observations unredacted is shown.
	clear clearReads
}

// newRun prepares st (folded from the run's events, possibly none) to be
// driven. limits are the effective limits for a new run; a started run
// keeps the ones it started with.
func (p *Pool) newRun(st *events.RunState, last uint64, task events.Task, limits events.Limits) (*run, error) {
	if st.Started != nil {
		task, limits = st.Started.Task, st.Started.Limits
	}
	profile, ok := p.app.Agents[task.Agent]
	if !ok {
		return nil, fmt.Errorf("agent profile %q is no longer configured", task.Agent)
	}
	m, ok := p.models[task.Agent]
	if !ok {
		return nil, fmt.Errorf("no model for agent profile %q", task.Agent)
	}
	r := p.bareRun(st, last, task, limits)
	r.profile, r.model = profile, m
	// The model is shown only the tools the principal may call.
	for _, name := range profile.Tools {
		if p.app.MayCall(task.Principal.Roles, name) {
			r.offered = append(r.offered, name)
		}
	}
	slices.Sort(r.offered)
	r.specs = p.registry.Specs(r.offered)
	r.deadline = p.now().Add(limits.MaxActive.D() - st.Active)
	return r, nil
}

// ender prepares a started run only to record something about it (its
// end, an approval message it rejects), with none of what driving it
// needs: its agent profile or model may be gone from the config (an
// operator removed it while runs were in flight), and such a run must
// still be stopped, not left with a message no worker can settle.
func (p *Pool) ender(st *events.RunState, last uint64) *run {
	return p.bareRun(st, last, st.Started.Task, st.Started.Limits)
}

// bareRun is what every run has: its state, where it stands in the
// stream, its task and limits, and a logger naming it.
func (p *Pool) bareRun(st *events.RunState, last uint64, task events.Task, limits events.Limits) *run {
	if st.RunID == "" {
		st.RunID = events.RunID(task.Tenant, task.TaskID)
	}
	return &run{
		p: p, st: st, last: last, task: task, limits: limits, read: st.LastSeq,
		log: p.log.With("run_id", st.RunID, "tenant", task.Tenant, "agent", task.Agent),
	}
}

// append records one event and folds it into the run's state. It is the only
// way a run changes. Without batching the event is durable before append
// returns; with batching (r.batch) it is staged and becomes durable, with
// the other events of its step, at the next flush — which every action
// outside the run (model, tools, KV, wake-ups, the ack) is preceded by, so
// the write-ahead rule holds either way.
func (r *run) append(ctx context.Context, typ events.Type, step int, callID, tool string, data any) error {
	raw, err := events.EncodeData(data)
	if err != nil {
		return fmt.Errorf("marshal %s event of run %s: %w", typ, r.st.RunID, err)
	}
	e := events.Event{
		EventID: r.p.ids.NewEventID(),
		RunID:   r.st.RunID,
		Tenant:  r.task.Tenant,
		Seq:     r.st.LastSeq + 1,
		Type:    typ,
		Time:    r.p.now().UTC(),
		Step:    step,
		CallID:  callID,
		Tool:    tool,
		Data:    raw,
	}
	// The stream gets the redacted event; this worker's state keeps what
	// it saw, so a call it validated runs with its real arguments.
	stored := e
	var changed bool
	stored.Data, changed = r.p.redactor.JSON(e.Data)
	if changed {
		if stored.Data, err = r.sealStored(ctx, &e, stored.Data); err != nil {
			return err
		}
	}
	if typ == events.TypeProposed {
		r.proposals = append(r.proposals, events.DiscardedData{Proposal: e.EventID})
	}
	if r.batch {
		r.staged = append(r.staged, stored)
		return r.st.Apply(&e)
	}
	r.p.crash("before:" + string(typ))
	one := []events.Event{stored}
	last, err := r.store(ctx, one, false)
	if err != nil {
		return fmt.Errorf("append %s event %d of run %s: %w", typ, e.Seq, e.RunID, err)
	}
	r.p.crash("after:" + string(typ))
	r.last, e.Seq = last, one[0].Seq // after approval records, if it made room
	return r.st.Apply(&e)
}

// flush makes the staged events durable: in one atomic batch, all of them
// or none (BatchEvents), or in one Append, in order (StageEvents). It is a
// no-op without staging.
func (r *run) flush(ctx context.Context) error {
	if len(r.staged) == 0 {
		return nil
	}
	for _, e := range r.staged {
		r.p.crash("before:" + string(e.Type))
	}
	last, err := r.store(ctx, r.staged, r.atomic)
	if err != nil {
		first, n := r.staged[0], len(r.staged)
		r.staged = nil
		return fmt.Errorf("append events %d..%d of run %s: %w", first.Seq, first.Seq+uint64(n)-1, first.RunID, err)
	}
	for _, e := range r.staged {
		r.p.crash("after:" + string(e.Type))
	}
	r.last, r.staged = last, nil
	return nil
}

// storePatiently runs an append of the run's events through
// Pool.patiently: while JetStream cannot store them, this worker keeps
// them (and the tool result they may carry) rather than hand the run back.
// The time it waits is JetStream's, not the run's: it is added to the
// run's deadline, as a run handed back and resumed would not count it
// against the active-time budget of its next pass either.
func (r *run) storePatiently(ctx context.Context, write func() error) error {
	waited, err := r.p.patiently(ctx, r.log, "the run's events", write)
	r.deadline = r.deadline.Add(waited)
	return err
}

// warnBatchRefused tells the operator, at most once a minute, that the
// server refuses atomic batches: the pool still works, appending the events
// one by one, but the cluster's batch limit is too low for it.
func (p *Pool) warnBatchRefused(ctx context.Context, err error) {
	now := time.Now().UnixNano()
	last := p.refusedWarned.Load()
	if now-last < int64(time.Minute) || !p.refusedWarned.CompareAndSwap(last, now) {
		return
	}
	p.log.WarnContext(ctx, "atomic batch refused; appending the step's events one by one. "+
		"Raise the servers' jetstream { limits { batch { max_inflight_per_stream } } } (default 50) above the workers of all pools together, "+
		"and keep its max_msgs (default 1000) above a step's events",
		"err", err)
}

// start records the run's first event.
func (r *run) start(ctx context.Context) error {
	var session *events.SessionContext
	if r.task.SessionID != "" {
		s, _, err := r.p.sessions.Get(ctx, r.task.Tenant, r.task.SessionID)
		if err != nil {
			return err
		}
		session = s.Context()
	}
	err := r.append(ctx, events.TypeStarted, 0, "", "", events.StartedData{
		Task:    r.task,
		Profile: r.task.Agent,
		Model:   r.profile.Model.Provider,
		Limits:  r.limits,
		Tools:   r.offered,
		Session: session,
	})
	if err != nil {
		return err
	}
	r.p.putRun(ctx, r.st, r.task, journal.RunRunning)
	r.log.InfoContext(ctx, "run started", "task_id", r.task.TaskID, "principal", r.task.Principal.ID, "dry_run", r.task.DryRun)
	return nil
}

// drive advances the run until it finishes or an infrastructure error stops
// the worker. It continues from wherever the events say the run stands: a
// decision already proposed is never asked for again.
func (r *run) drive(ctx context.Context) error {
	for r.st.Finished == nil {
		var err error
		switch st := r.st; {
		case st.Cancel != nil:
			// A cancel, appended by whichever worker handled it: the
			// boundary this run reached is where it stops.
			err = r.finish(ctx, r.cancelledStop(), nil)
		case st.CurrentStep > 0 && st.Current == nil && !st.DecisionObserved:
			err = r.handleInvalidDecision(ctx)
		case st.Current != nil && st.Current.Final != nil:
			if why := r.unverifiedCompletion(st.Current.Final); why != "" {
				err = r.finish(ctx, stop{events.ReasonCompletionUnverified, why}, nil)
				break
			}
			err = r.finish(ctx, stop{reason: events.ReasonDone}, st.Current.Final)
		case st.Current != nil && !r.stepObserved():
			err = r.runCalls(ctx)
		default:
			if s := beforeStep(st, r.limits, r.p.now(), r.deadline); !s.ok() {
				err = r.finish(ctx, s, nil)
			} else {
				err = r.propose(ctx)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// stepObserved reports whether every call of the current decision has its
// observation recorded.
func (r *run) stepObserved() bool {
	for _, c := range r.st.CurrentCalls {
		if !c.Observed {
			return false
		}
	}
	return true
}

// propose asks the model for the next decision and records it.
func (r *run) propose(ctx context.Context) error {
	if err := r.flush(ctx); err != nil {
		return err
	}
	step := r.st.Steps + 1
	mctx, cancel := context.WithDeadline(ctx, r.deadline)
	defer cancel()
	began := r.p.now()
	resp, err := r.model.Propose(mctx, model.Request{
		RunID:        r.st.RunID,
		Agent:        r.task.Agent,
		Instructions: r.profile.Instructions,
		Step:         step,
		History:      r.modelHistory(),
		Tools:        r.specs,
	})
	latency := r.p.now().Sub(began).Milliseconds()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // the worker is stopping: another will continue
		}
		// Only the run's own deadline is the deadline: a model client's
		// request timeout matches DeadlineExceeded too, and is a failure.
		if errors.Is(err, context.DeadlineExceeded) && mctx.Err() != nil {
			return r.finish(ctx, stop{events.ReasonDeadline, "the model did not answer within the run's active time budget"}, nil)
		}
		r.log.ErrorContext(ctx, "model failed", "step", step, "err", err)
		return r.finish(ctx, stop{events.ReasonError, "model failed: " + err.Error()}, nil)
	}
	decision, invalid := r.p.decisions.parse(resp.Output, step)
	if decision != nil {
		for i := range decision.ToolCalls {
			c := &decision.ToolCalls[i]
			_, c.Redacted = r.p.redactor.JSON(c.Args)
		}
	}
	data := events.ProposedData{Decision: decision, Invalid: invalid, Usage: resp.Usage, LatencyMS: latency, Model: resp.Name, ProviderMessage: resp.Message}
	if price, ok := r.p.app.Pricing[resp.Name]; ok {
		data.CostUSD = price.Cost(resp.Usage)
	}
	raw, err := r.proposal(ctx, &data, resp.Output)
	if err != nil {
		return err
	}
	if data.Decision != nil {
		for _, c := range data.Decision.ToolCalls {
			r.know(c.ID)
		}
	}
	before := len(r.proposals)
	err = r.append(ctx, events.TypeProposed, step, "", "", raw)
	if n := len(r.proposals); n > before {
		// What the call cost, should the run not keep its decision.
		p := &r.proposals[n-1]
		p.Usage, p.CostUSD, p.Model, p.LatencyMS = data.Usage, data.CostUSD, data.Model, data.LatencyMS
	}
	return err
}

// proposal encodes data, the model's answer out as understood, for its
// proposed event. A decision the event stream cannot take in one message
// (the provider's own message, recorded beside the decision, is
// unbounded, and a decision within MaxDecisionBytes can still encode to
// more: invalid UTF-8 is stored as U+FFFD, three bytes for one) becomes an invalid one: the model is told and its tokens
// are counted. Stored as it was, it would be refused on every try, and the
// model asked again on every delivery of the run, unrecorded.
func (r *run) proposal(ctx context.Context, data *events.ProposedData, out []byte) (json.RawMessage, error) {
	if data.Decision == nil {
		// Keep what the model said, bounded, so the trail shows it.
		// Raw only when a strict reader takes it (no repeated name, valid
		// UTF-8): the event schema refuses anything else.
		if trimmed := boundedRaw(out); jsontext.Value(trimmed).IsValid() {
			data.Raw = trimmed
		} else {
			data.RawText = string(trimmed)
		}
	}
	raw, err := events.EncodeData(data)
	if err != nil {
		return nil, fmt.Errorf("marshal proposed event of run %s: %w", r.st.RunID, err)
	}
	limit := r.p.journal.MaxDataBytes()
	size, sealed := len(raw), r.sealedBytes(data)
	if size+sealed > limit/2 { // redaction can change the size, never double it
		stored, _ := r.p.redactor.JSON(raw)
		size = max(size, len(stored))
	}
	size += sealed
	if size <= limit {
		return raw, nil
	}
	*data = events.ProposedData{
		Invalid: []events.FieldError{{Message: fmt.Sprintf(
			"decision takes %d bytes as an event, over the %d the event stream takes in one message: propose fewer calls or smaller arguments", size, limit)}},
		RawText:   string(boundedRaw(out)),
		Usage:     data.Usage,
		LatencyMS: data.LatencyMS,
		Model:     data.Model,
		CostUSD:   data.CostUSD,
	}
	r.log.WarnContext(ctx, "decision too large to record; recorded as invalid", "bytes", size, "limit", limit)
	return events.EncodeData(data)
}

// know records that this worker holds call id's arguments in full.
func (r *run) know(id string) {
	if r.fresh == nil {
		r.fresh = map[string]bool{}
	}
	r.fresh[id] = true
}

// adopt takes over from old, the run this worker drove before reloading
// it (another writer appended meanwhile), the arguments old knew in full:
// the reloaded state holds only the stored ones, redacted. A call of the
// same id is the same call only within the same stored proposal: another
// driver's decision of the same step has the same call ids, and may have
// the same tools with other arguments (a model is not deterministic).
func (r *run) adopt(old *run) {
	if old.st.CurrentProposal == "" || old.st.CurrentProposal != r.st.CurrentProposal {
		return
	}
	for id := range old.fresh {
		was, now := old.st.Call(id), r.st.Call(id)
		if was == nil || now == nil || now.Call.Tool != was.Call.Tool {
			continue
		}
		now.Call.Args = was.Call.Args
		if now.Validated != nil && was.Validated != nil {
			now.Validated.Args = was.Validated.Args
		}
		r.know(id)
	}
}

// proposedByAnother reports whether evs, the run read again, hold a
// proposed event that r did not append, after the run as r read it: a
// model call by another driver of the run. (Its own may be there: a step's
// staged events appended one by one store a prefix before the conflict.)
func (r *run) proposedByAnother(evs []events.Event) bool {
	for i := range evs {
		e := &evs[i]
		if e.Seq > r.read && e.Type == events.TypeProposed && !r.proposed(e.EventID) {
			return true
		}
	}
	return false
}

// proposed reports whether r appended the proposed event id.
func (r *run) proposed(id string) bool {
	return slices.ContainsFunc(r.proposals, func(p events.DiscardedData) bool { return p.Proposal == id })
}

// lostProposals returns the model calls r made that evs, the run read
// again after a lost append, hold neither as a proposed event nor as a
// discarded one: paid for, decided by another driver instead, and not yet
// recorded (a recording cut short by another conflict records the rest).
func (r *run) lostProposals(evs []events.Event) []events.DiscardedData {
	onRecord := map[string]bool{}
	for i := range evs {
		switch e := &evs[i]; e.Type {
		case events.TypeProposed:
			onRecord[e.EventID] = true
		case events.TypeDiscarded:
			var d events.DiscardedData
			if e.Decode(&d) == nil {
				onRecord[d.Proposal] = true
			}
		}
	}
	var lost []events.DiscardedData
	for _, p := range r.proposals {
		if !onRecord[p.Proposal] {
			lost = append(lost, p)
		}
	}
	return lost
}

// lostToFinished logs the model calls r lost to another driver that then
// finished the run: a discarded event cannot follow finished, so the
// calls' usage and cost are in the log only, for an operator adding up
// what the provider billed against the run's finished totals.
func (r *run) lostToFinished(ctx context.Context, lost []events.DiscardedData) {
	var usage events.Usage
	cost := 0.0
	for _, d := range lost {
		usage.Add(d.Usage)
		cost += d.CostUSD
	}
	r.log.WarnContext(ctx, "model calls lost to another worker that finished the run meanwhile; its finished totals do not count them",
		"calls", len(lost), "input_tokens", usage.InputTokens, "output_tokens", usage.OutputTokens, "cost_usd", cost)
}

// chargeDiscarded records the model calls of another pass at the run
// whose decisions it did not keep (discarded), so their usage counts
// toward its budgets.
func (r *run) chargeDiscarded(ctx context.Context, lost []events.DiscardedData) error {
	for _, d := range lost {
		if err := r.append(ctx, events.TypeDiscarded, r.st.CurrentStep, "", "", d); err != nil {
			return err
		}
	}
	return nil
}

// boundedRaw keeps at most 4 KiB of an invalid model output for the trail.
func boundedRaw(out []byte) []byte {
	const keep = 4 << 10
	if len(out) <= keep {
		return out
	}
	return out[:keep]
}

// handleInvalidDecision counts an invalid decision and either stops the run
// or hands the errors back to the model.
func (r *run) handleInvalidDecision(ctx context.Context) error {
	if s := afterInvalidDecision(r.st, r.limits); !s.ok() {
		return r.finish(ctx, s, nil)
	}
	obs, err := bounded(observeInvalidDecision(r.st.CurrentInvalid), r.observationLimit(), nil)
	if err != nil {
		return err
	}
	return r.append(ctx, events.TypeObserved, r.st.CurrentStep, "", "", obs)
}

// observationLimit is the byte bound of the next observation: the per-call
// bound, shrunk to what is left of the run's observation budget.
func (r *run) observationLimit() int {
	left := r.limits.MaxRunObservationKiB<<10 - r.st.ObservationBytes
	return max(min(r.limits.MaxObservationBytes, left), minObservationBytes)
}

// minObservationBytes is the floor under which an observation cannot say
// anything useful; past the run's budget each observation is this small.
const minObservationBytes = 64

// finish records the run's end.
func (r *run) finish(ctx context.Context, s stop, final *events.FinalAnswer) error {
	// The session remembers the run before the run is seen to end, so the
	// next run of the session, started by whoever saw the end, finds it;
	// and after the final answer it remembers is durable: staged, a crash
	// before the flush would have the model asked again, and the session
	// keep an answer the run never gave.
	if final != nil && r.task.SessionID != "" {
		if err := r.flush(ctx); err != nil {
			return err
		}
		r.remember(ctx, final)
	}
	// The questions the run ends without an answer to: those it asked, and
	// those whose pending entry a worker may have written and died before
	// asking (requestHuman writes the entry first), which loopgate pending
	// lists all the same. Only a call that could still run can have one
	// (a call awaiting a human is one of them).
	var asked []*events.CallState
	for _, c := range r.st.CurrentCalls {
		if c.Validated != nil && c.Validated.Status == events.ValidOK && c.Denied == nil && !c.Observed {
			asked = append(asked, c)
		}
	}
	err := r.append(ctx, events.TypeFinished, r.st.Steps, "", "", events.FinishedData{
		Reason: s.reason,
		Detail: s.detail,
		Final:  final,
		Totals: r.st.TotalsAt(r.p.now()),
	})
	if err == nil {
		err = r.flush(ctx)
	}
	if err != nil {
		return err
	}
	r.withdraw(ctx, asked)
	r.p.putRun(ctx, r.st, r.task, journal.RunFinished)
	r.log.InfoContext(ctx, "run finished", "reason", s.reason, "detail", s.detail, "steps", r.st.Steps, "tool_calls", r.st.ToolCalls)
	return nil
}

// withdraw marks the questions a run ended without an answer to as
// withdrawn, so loopgate pending stops listing them and no approver spends
// a decision on a run that is over (one who does is told not_pending). Any
// round's pending entry goes: the run's end is durable, so no answer to
// any of them can be recorded. It is best effort: an entry left pending is
// rejected all the same when answered, and its listing ages out with the
// question.
func (r *run) withdraw(ctx context.Context, calls []*events.CallState) {
	for _, c := range calls {
		e, rev, err := r.p.approvals.Get(ctx, r.st.RunID, c.Call.ID)
		if err != nil || !e.Pending() {
			continue
		}
		e.State, e.Reason, e.DecidedAt = approvals.StateWithdrawn, "the run ended unanswered", r.p.now().UTC()
		if err := r.p.approvals.Decide(ctx, e, rev); err != nil {
			r.log.WarnContext(ctx, "could not withdraw the question of a run that ended; it stays listed until it expires", "call_id", c.Call.ID, "err", err)
		}
	}
}

// putRun queues an update of the loopgate_runs projection (see
// projector). It is best effort: the events are the truth and the
// projection can be rebuilt from them.
func (p *Pool) putRun(ctx context.Context, st *events.RunState, task events.Task, status string) {
	rec := journal.RunRecord{
		RunID:   st.RunID,
		Tenant:  task.Tenant,
		TaskID:  task.TaskID,
		Agent:   task.Agent,
		Status:  status,
		LastSeq: st.LastSeq,
		Updated: p.now().UTC(),
	}
	if st.Finished != nil {
		rec.Reason = string(st.Finished.Reason)
	}
	p.projection.update(rec)
	addProjectionWait(ctx, p.projection.written(rec.Tenant+"."+rec.RunID, rec.LastSeq))
}

// redactedConstraints is the task's constraints as its events store them
// (a sensitive key's value, an e-mail address, redacted). A run resumed
// from its events has only those; one that finished in one pass must not
// give its session more.
func (r *run) redactedConstraints() map[string]string {
	if len(r.task.Constraints) == 0 {
		return nil
	}
	raw, err := json.Marshal(r.task.Constraints)
	if err != nil {
		return nil
	}
	red, _ := r.p.redactor.JSON(raw)
	var out map[string]string
	if err := json.Unmarshal(red, &out); err != nil {
		return nil // the redactor keeps valid JSON valid; nothing unredacted leaves
	}
	return out
}

// remember adds this run's exchange to its session: what it was asked,
// what its tools answered (bounded), and its answer. It is best effort:
// the run is done whatever happens to the memory.
func (r *run) remember(ctx context.Context, final *events.FinalAnswer) {
	// Redacted as the run's events are: the next run's started event
	// shows the model, and the audit log, what the session holds. An input
	// that is a JSON object is redacted as JSON (its sensitive keys'
	// values), before it is made text the patterns alone would pass.
	in, _ := r.p.redactor.JSON(r.task.Input)
	var input string
	if err := json.Unmarshal(in, &input); err != nil {
		input = string(in)
	}
	// What a tainted run's tools said, and what it answered after reading
	// them, may be the injected text: it taints the session's next reader.
	// Its question came from the task, not from a tool.
	tainted := r.taintsSession()
	turns := []events.SessionTurn{{RunID: r.st.RunID, Role: "user", Text: input}}
	for _, t := range r.st.History {
		if t.Role == events.RoleObservation && t.CallID != "" {
			text := string(t.Content)
			if len(text) > 512 {
				text = text[:512] + "…"
			}
			turns = append(turns, events.SessionTurn{RunID: r.st.RunID, Role: "tool", Text: t.Tool + ": " + text, Tainted: tainted})
		}
	}
	turns = append(turns, events.SessionTurn{RunID: r.st.RunID, Role: "assistant", Text: final.Summary, Tainted: tainted})
	for i := range turns {
		turns[i].Text = r.p.redactString(turns[i].Text)
	}
	err := r.p.sessions.Record(ctx, r.task.Tenant, r.task.SessionID, r.st.RunID, turns, r.redactedConstraints(), r.profile.SessionBudgetBytes, r.p.opts.Summarizer, r.p.now())
	if err != nil {
		r.log.WarnContext(ctx, "record session memory", "session_id", r.task.SessionID, "err", err)
	}
}
