package events

import (
	"fmt"
	"strings"
	"time"
)

// CancelPrefix is where cancels are published:
// loopgate.cancel.<tenant>.<run_id> (see CancelSubject).
const CancelPrefix = "loopgate.cancel"

// CancelSubject is where a cancel of one run is published.
func CancelSubject(tenant, runID string) string {
	return CancelPrefix + "." + tenant + "." + runID
}

// ParseCancelSubject splits loopgate.cancel.<tenant>.<run_id>.
func ParseCancelSubject(subject string) (tenant, runID string, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != "loopgate" || parts[1] != "cancel" || !ValidToken(parts[2]) || !ValidToken(parts[3]) {
		return "", "", fmt.Errorf("not a cancel subject: %q", subject)
	}
	return parts[2], parts[3], nil
}

// Cancel rejection classes: why a cancel message stopped nothing.
const (
	// CancelInvalid: the message does not match schemas/cancel.schema.json,
	// or names another run than its subject; Errors names the fields.
	CancelInvalid = "invalid"
	// CancelNotAuthorized: the policy does not let the requester cancel
	// the run (neither the task's principal nor a role with cancel for
	// its agent, in the run's tenant).
	CancelNotAuthorized = "not_authorized"
	// CancelFinished: the run had finished already; the cancel is ignored.
	CancelFinished = "finished"
	// CancelAlready: an earlier cancel of the run is being carried out.
	CancelAlready = "already_cancelled"
)

// Requester is who asks for a cancel, as the message names them. Their
// roles come from the policy, never from the message.
type Requester struct {
	ID string `json:"id"`
}

// CancelRequestedData: an allowed cancel of the run. The run's driver
// finishes it cancelled at its next boundary; a parked run is finished by
// the cancel's handler at once.
type CancelRequestedData struct {
	RequestedBy Requester `json:"requested_by"`
	Reason      string    `json:"reason"`
	// CancelSeq is the message's sequence in LOOPGATE_CANCELS, where it is
	// kept as published, and Received when that stream stored it.
	CancelSeq uint64    `json:"cancel_seq"`
	Received  time.Time `json:"received"`
	// Parked: the run was parked when the cancel came, and its handler
	// finished it.
	Parked bool `json:"parked,omitempty"`
}

// CancelRejectedData: a cancel message that stopped nothing, and why.
// RequestedBy and Reason are what the message says, as far as it could be
// read.
type CancelRejectedData struct {
	Class       string       `json:"class"`
	Detail      string       `json:"detail"`
	RequestedBy *Requester   `json:"requested_by,omitempty"`
	Reason      string       `json:"reason,omitempty"`
	Errors      []FieldError `json:"errors,omitempty"`
	CancelSeq   uint64       `json:"cancel_seq"`
}

// CancelledDetail is the detail of the finished event of a cancelled run:
// who asked and why.
func CancelledDetail(d *CancelRequestedData) string {
	return fmt.Sprintf("cancelled by %s: %s", d.RequestedBy.ID, d.Reason)
}

// CancelMessage is what a client publishes on CancelSubject
// (schemas/cancel.schema.json).
type CancelMessage struct {
	RunID       string    `json:"run_id"`
	RequestedBy Requester `json:"requested_by"`
	Reason      string    `json:"reason"`
}
