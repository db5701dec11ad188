package approvals

import (
	"encoding/json"
	"strings"
	"time"

	"golang.org/x/text/unicode/norm"
)

// Decision is what an approver decides, or what expiry decides for them.
type Decision string

// Decisions. Approve and Deny answer an approval; MarkDone, Retry and
// Abandon answer a call whose outcome is unknown; Expired is loopgate's,
// never an approver's.
const (
	Approve  Decision = "approve"
	Deny     Decision = "deny"
	Expired  Decision = "expired"
	MarkDone Decision = "mark_done"
	Retry    Decision = "retry"
	Abandon  Decision = "abandon"
)

// Kind is what a pending entry asks a human.
type Kind string

// Kinds.
const (
	// KindApproval: may this exact call run?
	KindApproval Kind = "approval"
	// KindNeedsHuman: a write's outcome is unknown; did it happen, should
	// it be retried, or abandoned?
	KindNeedsHuman Kind = "needs_human"
)

// Accepts reports whether d answers a question of kind k.
func (k Kind) Accepts(d Decision) bool {
	switch k {
	case KindApproval:
		return d == Approve || d == Deny
	case KindNeedsHuman:
		return d == MarkDone || d == Retry || d == Abandon
	}
	return false
}

// Message is an approval as an approver publishes it on
// loopgate.approvals.<tenant>.<run_id>.<call_id>. It matches
// schemas/approval.schema.json.
type Message struct {
	RunID    string   `json:"run_id"`
	CallID   string   `json:"call_id"`
	ArgsHash string   `json:"args_hash"`
	Decision Decision `json:"decision"`
	Approver Approver `json:"approver"`
	Reason   string   `json:"reason,omitempty"`
	// SignedAt is when the approver signed, RFC 3339; it is signed as
	// written (see SigningPayload). Empty on an unsigned message.
	SignedAt string `json:"signed_at,omitempty"`
	// Signature is the unpadded base64url ed25519 signature of the
	// message's signing payload by the approver's nkey. Empty on an
	// unsigned message.
	Signature string `json:"signature,omitempty"`
}

// Approver names who decided. Their roles come from the policy.
type Approver struct {
	ID string `json:"id"`
}

// StatePending is the state of an entry awaiting a decision; a decided
// entry's state is its decision.
const StatePending = "pending"

// StateWithdrawn is the state of an entry whose run ended with the
// question unanswered (it was stopped, say as a poison message): there is
// nothing left to decide, so it is no longer listed as pending, and an
// answer to it is rejected not_pending.
const StateWithdrawn = "withdrawn"

// Entry is the state of one gated call in loopgate_approvals, key
// <run_id>.<call_id>.
type Entry struct {
	State       string          `json:"state"`
	Kind        Kind            `json:"kind"`
	Round       int             `json:"round"`
	Tenant      string          `json:"tenant"`
	RunID       string          `json:"run_id"`
	CallID      string          `json:"call_id"`
	Step        int             `json:"step"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args,omitempty"`
	ArgsHash    string          `json:"args_hash"`
	OperationID string          `json:"operation_id"`
	Principal   string          `json:"principal"`
	Why         string          `json:"why,omitempty"`
	RequestedAt time.Time       `json:"requested_at"`
	ExpiresAt   time.Time       `json:"expires_at"`

	Decision    Decision  `json:"decision,omitempty"`
	DecidedBy   string    `json:"decided_by,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	DecidedAt   time.Time `json:"decided_at,omitzero"`
	DecisionSeq uint64    `json:"decision_seq,omitempty"` // LOOPGATE_APPROVALS sequence of the deciding message

	// ListedSeq is the sequence of the question's message in LOOPGATE_PENDING,
	// deleted when the question is decided (0: not known).
	ListedSeq uint64 `json:"listed_seq,omitempty"`

	// AskedAfterSeq is the LOOPGATE_APPROVALS sequence of the last message
	// on the call's subject when this round was asked (0: none). A message
	// at or below it was sent before the round existed, to answer an
	// earlier one: a message does not name its round, and a second answer
	// to round 1 decided late must not answer round 2, which no human has
	// seen.
	AskedAfterSeq uint64 `json:"asked_after_seq,omitempty"`
}

// Pending reports whether the entry awaits a decision.
func (e *Entry) Pending() bool { return e.State == StatePending }

// Key is the KV key of a call's entry.
func Key(runID, callID string) string { return runID + "." + callID }

// Rejection classes: why a message did not decide a call. Each is recorded
// in the run's trail as an approval_rejected event.
const (
	RejectInvalid      = "invalid"            // the message does not match the schema or its subject
	RejectNoRequest    = "no_such_request"    // the call has no pending question
	RejectNotPending   = "not_pending"        // already decided: a duplicate, a replay or a late race
	RejectWrongKind    = "wrong_decision"     // e.g. approve for a needs_human question
	RejectHashMismatch = "args_hash_mismatch" // stale or forged: not the arguments that would run
	RejectUnknown      = "unknown_approver"   // the approver is not in the policy
	RejectNotAllowed   = "not_authorized"     // the approver's roles may not approve this tool
	RejectSelf         = "self_approval"      // the approver is the principal who asked
	RejectExpired      = "expired"            // the question expired before the decision arrived
	RejectUnsigned     = "unsigned"           // the policy requires signatures and the message has none
	RejectBadSignature = "bad_signature"      // the signature does not verify against the approver's configured key, or they have none
	RejectStale        = "stale_signature"    // signed longer ago than the window before it arrived (a replay), or in the future
	RejectUndecided    = "undecided"          // no worker could handle the message in all its deliveries (the run or the entry could not be read or written); publish it again
)

// Policy is what Check needs to know about the approver.
type Policy struct {
	// Known: the approver id is in the policy.
	Known bool
	// MayApprove: one of the approver's configured roles may approve the tool.
	MayApprove bool
	// OtherTenant: the approver's configured tenants do not include the
	// run's (policy.approvers.<id>.tenants); the message is refused as
	// not_authorized whatever its roles allow.
	OtherTenant bool
	// AllowSelf: self-approval is allowed.
	AllowSelf bool

	// RequireSignature: an unsigned message is rejected
	// (policy.require_signatures). A signature is verified whenever one is
	// present, required or not.
	RequireSignature bool
	// PublicKey is the approver's user nkey from the policy; "" when none
	// is configured, and then a signed message is rejected.
	PublicKey string
	// MaxAge bounds how long before Received a signature may have been
	// made (policy.approval_max_age). Defaults to DefaultMaxAge.
	MaxAge time.Duration
	// Received is when the message reached the approvals stream (its
	// stream timestamp, set by the NATS server): signed_at is judged
	// against it, so a message that waits for a worker does not go stale
	// while a re-publication of an old one does; and so is the question's
	// expiry: a decision that reached the stream in time decides, however
	// long it waited for a worker (a busy lane, an outage, a redelivery
	// after a crash). Zero: Check's now.
	Received time.Time
}

// arrived is when the message came, as far as the policy knows.
func (p Policy) arrived(now time.Time) time.Time {
	if p.Received.IsZero() {
		return now
	}
	return p.Received
}

// Check decides whether msg may decide entry. It returns "" when it may,
// else a rejection class and a detail for the audit trail. The order
// matters: a replay of a decided call is a no-op whoever sends it; then
// the message is authenticated (unsigned, bad_signature, stale_signature),
// so that nothing a forged message claims is judged; then what it says is.
//
// A message for a question no person answered (its expiry decided it, or
// its run ended with it unanswered) that came at or after the question's
// expiry is expired, not not_pending: it was late, whatever happened since.
func Check(msg Message, e Entry, p Policy, now time.Time) (class, detail string) {
	if !e.Pending() {
		if unansweredByAPerson(e) && !e.ExpiresAt.IsZero() && !p.arrived(now).Before(e.ExpiresAt) {
			return RejectExpired, ExpiredDetail(e.ExpiresAt)
		}
		return RejectNotPending, NotPendingDetail(e)
	}
	if class, detail := authenticate(msg, p, now); class != "" {
		return class, detail
	}
	switch {
	case !e.Kind.Accepts(msg.Decision):
		return RejectWrongKind, "decision " + string(msg.Decision) + " does not answer a " + string(e.Kind) + " question"
	case msg.ArgsHash != e.ArgsHash:
		return RejectHashMismatch, "args_hash " + msg.ArgsHash + " is not the pending " + e.ArgsHash
	case !p.Known:
		return RejectUnknown, msg.Approver.ID + " is not an approver in the policy"
	case p.OtherTenant:
		return RejectNotAllowed, msg.Approver.ID + " may not decide calls of tenant " + e.Tenant + ": not among the approver's tenants in policy.approvers"
	case !p.MayApprove:
		return RejectNotAllowed, msg.Approver.ID + "'s roles may not approve " + e.Tool
	case samePrincipal(msg.Approver.ID, e.Principal) && !p.AllowSelf:
		return RejectSelf, msg.Approver.ID + " asked for this run and may not approve it"
	case !p.arrived(now).Before(e.ExpiresAt):
		return RejectExpired, ExpiredDetail(e.ExpiresAt)
	}
	return "", ""
}

// unansweredByAPerson reports whether a settled entry was settled by no
// one: its expiry decided it, or its run ended with it withdrawn.
func unansweredByAPerson(e Entry) bool {
	return e.State == StateWithdrawn || e.Decision == Expired
}

// ExpiredDetail is the detail of an expired rejection: when the question
// expired.
func ExpiredDetail(expiresAt time.Time) string {
	return "the question expired at " + expiresAt.UTC().Format(time.RFC3339)
}

// samePrincipal reports whether an approver id and a task's principal id
// name one person, as far as refusing self-approval goes: equal once
// trimmed, put in Unicode compatibility form (NFKC: a full-width letter is
// its plain one) and case-folded. The approver id is a key of the policy,
// the principal whatever the task's sender wrote: compared byte for byte,
// dev@cityops approved the runs it sent as Dev@CityOps or "dev@cityops ".
// Erring towards "the same" only refuses more.
func samePrincipal(a, b string) bool {
	canon := func(s string) string { return norm.NFKC.String(strings.TrimSpace(s)) }
	return strings.EqualFold(canon(a), canon(b))
}

// NotPendingDetail says how e, no longer pending, was settled: by whom
// when a person decided it ("already decided: approve by sup@cityops"),
// and without a name when nobody did (an expired question, a withdrawn
// one: the detail used to end in "by " and nothing).
func NotPendingDetail(e Entry) string {
	what := string(e.Decision)
	if e.State == StateWithdrawn {
		what = "withdrawn, its run ended unanswered"
	}
	if e.DecidedBy == "" {
		return "already decided: " + what
	}
	return "already decided: " + what + " by " + e.DecidedBy
}
