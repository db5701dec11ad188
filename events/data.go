package events

import (
	"encoding/json"
	"slices"
	"time"
)

// Task is what an upstream system publishes on loopgate.tasks.<tenant>. It
// matches schemas/task.schema.json.
type Task struct {
	TaskID    string          `json:"task_id"`
	Tenant    string          `json:"tenant"`
	Principal Principal       `json:"principal"`
	Agent     string          `json:"agent"`
	Input     json.RawMessage `json:"input"`
	DryRun    bool            `json:"dry_run"`
	Limits    *Limits         `json:"limits,omitempty"`
	// SessionID joins the run to a session: it sees the compacted
	// conversation of the session's earlier runs.
	SessionID string `json:"session_id,omitempty"`
	// Constraints are kept in the session as structured fields.
	Constraints map[string]string `json:"constraints,omitempty"`
}

// SessionContext is what a run is shown of its session's earlier runs.
type SessionContext struct {
	ID      string `json:"id"`
	Summary string `json:"summary,omitempty"`
	// SummaryTainted says the summary folded in a tainted turn: it may
	// carry text written by flagged or untrusted tool output, so it taints
	// its reader.
	SummaryTainted bool              `json:"summary_tainted,omitempty"`
	Turns          []SessionTurn     `json:"turns,omitempty"`
	Constraints    map[string]string `json:"constraints,omitempty"`
}

// Tainted lists what of c came from a run that read tool output flagged as
// possible prompt injection, or output of a tool declared untrusted
// ("session:<run_id>", "session:summary"): a run
// shown c is tainted as if it had read that output itself.
func (c *SessionContext) Tainted() []string {
	var from []string
	if c.SummaryTainted {
		from = append(from, "session:summary")
	}
	for _, t := range c.Turns {
		if t.Tainted && !slices.Contains(from, "session:"+t.RunID) {
			from = append(from, "session:"+t.RunID)
		}
	}
	return from
}

// SessionTurn is one remembered exchange of a session.
type SessionTurn struct {
	RunID string `json:"run_id"`
	Role  string `json:"role"` // user | assistant | tool
	Text  string `json:"text"`
	// Tainted marks a turn written by a run that was tainted (it read
	// flagged or untrusted tool output, itself or through its session): its tool
	// results and its answer may carry the injected text.
	Tainted bool `json:"tainted,omitempty"`
}

// Principal is the identity a task acts for, asserted by the upstream system.
type Principal struct {
	ID    string   `json:"id"`
	Roles []string `json:"roles"`
}

// Limits bound one run. In a task they may only tighten the profile's; a
// zero field means "not set" there.
type Limits struct {
	MaxSteps     int `json:"max_steps,omitempty"`
	MaxToolCalls int `json:"max_tool_calls,omitempty"`
	// MaxWriteActions bounds the calls of write tools a run makes (dry
	// run previews included: a preview shows what the run would do).
	MaxWriteActions      int      `json:"max_write_actions,omitempty"`
	MaxActive            Duration `json:"max_active,omitempty"`
	MaxInvalidDecisions  int      `json:"max_invalid_decisions,omitempty"`
	MaxCorrections       int      `json:"max_corrections,omitempty"`
	MaxRepeatedCalls     int      `json:"max_repeated_calls,omitempty"`
	MaxObservationBytes  int      `json:"max_observation_bytes,omitempty"`
	MaxRunObservationKiB int      `json:"max_run_observation_kib,omitempty"`
	// MaxTokens bounds the model tokens (input + output) of a run; 0 is
	// no bound.
	MaxTokens int `json:"max_tokens,omitempty"`
	// MaxCostUSD bounds the model cost of a run, priced by the config's
	// pricing table; 0 is no bound.
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
}

// FieldError is one field-level complaint about an input: a task, a
// decision or a call's arguments. Field is a JSON pointer ("" for the root).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Decision is what the model proposes: exactly one of ToolCalls or Final.
type Decision struct {
	ToolCalls []ToolCall   `json:"tool_calls,omitempty"`
	Final     *FinalAnswer `json:"final_answer,omitempty"`
}

// ToolCall is one proposed call. ID is loopgate's call id (see CallID);
// ProviderID is the model provider's own id, kept for its conversation
// protocol.
type ToolCall struct {
	ID         string          `json:"id"`
	ProviderID string          `json:"provider_id,omitempty"`
	Tool       string          `json:"tool"`
	Args       json.RawMessage `json:"args"`
	// Redacted: the arguments held sensitive values, stored replaced.
	// No worker validates or runs the call from the stored copy: only
	// from the real arguments, known to the worker that proposed it or
	// opened from Sealed.
	Redacted bool `json:"redacted,omitempty"`
	// Sealed holds the real arguments, encrypted, when Redacted: any
	// worker with the tenant's data key opens them (see Sealed).
	Sealed *Sealed `json:"sealed,omitempty"`
}

// Sealed is a value kept encrypted in the audit stream: the real
// arguments of a call whose stored arguments were redacted. Box is the
// AES-256-GCM ciphertext of the value's JSON under the data key Key of the
// event's tenant, with Nonce; the additional data binds it to the tenant,
// run, call and event type, so a box moved to another call does not open.
// Deleting the tenant's data key makes every box under it unrecoverable
// (crypto-shredding) while the events stay readable.
type Sealed struct {
	Key   string `json:"key"`
	Nonce []byte `json:"nonce"`
	Box   []byte `json:"box"`
}

// SealAAD is the additional data a call's sealed arguments are bound to:
// the run, the call and the type of the event they are stored in.
func SealAAD(runID, callID string, typ Type) []byte {
	return []byte(runID + "\x00" + callID + "\x00" + string(typ))
}

// FinalAnswer ends a run.
type FinalAnswer struct {
	Summary       string   `json:"summary"`
	ActionsTaken  []string `json:"actions_taken,omitempty"`
	DraftsCreated []string `json:"drafts_created,omitempty"`
}

// Usage is what one model call cost.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Add counts v into u.
func (u *Usage) Add(v Usage) {
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
}

// RejectedData: a task that did not become a run.
type RejectedData struct {
	Field   string       `json:"field"`
	Reason  string       `json:"reason"`
	Errors  []FieldError `json:"errors,omitempty"`
	TaskID  string       `json:"task_id,omitempty"`
	Subject string       `json:"subject"`
	// PayloadExcerpt is the start of the message, for the operator.
	PayloadExcerpt string `json:"payload_excerpt,omitempty"`
}

// StartedData: the task, the profile and the limits in force.
type StartedData struct {
	Task    Task     `json:"task"`
	Profile string   `json:"profile"`
	Model   string   `json:"model"`
	Limits  Limits   `json:"limits"`
	Tools   []string `json:"tools"`
	// Session is the session memory this run starts from.
	Session *SessionContext `json:"session,omitempty"`
}

// ProposedData: the model's decision as loopgate understood it, or why it
// could not. Raw is kept only when the decision was invalid, so the trail
// shows what the model actually said.
type ProposedData struct {
	Decision  *Decision       `json:"decision,omitempty"`
	Invalid   []FieldError    `json:"invalid,omitempty"`
	Raw       json.RawMessage `json:"raw,omitempty"`
	RawText   string          `json:"raw_text,omitempty"`
	Usage     Usage           `json:"usage"`
	LatencyMS int64           `json:"latency_ms"`
	// Model names the model that answered (provider/model).
	Model string `json:"model,omitempty"`
	// ProviderMessage is the provider's own assistant message, kept so the
	// conversation can be replayed to it verbatim (tool-call ids and all).
	ProviderMessage json.RawMessage `json:"provider_message,omitempty"`
	// CostUSD is what the call cost by the config's pricing table.
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// Validation statuses of a call.
const (
	ValidOK          = "ok"
	InvalidArguments = "invalid_arguments"
	UnknownTool      = "unknown_tool"
	Quarantined      = "quarantined"
)

// ValidatedData: one call checked against the allowlist and its schema.
type ValidatedData struct {
	Status         string          `json:"status"`
	Args           json.RawMessage `json:"args,omitempty"`
	ArgsHash       string          `json:"args_hash,omitempty"`
	Errors         []FieldError    `json:"errors,omitempty"`
	AvailableTools []string        `json:"available_tools,omitempty"`
	Permission     string          `json:"permission,omitempty"`
	// Redacted: the arguments held sensitive values, replaced in the
	// stored event (args_hash is still the hash of the real arguments).
	// On a refusal (invalid_arguments) it says why: the stored proposal
	// held only the masked arguments and the worker that knew the real
	// ones is gone, so the refusal is loopgate's loss, not the model's
	// mistake, and is no correction.
	Redacted bool `json:"redacted,omitempty"`
	// Idempotent: the tool's manifest declares that it dedupes by
	// operation id, so an attempt whose outcome is unknown may be run
	// again without asking anyone (trail.Check reads it).
	Idempotent bool `json:"idempotent,omitempty"`
	// Sealed holds the real canonical arguments, encrypted, when Redacted
	// and ok: their hash is ArgsHash.
	Sealed *Sealed `json:"sealed,omitempty"`
}

// DeniedData: policy refused a call.
type DeniedData struct {
	Check  string `json:"check"`
	Reason string `json:"reason"`
}

// ExecutingData: the write-ahead record of one attempt.
type ExecutingData struct {
	OperationID string    `json:"operation_id"`
	Attempt     int       `json:"attempt"`
	Deadline    time.Time `json:"deadline"`
	ArgsHash    string    `json:"args_hash"`
}

// Execution statuses of a call.
const (
	ExecOK         = "ok"
	ExecTimeout    = "timeout"
	ExecTransient  = "transient"
	ExecToolFailed = "tool_failed"
	ExecDryRun     = "dry_run"
	ExecConflict   = "conflict"
	// ExecUnknown: an attempt began (executing) and no end was recorded,
	// because the worker running it died. The outcome is unknown; a write is
	// never re-run blindly.
	ExecUnknown = "unknown"
	// ExecArgsLost: the call's arguments held sensitive values that are
	// never stored, and the worker that knew them is gone; it cannot run.
	ExecArgsLost = "args_lost"
)

// RecordedResultReused is the message of an executed event whose ok
// result is the operation's recorded one: an earlier attempt completed
// it, and the tool was not run again.
const RecordedResultReused = "the operation had already completed: its recorded result is returned and the tool was not run again"

// DeadlinePassed is the error class of a transient executed event whose
// attempt's lease was over before its tool started: the tool never ran.
const DeadlinePassed = "deadline_passed"

// Error classes of an executed event whose tool was called and whose
// outcome is unknown (status timeout): the call may have taken effect.
const (
	// TimedOut: loopgate's deadline for the call passed.
	TimedOut = "timeout"
	// ConnectionLost: loopgate's connection to the tool's service closed
	// while the request waited for its reply.
	ConnectionLost = "connection_lost"
	// UpstreamTimeout: the tool's own deadline (an upstream's) passed
	// while the call ran: a tool service answered 504, or a built-in tool
	// returned context.DeadlineExceeded before loopgate's deadline.
	UpstreamTimeout = "upstream_timeout"
)

// ExecutedData: how one attempt ended.
type ExecutedData struct {
	Status      string          `json:"status"`
	OperationID string          `json:"operation_id,omitempty"`
	Attempt     int             `json:"attempt,omitempty"`
	LatencyMS   int64           `json:"latency_ms"`
	Result      json.RawMessage `json:"result,omitempty"`
	// ResultBytes is the size of the tool's result when Result had to be
	// cut to fit the event (tools.Bound); 0 when Result is whole.
	ResultBytes int        `json:"result_bytes,omitempty"`
	ErrorClass  string     `json:"error_class,omitempty"`
	Message     string     `json:"message,omitempty"`
	WouldCall   *WouldCall `json:"would_call,omitempty"`
}

// WouldCall is a dry run's preview of the exact call it did not make.
type WouldCall struct {
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"`
	OperationID string          `json:"operation_id"`
}

// ObservedData: the exact observation handed to the model. A call's
// observation has the event's CallID; an invalid decision's has none.
type ObservedData struct {
	Observation json.RawMessage `json:"observation"`
	Bytes       int             `json:"bytes"`
	Truncated   bool            `json:"truncated,omitempty"`
	// Flags name what in the tool's output looked like an attempt to
	// steer the model (guard.Flag values); any flag taints the run.
	Flags []string `json:"flags,omitempty"`
}

// ApprovalRequestedData: a gated call awaits a human. Kind is "approval"
// (may this exact call run?) or "needs_human" (its outcome is unknown).
type ApprovalRequestedData struct {
	Kind        string          `json:"kind"`
	Round       int             `json:"round"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"`
	ArgsHash    string          `json:"args_hash"`
	OperationID string          `json:"operation_id"`
	Principal   string          `json:"principal"`
	Why         string          `json:"why"`
	ExpiresAt   time.Time       `json:"expires_at"`
	// Attempt is how many attempts the call had when it was asked: a
	// needs_human answer applies to that attempt's unknown outcome.
	Attempt int `json:"attempt"`
}

// ParkedData: the run holds no worker until one of Awaiting is decided or
// expires at Until.
type ParkedData struct {
	Awaiting []string  `json:"awaiting"`
	Until    time.Time `json:"until"`
}

// ApprovedData: the decision on a gated call. Decision is approve, deny or
// expired for an approval; mark_done, retry or abandon for needs_human.
type ApprovedData struct {
	Kind        string `json:"kind"`
	Round       int    `json:"round"`
	Decision    string `json:"decision"`
	Approver    string `json:"approver,omitempty"`
	ArgsHash    string `json:"args_hash"`
	Reason      string `json:"reason,omitempty"`
	ApprovalSeq uint64 `json:"approval_seq,omitempty"`
}

// ApprovalRejectedData: an approval message that changed nothing.
type ApprovalRejectedData struct {
	Class       string       `json:"class"`
	Detail      string       `json:"detail"`
	Decision    string       `json:"decision,omitempty"`
	Approver    string       `json:"approver,omitempty"`
	ArgsHash    string       `json:"args_hash,omitempty"`
	Errors      []FieldError `json:"errors,omitempty"`
	ApprovalSeq uint64       `json:"approval_seq"`
}

// DiscardedData: a model call whose decision was not stored, because
// another worker extended the run first (two workers on one run: a
// redelivery to a worker while the one before it was frozen, a wake-up
// while the run was driven). The call was paid for all the same, so its
// usage and cost count toward the run's budgets like a proposed event's.
type DiscardedData struct {
	// Proposal is the event id the proposed event would have had.
	Proposal  string  `json:"proposal"`
	Usage     Usage   `json:"usage"`
	CostUSD   float64 `json:"cost_usd,omitempty"`
	Model     string  `json:"model,omitempty"`
	LatencyMS int64   `json:"latency_ms"`
}

// ReconciledData: what a reconcile tool said about an operation whose
// outcome was unknown.
type ReconciledData struct {
	OperationID string          `json:"operation_id"`
	Attempt     int             `json:"attempt"`
	Via         string          `json:"via"`
	Applied     bool            `json:"applied"`
	Result      json.RawMessage `json:"result,omitempty"`
	// ResultBytes: as ExecutedData's.
	ResultBytes int    `json:"result_bytes,omitempty"`
	Error       string `json:"error,omitempty"`
	// Fenced: the check was asked to fence (the tool's manifest says
	// reconcile_fences) and answered not applied, fenced: the operation id
	// is abandoned in the backend, so no attempt of it can land any more,
	// and the next attempt runs under an operation id of its own
	// (FencedOperationID).
	Fenced bool `json:"fenced,omitempty"`
	// MaxEffectDelay: the tool's max_effect_delay, waited past the
	// attempt's deadline before a check that cannot fence was asked.
	MaxEffectDelay Duration `json:"max_effect_delay,omitempty"`
	// Why says what the answer settles: applied, fenced (a new attempt is
	// safe), or not applied by a check that cannot fence (a human decides).
	Why string `json:"why,omitempty"`
}

// Reason is why a run finished.
type Reason string

// Stop reasons. Each is tested and shown by the CLI.
const (
	ReasonDone                 Reason = "done"
	ReasonMaxSteps             Reason = "max_steps"
	ReasonMaxToolCalls         Reason = "max_tool_calls"
	ReasonBudget               Reason = "budget"
	ReasonDeadline             Reason = "deadline"
	ReasonPermissionDenied     Reason = "permission_denied"
	ReasonRepeatedCall         Reason = "repeated_call"
	ReasonInvalidDecisions     Reason = "invalid_decisions"
	ReasonCancelled            Reason = "cancelled"
	ReasonCompletionUnverified Reason = "completion_unverified"
	ReasonError                Reason = "error"
)

// Reasons returns every stop reason, in the order of the loop's diagram.
func Reasons() []Reason {
	return []Reason{ReasonDone, ReasonMaxSteps, ReasonMaxToolCalls, ReasonBudget, ReasonDeadline,
		ReasonPermissionDenied, ReasonRepeatedCall, ReasonInvalidDecisions, ReasonCancelled,
		ReasonCompletionUnverified, ReasonError}
}

// Valid reports whether r is one of the stop reasons.
func (r Reason) Valid() bool { return slices.Contains(Reasons(), r) }

// FinishedData: why and how a run ended.
type FinishedData struct {
	Reason Reason       `json:"reason"`
	Detail string       `json:"detail,omitempty"`
	Final  *FinalAnswer `json:"final_answer,omitempty"`
	Totals Totals       `json:"totals"`
}

// Totals summarise a run at its end.
type Totals struct {
	Steps            int            `json:"steps"`
	ToolCalls        int            `json:"tool_calls"`
	PerTool          map[string]int `json:"per_tool,omitempty"`
	WriteActions     int            `json:"write_actions,omitempty"`
	InvalidDecisions int            `json:"invalid_decisions"`
	Rejected         int            `json:"rejected_calls"`
	Usage            Usage          `json:"usage"`
	CostUSD          float64        `json:"cost_usd,omitempty"`
	ActiveMS         int64          `json:"active_ms"`
	ObservationBytes int            `json:"observation_bytes"`
	Events           int            `json:"events"`
}
