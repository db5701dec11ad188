package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// refuseStranger records an approval message addressed to a run that the
// subject's tenant does not have, and settles it: nothing is decided,
// nothing runs, and the target run's trail, if another tenant has the run,
// is left as it was (a run's first event is started, and its events are
// its own tenant's). The refusal goes where auditors look instead, as
// tenant-level security records (events.SecurityData):
//
//   - to the subject's tenant, always, class unknown_run, saying the same
//     whether or not another tenant has the run, so that it tells the
//     subject's auditors nothing of other tenants' runs;
//   - to the run's own tenant, when another tenant has it, class
//     other_tenant, naming the subject it came on.
//
// Each record is the only event of a pseudo-run named by its tenant and
// the message's approvals sequence, appended as its first event: a
// redelivered message, or a second pool deciding it, finds its record and
// writes no second one. A record that cannot be stored is an error, for
// the caller to retry or wait out; a message whose records are stored is
// settled.
func (p *Pool) refuseStranger(ctx context.Context, msg approvalMsg, tenant, runID, callID string) (outcome, string, error) {
	m, _, errs := p.parseApproval(msg.data)
	base := events.SecurityData{
		Subject: msg.subject, ClaimedRunID: runID, ClaimedCallID: callID,
		Signature: events.SignatureUnsigned, Errors: errs,
		ApprovalSeq: msg.seq, Received: msg.received.UTC(),
	}
	if m != nil {
		base.Approver, base.Decision, base.ArgsHash = m.Approver.ID, string(m.Decision), m.ArgsHash
		base.Signature = p.signatureState(*m)
	}
	owner, found, err := p.journal.TenantOf(ctx, runID)
	if err != nil {
		return 0, "", err
	}
	unknown := base
	unknown.Class = events.SecurityUnknownRun
	unknown.Detail = fmt.Sprintf("tenant %s has no run %s: the message decides nothing", tenant, runID)
	if m != nil && (m.RunID != runID || m.CallID != callID) {
		unknown.Detail += fmt.Sprintf(" (the message itself names run %s call %s)", m.RunID, m.CallID)
	}
	if err := p.appendSecurity(ctx, tenant, unknown); err != nil {
		return 0, "", err
	}
	if found && owner != tenant {
		other := base
		other.Class = events.SecurityOtherTenant
		other.Detail = fmt.Sprintf("an approval for call %s of this tenant's run %s came on tenant %s's subject: the message decides nothing, and the run's trail does not hold it", callID, runID, tenant)
		if err := p.appendSecurity(ctx, owner, other); err != nil {
			return 0, "", err
		}
	}
	p.crash("after:security")
	p.log.WarnContext(ctx, "approval for a run its subject's tenant does not have; recorded as a security record",
		"subject", msg.subject, "approval_seq", msg.seq, "approver", base.Approver, "signature", base.Signature, "other_tenant", found && owner != tenant)
	return settled, "", nil
}

// signatureState says what m's signature proves about its claimed approver,
// checked against the key the policy configures for that id.
func (p *Pool) signatureState(m approvals.Message) string {
	if m.Signature == "" {
		return events.SignatureUnsigned
	}
	key := p.app.Policy.Approvers[m.Approver.ID].PublicKey
	if key == "" || approvals.VerifySignature(m, key) != nil {
		return events.SignatureBad
	}
	return events.SignatureVerified
}

// appendSecurity stores d as the first and only event of its record's
// pseudo-run in tenant. A record stored already (an earlier try, another
// pool) is not an error.
func (p *Pool) appendSecurity(ctx context.Context, tenant string, d events.SecurityData) error {
	data, err := events.EncodeData(d)
	if err != nil {
		return fmt.Errorf("worker: encode security record: %w", err)
	}
	data, _ = p.redactor.JSON(data)
	e := events.Event{
		EventID: p.ids.NewEventID(), RunID: events.SecurityRecordID(tenant, d.ApprovalSeq), Tenant: tenant, Seq: 1,
		Type: events.TypeSecurity, Time: p.now().UTC(), Data: data,
	}
	if _, err := p.journal.Append(ctx, 0, e); err != nil && !errors.Is(err, journal.ErrConflict) {
		return err
	}
	return nil
}
