package approvals_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

func openStore(t *testing.T, env *natstest.Env) *approvals.Store {
	t.Helper()
	index, err := approvals.OpenIndex(t.Context(), env.JS, journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	return approvals.NewStore(entries(t, env), index)
}

// openStoreWithoutIndex is the store as it was before the pending index:
// it writes entries and lists nothing.
func openStoreWithoutIndex(t *testing.T, env *natstest.Env) *approvals.Store {
	t.Helper()
	return approvals.NewStore(entries(t, env), nil)
}

func entries(t *testing.T, env *natstest.Env) jetstream.KeyValue {
	t.Helper()
	kv, err := env.JS.KeyValue(t.Context(), journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func question(tenant string, i int) approvals.Entry {
	return approvals.Entry{Kind: approvals.KindApproval, Round: 1, Tenant: tenant,
		RunID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), CallID: "s1c1", Tool: "draft_escalation",
		ArgsHash: "sha256:00", Principal: "dev@cityops", RequestedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
}

// answer decides a stored question as the approvals handler does: the
// entry as read, compare-and-set at its revision.
func answer(t *testing.T, store *approvals.Store, runID, callID string, d approvals.Decision) {
	t.Helper()
	e, rev, err := store.Get(t.Context(), runID, callID)
	if err != nil {
		t.Fatal(err)
	}
	e.State, e.Decision, e.DecidedBy = "approved", d, "supervisor@cityops"
	if d == approvals.Deny {
		e.State = "denied"
	}
	if err := store.Decide(t.Context(), e, rev); err != nil {
		t.Fatal(err)
	}
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
	store := openStore(t, env)
	const asked = 40
	for i := range asked {
		e, err := store.Request(ctx, question("cityops", i))
		if err != nil {
			t.Fatal(err)
		}
		if i < asked-2 { // all but two are answered
			answer(t, store, e.RunID, e.CallID, approvals.Approve)
		}
	}
	if _, err := store.Request(ctx, question("harbor", asked)); err != nil {
		t.Fatal(err)
	}
	// A question whose deletion from the index was lost: listed, its
	// entry decided.
	stale := question("cityops", 0)
	if _, err := env.JS.Publish(ctx, events.PendingSubject(stale.Tenant, stale.RunID, stale.CallID), nil); err != nil {
		t.Fatalf("list a decided question again: %v", err)
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

	// A decision takes it out.
	e := got[0]
	answer(t, store, e.RunID, e.CallID, approvals.Deny)
	index, err := env.JS.Stream(ctx, journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := index.GetLastMsgForSubject(ctx, events.PendingSubject(e.Tenant, e.RunID, e.CallID)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a decided question in the index: %v, want it gone", err)
	}
	if left, err := store.Pending(ctx, "cityops"); err != nil || len(left) != 1 {
		t.Errorf("pending after one more decision = %d (%v), want 1", len(left), err)
	}
}

// A question is listed until a little after it expires, whoever forgets
// to take it out: its message carries a TTL.
func TestAListedQuestionAgesOutAfterItExpires(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	store := openStore(t, env)
	q := question("cityops", 1)
	if _, err := store.Request(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	index, err := env.JS.Stream(t.Context(), journal.StreamPending)
	if err != nil {
		t.Fatal(err)
	}
	m, err := index.GetLastMsgForSubject(t.Context(), events.PendingSubject(q.Tenant, q.RunID, q.CallID))
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := time.ParseDuration(m.Header.Get(jetstream.MsgTTLHeader))
	if err != nil {
		t.Fatalf("TTL header %q: %v", m.Header.Get(jetstream.MsgTTLHeader), err)
	}
	if want := time.Until(q.ExpiresAt); ttl < want || ttl > want+2*time.Minute {
		t.Errorf("the listing's TTL is %s, want a little over the question's %s", ttl, want.Round(time.Second))
	}
	// Asked again (a worker that died after asking): listed once.
	if _, err := store.Request(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	info, err := index.Info(t.Context())
	if err != nil || info.State.Msgs != 1 {
		t.Errorf("index after asking twice: %+v %v, want one message", info.State, err)
	}
}

// The questions asked before the index existed (the upgrade that added it
// finds them parked) are listed once, by the first process that starts;
// after that a start costs one stream info.
func TestQuestionsAskedBeforeTheIndexAreListedOnce(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	ctx := t.Context()
	old := openStoreWithoutIndex(t, env)
	for i := range 3 {
		if _, err := old.Request(ctx, question("cityops", i)); err != nil {
			t.Fatal(err)
		}
	}
	answer(t, old, question("cityops", 0).RunID, "s1c1", approvals.Approve)

	store := openStore(t, env)
	if got, err := store.Pending(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("pending before listing = %d (%v), want none listed yet", len(got), err)
	}
	if n, err := store.ListUnlisted(ctx); err != nil || n != 2 {
		t.Fatalf("ListUnlisted = %d, %v; want the 2 pending questions", n, err)
	}
	if got, err := store.Pending(ctx, "cityops"); err != nil || len(got) != 2 {
		t.Errorf("pending after listing = %d (%v), want 2", len(got), err)
	}
	if n, err := store.ListUnlisted(ctx); err != nil || n != 0 {
		t.Errorf("ListUnlisted again = %d, %v; want 0 (the index is in use)", n, err)
	}
}

// A deployment whose questions were all answered before the upgrade reads
// its entries once, not at every start until the next question.
func TestTheOneTimeListingRunsOnceWhenNothingIsPending(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{SyncInterval: "2m"})
	ctx := t.Context()
	old := openStoreWithoutIndex(t, env)
	q, err := old.Request(ctx, question("cityops", 7))
	if err != nil {
		t.Fatal(err)
	}
	answer(t, old, q.RunID, q.CallID, approvals.Approve)
	store := openStore(t, env)
	if n, err := store.ListUnlisted(ctx); err != nil || n != 0 {
		t.Fatalf("ListUnlisted = %d, %v; want 0 (nothing pending)", n, err)
	}
	gets, err := env.Conn.SubscribeSync("$JS.API.STREAM.MSG.GET.KV_" + journal.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, err := store.ListUnlisted(ctx); err != nil || n != 0 {
		t.Fatalf("ListUnlisted again = %d, %v", n, err)
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := gets.Pending(); n != 0 {
		t.Errorf("the second start read %d entries, want none", n)
	}
	if got, err := store.Pending(ctx, ""); err != nil || len(got) != 0 {
		t.Errorf("pending = %+v (%v), want nothing (the mark is not a question)", got, err)
	}
}

// The first valid decision wins by compare-and-set; the loser learns it
// lost (ErrLost, to decide again from a fresh read), on one server and
// on a replicated bucket alike, whose conflicts JetStream reports with
// another code.
func TestALateDecisionIsLostOnOneServerAndOnThree(t *testing.T) {
	t.Parallel()
	for _, where := range natstest.Topologies {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			js := natstest.StartTopology(t, where)
			kv, err := js.KeyValue(t.Context(), journal.BucketApprovals)
			if err != nil {
				t.Fatal(err)
			}
			store := approvals.NewStore(kv, nil)
			q := question("acme", 1)
			if _, err := store.Request(t.Context(), q); err != nil {
				t.Fatal(err)
			}
			e, rev, err := store.Get(t.Context(), q.RunID, q.CallID)
			if err != nil {
				t.Fatal(err)
			}
			e.State, e.Decision, e.DecidedBy = "approved", approvals.Approve, "supervisor@cityops"
			if err := store.Decide(t.Context(), e, rev); err != nil {
				t.Fatal(err)
			}
			e.State, e.Decision, e.DecidedBy = "denied", approvals.Deny, "other@cityops"
			if err := store.Decide(t.Context(), e, rev); !errors.Is(err, approvals.ErrLost) {
				t.Fatalf("a second decision at the same revision = %v, want ErrLost", err)
			}
			// Round 2 asked against a stale read loses the same way.
			q2 := q
			q2.Round = 2
			if _, err := store.Request(t.Context(), q2); err != nil {
				t.Fatal(err)
			}
			e2, rev2, _ := store.Get(t.Context(), q.RunID, q.CallID)
			if e2.Round != 2 || !e2.Pending() {
				t.Fatalf("entry after round 2 asked = %+v", e2)
			}
			e2.State, e2.Decision, e2.DecidedBy = "approved", approvals.Approve, "supervisor@cityops"
			if err := store.Decide(t.Context(), e2, rev2-1); !errors.Is(err, approvals.ErrLost) {
				t.Fatalf("a decision at a stale revision = %v, want ErrLost", err)
			}
		})
	}
}

// A question is listed before its entry is written. When the entry's
// write fails (a full store, a request that timed out) and the question is
// asked again, the subject already holds its message: the entry must
// still know that message, so the decision deletes it. And a later round
// of the call (a needs_human question after the approved write's outcome
// is unknown) found round 1's message still there, left by such a
// decision, and was listed only by it: answered late in its 24 h, round 1's
// message aged out while round 2 was pending, and `loopgate pending` did
// not show a question its run was parked on (found by review).
func TestALaterRoundStaysListedUntilItsOwnExpiry(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	store := openStore(t, env)
	e := question("cityops", 7)
	asked := time.Now().UTC()
	e.RequestedAt, e.ExpiresAt = asked, asked.Add(24*time.Hour)

	// The entry's first write fails: the bucket refuses new messages.
	kv := entries(t, env)
	if _, err := kv.Put(ctx, "other.entry", []byte("{}")); err != nil { // a limit of 0 messages is no limit
		t.Fatal(err)
	}
	refuseNew(t, env, "KV_"+journal.BucketApprovals, true)
	if _, err := store.Request(ctx, e); err == nil {
		t.Fatal("the entry was written into a bucket that refuses writes")
	}
	refuseNew(t, env, "KV_"+journal.BucketApprovals, false)
	r1, err := store.Request(ctx, e) // asked again
	if err != nil {
		t.Fatal(err)
	}
	listing := func() jetstream.RawStreamMsg {
		t.Helper()
		st, err := env.JS.Stream(ctx, journal.StreamPending)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, events.PendingSubject(e.Tenant, e.RunID, e.CallID))
		if err != nil {
			t.Fatalf("the question is not listed: %v", err)
		}
		return *m
	}
	if m := listing(); r1.ListedSeq != m.Sequence {
		t.Fatalf("the entry asked again knows listing seq %d, the question is listed at %d: its decision would not delete it", r1.ListedSeq, m.Sequence)
	}

	// Round 2, asked 23 h after round 1 (round 1's listing left behind,
	// as a decision whose deletion was lost leaves it), pending 24 h.
	_, rev, err := store.Get(ctx, e.RunID, e.CallID)
	if err != nil {
		t.Fatal(err)
	}
	r1.ListedSeq = 0 // its deletion lost
	r1.State, r1.Decision, r1.DecidedBy = "approved", approvals.Approve, "supervisor@cityops"
	if err := store.Decide(ctx, r1, rev); err != nil {
		t.Fatal(err)
	}
	e2 := e
	e2.Kind, e2.Round = approvals.KindNeedsHuman, 2
	e2.RequestedAt = asked.Add(23 * time.Hour)
	e2.ExpiresAt = e2.RequestedAt.Add(24 * time.Hour)
	r2, err := store.Request(ctx, e2)
	if err != nil {
		t.Fatal(err)
	}
	m := listing()
	ttl, err := time.ParseDuration(m.Header.Get(jetstream.MsgTTLHeader))
	if err != nil {
		t.Fatalf("index message TTL %q: %v", m.Header.Get(jetstream.MsgTTLHeader), err)
	}
	if agesOut := m.Time.Add(ttl); agesOut.Before(e2.ExpiresAt) {
		t.Errorf("round 2 (pending until %s) is listed by a message (seq %d) that ages out at %s, %s before it expires",
			e2.ExpiresAt.Format(time.RFC3339), m.Sequence, agesOut.Format(time.RFC3339), e2.ExpiresAt.Sub(agesOut).Round(time.Minute))
	}
	if r2.ListedSeq != m.Sequence {
		t.Errorf("round 2's entry knows listing seq %d, it is listed at %d", r2.ListedSeq, m.Sequence)
	}
	got, err := store.Pending(ctx, "cityops")
	if err != nil || len(got) != 1 || got[0].Round != 2 {
		t.Fatalf("pending = %+v, %v; want round 2 listed", got, err)
	}
}

// refuseNew makes a stream refuse every new message (on) or lifts that
// (off), through its message limit with discard new.
func refuseNew(t *testing.T, env *natstest.Env, name string, on bool) {
	t.Helper()
	st, err := env.JS.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Discard, cfg.MaxMsgs = jetstream.DiscardOld, -1
	if on {
		cfg.Discard, cfg.MaxMsgs = jetstream.DiscardNew, int64(st.CachedInfo().State.Msgs)
	}
	if _, err := env.JS.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
}
