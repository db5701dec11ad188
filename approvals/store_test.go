package approvals_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

func openStore(t *testing.T, env *natstest.Env) (*approvals.Store, jetstream.KeyValue) {
	t.Helper()
	kv, err := env.JS.KeyValue(t.Context(), journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	pkv, err := env.JS.KeyValue(t.Context(), journal.BucketPending)
	if err != nil {
		t.Fatal(err)
	}
	return approvals.NewStore(kv, pkv), pkv
}

func question(tenant string, i int) approvals.Entry {
	return approvals.Entry{Kind: approvals.KindApproval, Round: 1, Tenant: tenant,
		RunID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), CallID: "s1c1", Tool: "draft_escalation",
		ArgsHash: "sha256:00", Principal: "dev@cityops", RequestedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
}

// Listing what awaits a human costs what is pending, not every question
// ever asked: the old listing read every entry of loopgate_approvals, one
// message get each, and took 2.7 s over 41,000 decided entries (about a
// day's questions for a busy deployment). It now lists the loopgate_pending
// index, which a decision empties, and reads back only those entries.
func TestPendingReadsOnlyWhatIsPending(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	ctx := t.Context()
	store, pkv := openStore(t, env)
	const asked = 40
	for i := range asked {
		e, err := store.Request(ctx, question("cityops", i))
		if err != nil {
			t.Fatal(err)
		}
		if i < asked-2 { // all but two are answered
			_, rev, err := store.Get(ctx, e.RunID, e.CallID)
			if err != nil {
				t.Fatal(err)
			}
			e.State, e.Decision, e.DecidedBy = "approved", approvals.Approve, "supervisor@cityops"
			if err := store.Decide(ctx, e, rev); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := store.Request(ctx, question("harbor", asked)); err != nil {
		t.Fatal(err)
	}
	// A key whose removal was lost: listed, its entry decided.
	stale := question("cityops", 0)
	if _, err := pkv.Create(ctx, approvals.PendingKey(stale.Tenant, stale.RunID, stale.CallID), nil); err != nil {
		t.Fatalf("put back a decided question's key: %v", err)
	}

	gets, err := env.Conn.SubscribeSync("$JS.API.STREAM.MSG.GET.KV_" + journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := store.Pending(ctx, "cityops")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].RunID == got[1].RunID {
		t.Fatalf("pending for cityops = %+v, want the two unanswered questions", got)
	}
	for _, e := range got {
		if e.Tenant != "cityops" || !e.Pending() {
			t.Errorf("listed %+v", e)
		}
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := gets.Pending(); n != 3 {
		t.Errorf("listing read %d entries, want 3 (two pending, one left listed) of the %d asked", n, asked)
	}
	all, err := store.Pending(ctx, "")
	if err != nil || len(all) != 3 {
		t.Errorf("pending for every tenant = %d entries (%v), want 3", len(all), err)
	}

	// A decision takes its key out.
	e := got[0]
	_, rev, err := store.Get(ctx, e.RunID, e.CallID)
	if err != nil {
		t.Fatal(err)
	}
	e.State, e.Decision = "denied", approvals.Deny
	if err := store.Decide(ctx, e, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := pkv.Get(ctx, approvals.PendingKey(e.Tenant, e.RunID, e.CallID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a decided question's key: %v, want it gone", err)
	}
	if left, err := store.Pending(ctx, "cityops"); err != nil || len(left) != 1 {
		t.Errorf("pending after one more decision = %d (%v), want 1", len(left), err)
	}
}

// A question is listed until a little after it expires, whoever forgets
// to take it out: its key carries a TTL.
func TestAPendingKeyAgesOutAfterItsQuestionExpires(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	store, pkv := openStore(t, env)
	q := question("cityops", 1)
	if _, err := store.Request(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	e, err := pkv.Get(t.Context(), approvals.PendingKey(q.Tenant, q.RunID, q.CallID))
	if err != nil {
		t.Fatal(err)
	}
	m, err := env.JS.Stream(t.Context(), "KV_"+journal.BucketPending)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := m.GetMsg(t.Context(), e.Revision())
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := time.ParseDuration(raw.Header.Get(jetstream.MsgTTLHeader))
	if err != nil {
		t.Fatalf("TTL header %q: %v", raw.Header.Get(jetstream.MsgTTLHeader), err)
	}
	if want := time.Until(q.ExpiresAt); ttl < want || ttl > want+2*time.Minute {
		t.Errorf("the key's TTL is %s, want a little over the question's %s", ttl, want.Round(time.Second))
	}
}
