package approvals_test

import (
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
)

// A message that reached the stream at or after the expiry of a question
// no person answered is expired, whatever settled the entry since (its
// expiry, or its run ending with it open); one that came in time for a
// question settled otherwise, or for a question a person answered, is
// not_pending.
func TestAMessageAfterAnUnansweredQuestionsExpiryIsExpired(t *testing.T) {
	t.Parallel()
	expiry := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	msg := approvals.Message{ArgsHash: "sha256:aa", Decision: approvals.Approve, Approver: approvals.Approver{ID: "supervisor@cityops"}}
	base := approvals.Entry{Kind: approvals.KindApproval, Round: 1, Tenant: "cityops", Tool: "draft_escalation",
		ArgsHash: "sha256:aa", Principal: "dev@cityops", ExpiresAt: expiry}
	expired := base
	expired.State, expired.Decision = string(approvals.Expired), approvals.Expired
	withdrawn := base
	withdrawn.State = approvals.StateWithdrawn
	approved := base
	approved.State, approved.Decision, approved.DecidedBy = "approved", approvals.Approve, "supervisor@cityops"
	tests := []struct {
		name       string
		given      approvals.Entry
		received   time.Time
		want       string
		wantDetail string
	}{
		{"expired, the message after the expiry", expired, expiry.Add(time.Minute), approvals.RejectExpired, "the question expired at 2026-11-30T10:00:00Z"},
		{"expired, the message at the expiry", expired, expiry, approvals.RejectExpired, "the question expired at 2026-11-30T10:00:00Z"},
		{"withdrawn, the message after the expiry", withdrawn, expiry.Add(time.Second), approvals.RejectExpired, "the question expired at 2026-11-30T10:00:00Z"},
		{"withdrawn, the message before the expiry", withdrawn, expiry.Add(-time.Second), approvals.RejectNotPending, "already decided: withdrawn, its run ended unanswered"},
		{"approved by a person, the message after the expiry", approved, expiry.Add(time.Minute), approvals.RejectNotPending, "already decided: approve by supervisor@cityops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Check's now is long after: only the receipt time counts.
			class, detail := approvals.Check(msg, tt.given, approvals.Policy{Known: true, MayApprove: true, Received: tt.received}, expiry.Add(time.Hour))
			if class != tt.want || detail != tt.wantDetail {
				t.Errorf("Check = %s (%q), want %s (%q)", class, detail, tt.want, tt.wantDetail)
			}
		})
	}
}
