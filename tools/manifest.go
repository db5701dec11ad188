package tools

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/loopgate/loopgate/events"
)

// Permission says whether a tool only observes the world or changes it.
type Permission string

// Permissions.
const (
	Read  Permission = "read"
	Write Permission = "write"
)

// Manifest describes one tool, as written in the config. The schema the
// model is shown and the schema calls are validated against both come from
// here: one source of truth.
type Manifest struct {
	// Name is what the model calls the tool. Required.
	Name string `json:"name"`
	// Version of the tool's contract. Defaults to "1".
	Version string `json:"version,omitempty"`
	// Description tells the model when to use the tool. Required.
	Description string `json:"description"`
	// Permission is read or write. Required.
	Permission Permission `json:"permission"`
	// ArgsSchema is the JSON Schema of the arguments; the config loader
	// resolves a file path to its content. additionalProperties:false is
	// enforced at registration. Required.
	ArgsSchema json.RawMessage `json:"args_schema"`
	// View shapes results into observations. Defaults to the whole result.
	View View `json:"view,omitzero"`
	// Timeout bounds one call. Defaults to 10s.
	Timeout events.Duration `json:"timeout,omitempty"`
	// MaxCallsPerRun bounds the tool's calls in one run. Defaults to 0: only
	// the run's total bound applies.
	MaxCallsPerRun int `json:"max_calls_per_run,omitempty"`
	// ParallelSafe lets calls of this (read-only) tool run concurrently.
	ParallelSafe bool `json:"parallel_safe,omitempty"`
	// Builtin names the Go implementation. Defaults to Name for a builtin
	// executor; must be empty for any other.
	Builtin string `json:"builtin,omitempty"`
	// Executor says where the tool runs: a Go builtin in the worker, or a
	// tool service reached by NATS request/reply. Defaults to builtin.
	Executor Executor `json:"executor,omitzero"`
	// ResultSchema is the JSON Schema a successful result must match; the
	// config loader resolves a file path to its content. A result that
	// does not match is a tool failure (ErrInvalidResult). Defaults to no
	// check.
	ResultSchema json.RawMessage `json:"result_schema,omitempty"`
	// Approval says whether a call needs a human's approval of its exact
	// arguments before it runs: "required" or "none". Defaults to required
	// for write tools and none for read tools.
	Approval string `json:"approval,omitempty"`
	// OnDeny says what a denial does: "observe" hands it to the model as
	// data, "stop" ends the run. Defaults to observe.
	OnDeny string `json:"on_deny,omitempty"`
	// ApprovalTTL is how long an approval may stay pending before it
	// expires. Defaults to the profile's approval TTL.
	ApprovalTTL events.Duration `json:"approval_ttl,omitempty"`
	// Idempotent declares that the tool dedupes by operation id, so a call
	// whose outcome is unknown may be retried with the same id.
	Idempotent bool `json:"idempotent,omitempty"`
	// Reconcile names a read tool that, given {"operation_id": ...},
	// reports {"applied": bool, "result": ...}: whether an operation whose
	// outcome is unknown took effect.
	Reconcile string `json:"reconcile,omitempty"`
	// ReconcileFences declares that the Reconcile tool, when it answers
	// "not applied", also marks the operation id abandoned in the backend,
	// so an attempt still under way can no longer take effect: after such
	// an answer a new attempt is safe at once. Defaults to false.
	ReconcileFences bool `json:"reconcile_fences,omitempty"`
	// MaxEffectDelay is how long after an attempt's deadline its effect may
	// still land in the backend. A reconcile that does not fence is asked
	// only once that much time has passed. Required for a write tool that
	// is neither Idempotent nor ReconcileFences and names a Reconcile tool;
	// no default.
	MaxEffectDelay events.Duration `json:"max_effect_delay,omitempty"`
	// UntrustedOutput declares that the tool's results carry third-party
	// text (complaint descriptions, e-mails, web pages). Once a run has
	// observed such a result, every later write in it is gated by a
	// human, whatever the tool's Approval says. Defaults to false.
	UntrustedOutput bool `json:"untrusted_output,omitempty"`
	// Tenants the tool serves. Defaults to every tenant.
	Tenants []string `json:"tenants,omitempty"`
	// Resources name the arguments that identify resources, and the
	// builtin that resolves each to its owning tenant, so a principal of
	// one tenant cannot touch another's.
	Resources []ResourceArg `json:"resources,omitempty"`
}

// ResourceArg says that argument Arg names a resource and that builtin
// Resolver, given {"id": <value>}, answers {"found": bool, "tenant": ...}.
type ResourceArg struct {
	Arg      string `json:"arg"`
	Resolver string `json:"resolver"`
}

// Approval values.
const (
	ApprovalRequired = "required"
	ApprovalNone     = "none"
)

// OnDeny values.
const (
	OnDenyObserve = "observe"
	OnDenyStop    = "stop"
)

// NeedsApproval reports whether calls of the tool are gated.
func (m Manifest) NeedsApproval() bool {
	if m.Approval == "" {
		return m.Permission == Write
	}
	return m.Approval == ApprovalRequired
}

// View is a designed, compact projection of a tool's result.
type View struct {
	// Fields keeps only these keys of an object result, or of each object
	// item of an array result. Defaults to all keys.
	Fields []string `json:"fields,omitempty"`
	// MaxItems keeps at most this many items of an array result and says
	// how many there were. Defaults to 0: no item bound beyond the byte bound.
	MaxItems int `json:"max_items,omitempty"`
}

// Executor kinds, as Executor.Kind reports them.
const (
	ExecutorBuiltin = "builtin"
	ExecutorNATS    = "nats"
)

// Executor says where a tool runs. The zero value is a Go builtin. In the
// config it is written "builtin" (or left out) or {nats: <subject>}.
type Executor struct {
	// NATS is the subject a tool service answers calls on, by
	// request/reply (the wire contract is in the README, "Remote tools").
	// Empty for a builtin.
	NATS string `json:"nats,omitempty"`
}

// Kind is ExecutorNATS or ExecutorBuiltin.
func (e Executor) Kind() string {
	if e.NATS != "" {
		return ExecutorNATS
	}
	return ExecutorBuiltin
}

// String is "builtin" or "nats:<subject>".
func (e Executor) String() string {
	if e.NATS != "" {
		return ExecutorNATS + ":" + e.NATS
	}
	return ExecutorBuiltin
}

// UnmarshalJSON accepts "builtin" or {"nats": "<subject>"}, strictly.
func (e *Executor) UnmarshalJSON(b []byte) error {
	var kind string
	if json.Unmarshal(b, &kind) == nil {
		if kind != ExecutorBuiltin {
			return fmt.Errorf("executor %q: want %q or {\"nats\": \"<subject>\"}", kind, ExecutorBuiltin)
		}
		*e = Executor{}
		return nil
	}
	type plain Executor
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	*e = Executor(p)
	return nil
}
