package approvals_test

import (
	"testing"

	"github.com/loopgate/loopgate/approvals"
)

// A question nobody decided (expired, withdrawn) used to be described as
// "already decided: expired by " with no name after "by".
func TestNotPendingDetailNamesOnlyAPersonWhoDecided(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    approvals.Entry
		want string
	}{
		{approvals.Entry{State: "decided", Decision: approvals.Approve, DecidedBy: "sup@cityops"}, "already decided: approve by sup@cityops"},
		{approvals.Entry{State: "decided", Decision: approvals.Expired}, "already decided: expired"},
		{approvals.Entry{State: approvals.StateWithdrawn}, "already decided: withdrawn, its run ended unanswered"},
	} {
		if got := approvals.NotPendingDetail(tc.e); got != tc.want {
			t.Errorf("NotPendingDetail(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}
