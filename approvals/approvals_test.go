package approvals_test

import (
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
)

func TestCheckDecidesWhoMayDecideWhat(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	pending := approvals.Entry{
		State: approvals.StatePending, Kind: approvals.KindApproval, Round: 1, Tool: "draft_escalation",
		ArgsHash: "sha256:aa", Principal: "dev@cityops", ExpiresAt: now.Add(time.Hour),
	}
	msg := approvals.Message{ArgsHash: "sha256:aa", Decision: approvals.Approve, Approver: approvals.Approver{ID: "supervisor@cityops"}}
	allowed := approvals.Policy{Known: true, MayApprove: true}
	cases := []struct {
		name  string
		given func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time)
		want  string
	}{
		{"a valid approval", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			return msg, pending, allowed, now
		}, ""},
		{"a valid denial", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			m := msg
			m.Decision = approvals.Deny
			return m, pending, allowed, now
		}, ""},
		{"already decided", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			e := pending
			e.State, e.Decision, e.DecidedBy = "approved", approvals.Approve, "supervisor@cityops"
			return msg, e, allowed, now
		}, approvals.RejectNotPending},
		{"stale hash", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			m := msg
			m.ArgsHash = "sha256:bb"
			return m, pending, allowed, now
		}, approvals.RejectHashMismatch},
		{"unknown approver", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			return msg, pending, approvals.Policy{}, now
		}, approvals.RejectUnknown},
		{"approver without the role", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			return msg, pending, approvals.Policy{Known: true}, now
		}, approvals.RejectNotAllowed},
		{"self approval", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			m := msg
			m.Approver.ID = "dev@cityops"
			return m, pending, allowed, now
		}, approvals.RejectSelf},
		{"self approval under another spelling of the principal", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			m, e := msg, pending
			m.Approver.ID, e.Principal = "dev@cityops", " ＤＥＶ@CityOps" // full-width, another case, a space
			return m, e, allowed, now
		}, approvals.RejectSelf},
		{"self approval when policy allows it", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			m := msg
			m.Approver.ID = "dev@cityops"
			return m, pending, approvals.Policy{Known: true, MayApprove: true, AllowSelf: true}, now
		}, ""},
		{"expired", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			return msg, pending, allowed, now.Add(time.Hour)
		}, approvals.RejectExpired},
		{"arrived after the expiry", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			p := allowed
			p.Received = pending.ExpiresAt
			return msg, pending, p, pending.ExpiresAt.Add(time.Second)
		}, approvals.RejectExpired},
		// A decision that reached the stream in time decides, however long
		// it waited for a worker: the question's expiry is judged against
		// the message's arrival, not against when it is decided.
		{"arrived in time, decided after the expiry", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			p := allowed
			p.Received = pending.ExpiresAt.Add(-time.Minute)
			return msg, pending, p, pending.ExpiresAt.Add(time.Minute)
		}, ""},
		{"retry answers no approval question", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			m := msg
			m.Decision = approvals.Retry
			return m, pending, allowed, now
		}, approvals.RejectWrongKind},
		{"approve answers no needs_human question", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			e := pending
			e.Kind = approvals.KindNeedsHuman
			return msg, e, allowed, now
		}, approvals.RejectWrongKind},
		{"nobody may decide expired", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			m := msg
			m.Decision = approvals.Expired
			return m, pending, allowed, now
		}, approvals.RejectWrongKind},
		{"a replay wins nothing even from an approver", func() (approvals.Message, approvals.Entry, approvals.Policy, time.Time) {
			e := pending
			e.State, e.Decision = "denied", approvals.Deny
			return msg, e, allowed, now
		}, approvals.RejectNotPending},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			class, detail := approvals.Check(c.given())
			if class != c.want {
				t.Fatalf("class = %q (%s), want %q", class, detail, c.want)
			}
			if class != "" && detail == "" {
				t.Fatal("a rejection without a detail")
			}
		})
	}
}
