package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Type names a transition of the run state machine. The set is part of the
// wire contract: it is the last token of an event's subject.
type Type string

// Event types, in the order a run normally produces them.
const (
	TypeRejected          Type = "rejected"           // a task that never became a run
	TypeSecurity          Type = "security"           // a tenant-level security record: a refused attempt no run of the tenant can hold (see SecurityData)
	TypeStarted           Type = "started"            // task accepted, limits fixed
	TypeProposed          Type = "proposed"           // the model's decision, as received
	TypeValidated         Type = "validated"          // a call checked against its schema and the allowlist
	TypeDenied            Type = "denied"             // policy refused a call; the run stops
	TypeApprovalRequested Type = "approval_requested" // a gated write awaits a human (write path)
	TypeParked            Type = "parked"             // the run holds no worker until woken (write path)
	TypeApproved          Type = "approved"           // a decision on a gated call: approve, deny, expired, mark_done, retry, abandon
	TypeApprovalRejected  Type = "approval_rejected"  // an approval message that decided nothing, and why
	TypeCancelRequested   Type = "cancel_requested"   // an allowed cancel: the run stops at its next boundary (see CancelRequestedData)
	TypeCancelRejected    Type = "cancel_rejected"    // a cancel message that stopped nothing, and why
	TypeDiscarded         Type = "discarded"          // a model call paid for whose decision was not stored: another worker drove the run
	TypeReconciled        Type = "reconciled"         // a reconcile tool's answer about an unknown outcome
	TypeExecuting         Type = "executing"          // write-ahead: a tool is about to run
	TypeExecuted          Type = "executed"           // the tool returned, failed, timed out, or was previewed
	TypeObserved          Type = "observed"           // the exact observation the model receives
	TypeFinished          Type = "finished"           // the run stopped, with a reason
)

// Types returns every event type this version writes, in the order of
// the constants above: the enum of schemas/event.schema.json's type.
func Types() []Type {
	return []Type{
		TypeRejected, TypeSecurity, TypeStarted, TypeProposed, TypeValidated, TypeDenied,
		TypeApprovalRequested, TypeParked, TypeApproved, TypeApprovalRejected, TypeCancelRequested, TypeCancelRejected,
		TypeDiscarded, TypeReconciled,
		TypeExecuting, TypeExecuted, TypeObserved, TypeFinished,
	}
}

// Known reports whether t is a type this version understands.
func (t Type) Known() bool { return slices.Contains(Types(), t) }

// IsRecord reports whether t is a record rather than a step of the run:
// an event that any worker may append, with its own clock, while another
// drives the run, and that changes nothing the run decides on
// (approval_rejected: an answer that decided nothing; cancel_rejected: a
// cancel that stopped nothing; discarded: a model call lost to the run's
// driver, whose usage is charged). A record leaves a parked run parked,
// and its time is no part of the run's. cancel_requested is no record: it
// changes what the run does next, so a driver that finds one appended
// meanwhile reloads the run.
func (t Type) IsRecord() bool {
	return t == TypeApprovalRejected || t == TypeCancelRejected || t == TypeDiscarded
}

// Event is the envelope every event carries. Data holds the type-specific
// payload (see the *Data types), already redacted.
type Event struct {
	EventID string          `json:"event_id"`
	RunID   string          `json:"run_id"`
	Tenant  string          `json:"tenant"`
	Seq     uint64          `json:"seq"`
	Type    Type            `json:"type"`
	Time    time.Time       `json:"time"`
	Step    int             `json:"step"`
	CallID  string          `json:"call_id,omitempty"`
	Tool    string          `json:"tool,omitempty"`
	Data    json.RawMessage `json:"data"`
}

// Decode unmarshals the event's payload into v.
//
// It decodes with go-json-experiment's v1 package: encoding/json's API and
// semantics on the JSON v2 implementation (what encoding/json becomes with
// GOEXPERIMENT=jsonv2), about twice as fast here. Every read of a run folds
// all its events, so this is on the hot path of every resume.
func (e *Event) Decode(v any) error {
	if err := jsonv1.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("decode %s event %d of run %s: %w", e.Type, e.Seq, e.RunID, err)
	}
	return nil
}

// Encode returns the event as it is stored: its JSON, as an encoding/json
// Encoder with SetEscapeHTML(false) writes it, without the newline
// (FuzzEncodeAgreesWithEncodingJSON), written by the JSON v2
// implementation in its v1 mode, as Decode reads it: about twice as fast,
// on every append.
//
// Without HTML escapes: json.Marshal writes <, > and & as six-byte \u003c
// sequences, so an observation bounded to max_observation_bytes would be
// stored, and shown to the model, up to six times its bound. Both forms
// read back as the same strings.
func (e *Event) Encode() ([]byte, error) { return jsonv2.Marshal(e, encodeOptions) }

// EncodeData returns the JSON of an event's payload, as Encode writes it.
// Everything loopgate bounds in bytes (tool results, observations) is
// encoded with it, so the bound holds for what is stored.
func EncodeData(v any) (json.RawMessage, error) { return jsonv2.Marshal(v, encodeOptions) }

// encodeOptions are encoding/json's semantics without its HTML escaping.
var encodeOptions = jsonv2.JoinOptions(jsonv1.DefaultOptionsV1(), jsontext.EscapeForHTML(false))

// Subject is the JetStream subject the event is stored under.
func (e *Event) Subject() string { return EventSubject(e.Tenant, e.RunID, e.Type) }

// MsgID is the Nats-Msg-Id of the event's publish, so a retried append is
// deduplicated by the stream.
func (e *Event) MsgID() string { return e.RunID + "/" + fmt.Sprint(e.Seq) }
