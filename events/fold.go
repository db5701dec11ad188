package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Role says who a Turn of the model's context belongs to.
type Role string

// Roles of the model's context.
const (
	RoleUser        Role = "user"        // the task input
	RoleAssistant   Role = "assistant"   // a decision the model made
	RoleObservation Role = "observation" // what loopgate handed back
	RoleSession     Role = "session"     // memory of the session's earlier runs (a SessionContext)
)

// Turn is one entry of the model's context, rebuilt from events.
type Turn struct {
	Role     Role            `json:"role"`
	Step     int             `json:"step"`
	Decision *Decision       `json:"decision,omitempty"`
	CallID   string          `json:"call_id,omitempty"`
	Tool     string          `json:"tool,omitempty"`
	Content  json.RawMessage `json:"content,omitempty"`
	// ProviderMessage is an assistant turn as the provider sent it.
	ProviderMessage json.RawMessage `json:"provider_message,omitempty"`
	// ProviderCallID is the provider's id of the call an observation answers.
	ProviderCallID string `json:"provider_call_id,omitempty"`
}

// CallState is what the events say about one proposed call.
type CallState struct {
	Call      ToolCall
	Validated *ValidatedData
	Denied    *DeniedData
	// Request is the latest question to a human about the call, and
	// Decision its answer (nil while pending).
	Request    *ApprovalRequestedData
	Decision   *ApprovedData
	Executing  []ExecutingData
	Executed   []ExecutedData
	Reconciled []ReconciledData
	Observed   bool
}

// Awaiting reports whether the call waits for a human's decision.
func (c *CallState) Awaiting() bool { return c.Request != nil && c.Decision == nil }

// Parked reports whether the run waits for a human on some call.
func (s *RunState) Parked() bool {
	for _, c := range s.CurrentCalls {
		if c.Awaiting() {
			return true
		}
	}
	return false
}

// Attempts is how many attempts of the call were begun.
func (c *CallState) Attempts() int { return len(c.Executing) }

// InFlight reports whether an attempt began (executing) without an end
// (executed): an unknown outcome after a crash.
func (c *CallState) InFlight() bool { return len(c.Executing) > len(c.Executed) }

// LastExecuted returns the latest attempt's end, or nil.
func (c *CallState) LastExecuted() *ExecutedData {
	if len(c.Executed) == 0 {
		return nil
	}
	return &c.Executed[len(c.Executed)-1]
}

// RunState is a run folded from its events: everything a worker needs to
// continue it, and nothing it would have to keep in memory between steps.
type RunState struct {
	RunID   string
	Tenant  string
	Started *StartedData

	LastSeq   uint64 // the run's own seq of its last event (0: no events)
	IsParked  bool   // a parked event is the latest transition
	LastType  Type
	LastTime  time.Time
	FirstTime time.Time

	Steps            int
	ToolCalls        int
	PerTool          map[string]int
	WriteActions     int // calls of write tools, counted as ToolCalls are
	InvalidDecisions int
	Rejected         int            // calls refused by validation
	Corrections      map[string]int // refused calls, per tool name
	Repeats          map[string]int // validated calls, per tool + args hash
	Quarantined      map[string]bool
	ObservationBytes int
	Usage            Usage
	CostUSD          float64
	// LastUsage and LastCostUSD are the latest model call's: the estimate
	// of what the next one will cost.
	LastUsage   Usage
	LastCostUSD float64
	Active      time.Duration

	// The latest decision and the progress of its calls, in call order.
	// CurrentProposal is the event id of the proposed event that made it:
	// two decisions of one step have the same call ids, not the same calls.
	Current         *Decision
	CurrentProposal string
	CurrentStep     int
	CurrentCalls    []*CallState
	// CurrentInvalid holds why the latest decision was invalid, and
	// DecisionObserved is set once the model got that error back.
	CurrentInvalid   []FieldError
	DecisionObserved bool

	// Tainted lists the calls whose output was flagged as possible prompt
	// injection, and the tainted parts of the session the run was shown
	// (SessionContext.Tainted): once the model has read them, every write
	// needs approval.
	Tainted []string
	// Outputs lists the first observation of each tool's output, in the
	// order the run observed them (see Output). Whether a tool's output
	// is trusted is its manifest's to say, so the worker reads it against
	// the manifests: output of an untrusted tool taints every write
	// proposed after it.
	Outputs []Output

	Rejection *RejectedData
	// Cancel is the run's first allowed cancel: once set, the run's next
	// step is to finish cancelled.
	Cancel   *CancelRequestedData
	Finished *FinishedData
	History  []Turn
}

// Output says where a run first observed what a tool returned: the
// observed event of call CallID, at step Step. An observation holds the
// tool's output when the call's last attempt ended ok, or when a reconcile
// check found its unknown outcome took effect; an observation of a refusal,
// a denial, a failure, a timeout, a dry run or a human's settling of an
// unknown outcome holds only loopgate's own words.
type Output struct {
	Tool   string
	Step   int
	CallID string
}

// Fold replays events, which must be one run's in seq order starting at 1,
// into its state. It fails on a gap, a foreign event or an undecodable
// payload: the audit log is the truth and must be whole.
func Fold(evs []Event) (*RunState, error) {
	s := &RunState{
		PerTool:     map[string]int{},
		Corrections: map[string]int{},
		Repeats:     map[string]int{},
		Quarantined: map[string]bool{},
	}
	for i := range evs {
		if err := s.Apply(&evs[i]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// RepeatKey identifies "the same call": the same tool with the same
// canonical arguments.
func RepeatKey(tool, argsHash string) string { return tool + "\x00" + argsHash }

// Call returns the state of the current decision's call id, or nil.
func (s *RunState) Call(id string) *CallState {
	for _, c := range s.CurrentCalls {
		if c.Call.ID == id {
			return c
		}
	}
	return nil
}

// Apply folds one more event into s. The worker applies each event it
// appends, so its state is always exactly what a fresh fold would give.
func (s *RunState) Apply(e *Event) error {
	if e.Seq != s.LastSeq+1 {
		return fmt.Errorf("run %s: event seq %d follows %d: the trail has a gap", e.RunID, e.Seq, s.LastSeq)
	}
	if s.LastSeq == 0 {
		s.RunID, s.Tenant, s.FirstTime = e.RunID, e.Tenant, e.Time
	} else {
		switch {
		case e.RunID != s.RunID:
			return fmt.Errorf("event %s of run %s folded into run %s", e.EventID, e.RunID, s.RunID)
		case e.Tenant != s.Tenant:
			return fmt.Errorf("event %s of tenant %s folded into run %s of tenant %s", e.EventID, e.Tenant, s.RunID, s.Tenant)
		}
		// Time parked waiting for a human is not active time.
		// Nor is the time between a run's end and an answer recorded
		// after it (approval_rejected).
		if !s.IsParked && s.Finished == nil && e.Time.After(s.LastTime) && !e.Type.IsRecord() {
			s.Active += e.Time.Sub(s.LastTime)
		}
	}
	s.LastSeq, s.LastType = e.Seq, e.Type
	if !e.Type.IsRecord() || s.LastTime.IsZero() {
		// An answer that decided nothing is recorded by whichever worker
		// handled it, with that worker's clock, maybe while the run's own
		// worker drives the run: its time is no part of the run's. The
		// run's worker does not fold it (it steps its seq over the
		// record), and a fold that let the record move LastTime forward,
		// and the run's next event back, used to charge the overlap twice.
		s.LastTime = e.Time
	}
	switch {
	case e.Type == TypeParked:
		s.IsParked = true
	case e.Type.IsRecord():
		// A record leaves a parked run parked.
	default:
		s.IsParked = false
	}

	switch e.Type {
	case TypeRejected:
		var d RejectedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		s.Rejection = &d
	case TypeCancelRequested:
		var d CancelRequestedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		if s.Cancel == nil {
			s.Cancel = &d
		}
	case TypeStarted:
		var d StartedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		s.Started = &d
		if d.Session != nil {
			s.Tainted = append(s.Tainted, d.Session.Tainted()...)
			raw, _ := json.Marshal(d.Session)
			s.History = append(s.History, Turn{Role: RoleSession, Content: raw})
		}
		s.History = append(s.History, Turn{Role: RoleUser, Content: d.Task.Input})
	case TypeProposed:
		var d ProposedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		s.Steps = e.Step
		s.CurrentStep = e.Step
		s.Usage.Add(d.Usage)
		s.LastUsage, s.LastCostUSD = d.Usage, d.CostUSD
		s.CostUSD += d.CostUSD
		s.Current, s.CurrentCalls, s.DecisionObserved = d.Decision, nil, false
		s.CurrentProposal = e.EventID
		s.CurrentInvalid = d.Invalid
		if d.Decision == nil {
			s.InvalidDecisions++
			// The model must see what it said to correct it.
			raw := d.Raw
			if raw == nil {
				raw, _ = json.Marshal(d.RawText)
			}
			s.History = append(s.History, Turn{Role: RoleAssistant, Step: e.Step, Content: raw, ProviderMessage: d.ProviderMessage})
			break
		}
		for _, c := range d.Decision.ToolCalls {
			s.CurrentCalls = append(s.CurrentCalls, &CallState{Call: c})
		}
		s.History = append(s.History, Turn{Role: RoleAssistant, Step: e.Step, Decision: d.Decision, ProviderMessage: d.ProviderMessage})
	case TypeValidated:
		var d ValidatedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		c, err := s.callOf(e)
		if err != nil {
			return err
		}
		c.Validated = &d
		switch {
		case d.Status == ValidOK:
			s.Repeats[RepeatKey(c.Call.Tool, d.ArgsHash)]++
		case d.Redacted:
			// Refused because a crash lost the real arguments: the model
			// made no mistake, so it is no correction.
			s.Rejected++
		default:
			s.Rejected++
			s.Corrections[c.Call.Tool]++
		}
	case TypeDenied:
		var d DeniedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		c, err := s.callOf(e)
		if err != nil {
			return err
		}
		c.Denied = &d
	case TypeExecuting:
		var d ExecutingData
		if err := e.Decode(&d); err != nil {
			return err
		}
		c, err := s.callOf(e)
		if err != nil {
			return err
		}
		if len(c.Executing) == 0 {
			s.countCall(c)
		}
		c.Executing = append(c.Executing, d)
	case TypeExecuted:
		var d ExecutedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		c, err := s.callOf(e)
		if err != nil {
			return err
		}
		if d.Status == ExecDryRun {
			// A preview is a call made, for the budgets, without an attempt.
			s.countCall(c)
		}
		if d.Status == ExecToolFailed {
			s.Quarantined[c.Call.Tool] = true
		}
		if d.Status == ExecArgsLost && c.Validated != nil && c.Validated.Status == ValidOK {
			// A crash lost the arguments and the call never ran: the
			// model is asked to propose it again, and that proposal is
			// no repeat of its own.
			if k := RepeatKey(c.Call.Tool, c.Validated.ArgsHash); s.Repeats[k] > 0 {
				s.Repeats[k]--
			}
		}
		c.Executed = append(c.Executed, d)
	case TypeObserved:
		var d ObservedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		s.ObservationBytes += d.Bytes
		if len(d.Flags) > 0 {
			s.Tainted = append(s.Tainted, e.CallID)
		}
		if e.CallID == "" {
			s.DecisionObserved = true
		} else {
			c, err := s.callOf(e)
			if err != nil {
				return err
			}
			c.Observed = true
			if c.heldOutput() && !slices.ContainsFunc(s.Outputs, func(o Output) bool { return o.Tool == c.Call.Tool }) {
				s.Outputs = append(s.Outputs, Output{Tool: c.Call.Tool, Step: e.Step, CallID: e.CallID})
			}
		}
		t := Turn{Role: RoleObservation, Step: e.Step, CallID: e.CallID, Tool: e.Tool, Content: d.Observation}
		if c := s.Call(e.CallID); c != nil {
			t.ProviderCallID = c.Call.ProviderID
		}
		s.History = append(s.History, t)
	case TypeFinished:
		var d FinishedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		s.Finished = &d
	case TypeApprovalRequested:
		var d ApprovalRequestedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		c, err := s.callOf(e)
		if err != nil {
			return err
		}
		c.Request, c.Decision = &d, nil
	case TypeApproved:
		var d ApprovedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		c, err := s.callOf(e)
		if err != nil {
			return err
		}
		if c.Request == nil || c.Request.Round != d.Round {
			return fmt.Errorf("run %s: approved event %d answers round %d of call %s, which was not asked", e.RunID, e.Seq, d.Round, e.CallID)
		}
		c.Decision = &d
	case TypeReconciled:
		var d ReconciledData
		if err := e.Decode(&d); err != nil {
			return err
		}
		c, err := s.callOf(e)
		if err != nil {
			return err
		}
		c.Reconciled = append(c.Reconciled, d)
	case TypeDiscarded:
		var d DiscardedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		s.Charge(d)
	case TypeSecurity:
		// The only event of a security record's pseudo-run: it starts no
		// run (Started stays nil), so nothing is decided on it.
		var d SecurityData
		if err := e.Decode(&d); err != nil {
			return err
		}
	case TypeParked, TypeApprovalRejected, TypeCancelRejected:
		// Audit records: parked time is excluded from active time above;
		// a rejected approval or cancel message changes nothing.
	default:
		return fmt.Errorf("run %s: event %d has unknown type %q", e.RunID, e.Seq, e.Type)
	}
	return nil
}

// Charge counts a discarded model call's usage and cost toward the run's
// totals, as a proposed event's are counted.
func (s *RunState) Charge(d DiscardedData) {
	s.Usage.Add(d.Usage)
	s.CostUSD += d.CostUSD
}

func (s *RunState) callOf(e *Event) (*CallState, error) {
	if e.Step != s.CurrentStep {
		return nil, fmt.Errorf("run %s: %s event %d is for step %d, current step is %d", e.RunID, e.Type, e.Seq, e.Step, s.CurrentStep)
	}
	c := s.Call(e.CallID)
	if c == nil {
		return nil, fmt.Errorf("run %s: %s event %d names call %q, not in the current decision", e.RunID, e.Type, e.Seq, e.CallID)
	}
	return c, nil
}

// heldOutput reports whether the observation of call c holds what its tool
// returned (see Output).
func (c *CallState) heldOutput() bool {
	last := c.LastExecuted()
	if last == nil {
		return false
	}
	if last.Status == ExecOK {
		return true
	}
	for _, r := range c.Reconciled {
		if r.Attempt == c.Attempts() && r.Applied {
			return true
		}
	}
	return false
}

// countCall charges the budgets for call c, once: at its first executing
// event (or its dry run preview).
func (s *RunState) countCall(c *CallState) {
	s.ToolCalls++
	s.PerTool[c.Call.Tool]++
	if c.Validated != nil && c.Validated.Permission == "write" {
		s.WriteActions++
	}
}

// Totals summarises s for a finished event.
func (s *RunState) Totals() Totals {
	return s.totals(s.Active)
}

// TotalsAt is Totals as they stand once an event at now is appended: the
// active time since the last event counts too (a finished event's totals
// include the step that led to it).
func (s *RunState) TotalsAt(now time.Time) Totals {
	active := s.Active
	if s.LastSeq > 0 && !s.IsParked && now.After(s.LastTime) {
		active += now.Sub(s.LastTime)
	}
	return s.totals(active)
}

func (s *RunState) totals(active time.Duration) Totals {
	return Totals{
		Steps:            s.Steps,
		ToolCalls:        s.ToolCalls,
		PerTool:          s.PerTool,
		WriteActions:     s.WriteActions,
		InvalidDecisions: s.InvalidDecisions,
		Rejected:         s.Rejected,
		Usage:            s.Usage,
		CostUSD:          s.CostUSD,
		ActiveMS:         active.Milliseconds(),
		ObservationBytes: s.ObservationBytes,
		Events:           int(s.LastSeq) + 1,
	}
}
