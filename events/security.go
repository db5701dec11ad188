package events

import (
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Security record classes: why a message was refused before any run of
// the record's tenant could hold the refusal.
const (
	// SecurityUnknownRun: an approval message addressed to a run that its
	// subject's tenant does not have (no started event), whether or not
	// another tenant has a run of that id. The record goes to the
	// subject's tenant, and says the same in both cases, so that its
	// auditors learn nothing of other tenants' runs.
	SecurityUnknownRun = "unknown_run"
	// SecurityOtherTenant: an approval message addressed to a run of this
	// tenant came on another tenant's subject. The record goes to the
	// run's own tenant; the run's trail is left as it was.
	SecurityOtherTenant = "other_tenant"
)

// Signature states of a security record: what the message's signature
// proves about its claimed approver, checked against the key the policy
// configures for that approver id. The two refusals are the approvals
// package's rejection classes of the same name.
const (
	SignatureVerified = "verified"      // signed by the claimed approver's configured key
	SignatureUnsigned = "unsigned"      // no signature
	SignatureBad      = "bad_signature" // a signature that does not verify, or no key is configured for the approver
)

// SecurityData is a tenant-level security record: one refused attempt that
// no run of the tenant can record, such as an approval for a run the
// tenant does not have. It is the only event of its own pseudo-run (see
// SecurityRecordID), stored on loopgate.events.<tenant>.<record_id>.security
// (SecurityFilter lists them). Every value but Class, Detail and
// Signature is as the message claimed it, unchecked.
type SecurityData struct {
	Class  string `json:"class"`
	Detail string `json:"detail"`
	// Subject is the subject the message came on.
	Subject string `json:"subject"`
	// ClaimedRunID and ClaimedCallID are the run and call the subject
	// names.
	ClaimedRunID  string `json:"claimed_run_id"`
	ClaimedCallID string `json:"claimed_call_id"`
	// Approver, Decision and ArgsHash are what the message says, as far as
	// it could be read.
	Approver string `json:"approver,omitempty"`
	Decision string `json:"decision,omitempty"`
	ArgsHash string `json:"args_hash,omitempty"`
	// Signature is SignatureVerified, SignatureUnsigned or SignatureBad.
	Signature string `json:"signature"`
	// Errors says why the message does not match its schema, when it does
	// not.
	Errors []FieldError `json:"errors,omitempty"`
	// ApprovalSeq is the message's sequence in LOOPGATE_APPROVALS, where it
	// is kept as published, and Received when that stream stored it.
	ApprovalSeq uint64    `json:"approval_seq"`
	Received    time.Time `json:"received"`
}

// SecurityRecordID names the pseudo-run holding the security record of
// approval message approvalSeq in tenant: the UUID v5 of the namespace and
// "security", NUL, "approval", NUL, tenant, NUL, the decimal seq. A
// redelivered message finds its record instead of writing a second one.
func SecurityRecordID(tenant string, approvalSeq uint64) string {
	return uuid.NewSHA1(namespace, []byte("security\x00approval\x00"+tenant+"\x00"+strconv.FormatUint(approvalSeq, 10))).String()
}

// SecurityFilter matches the security records of tenant, or of every
// tenant when tenant is "".
func SecurityFilter(tenant string) string {
	if tenant == "" {
		tenant = "*"
	}
	return EventsPrefix + "." + tenant + ".*." + string(TypeSecurity)
}
