package idempotency_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/idempotency"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// A record ages out of the bucket its max age after its last write (an
// update starts the age again), and then reads as never claimed: Get
// says not found (not an undecodable marker) and a claim is fresh. The
// bucket is the one journal.Ensure makes, its max age shortened to 2 s.
func TestARecordAgesOutAfterItsLastWrite(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	const maxAge = 2 * time.Second
	st, err := env.JS.Stream(ctx, "KV_"+journal.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = maxAge, maxAge // a duplicate window may not outlast it
	if _, err := env.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	kv, err := env.JS.KeyValue(ctx, journal.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	s := idempotency.NewStore(kv)
	rec := func(id string) idempotency.Record {
		return idempotency.Record{OperationID: id, ArgsHash: "sha256:aa", RunID: "r", CallID: "c", Tool: "create_draft", Attempt: 1}
	}

	if _, _, fresh, err := s.Claim(ctx, rec("op-left")); err != nil || !fresh {
		t.Fatalf("claim op-left: fresh %v, %v", fresh, err)
	}
	_, rev, fresh, err := s.Claim(ctx, rec("op-updated"))
	if err != nil || !fresh {
		t.Fatalf("claim op-updated: fresh %v, %v", fresh, err)
	}
	time.Sleep(maxAge * 3 / 4)
	done := rec("op-updated")
	done.State, done.Result = idempotency.Completed, []byte(`{"draft":"d1"}`)
	updated := time.Now() // the update's stored time is no earlier
	if _, err := s.Set(ctx, done, rev); err != nil {
		t.Fatal(err)
	}

	gone := func(id string) bool {
		t.Helper()
		_, _, err := s.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return true
		case err != nil:
			t.Fatalf("read %s: %v, want the record or not found", id, err)
		}
		return false
	}
	waitGone := func(id string) {
		t.Helper()
		deadline := time.Now().Add(maxAge + 15*time.Second)
		for !gone(id) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still in the bucket %s after its max age", id, maxAge+15*time.Second)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The record claimed with it and left alone ages out; the updated one
	// is still there until its own max age has passed since the update.
	waitGone("op-left")
	if gone("op-updated") {
		if since := time.Since(updated); since < maxAge {
			t.Fatalf("op-updated aged out %s after its update, before its max age (%s): an update did not start the age again", since, maxAge)
		} else {
			t.Logf("op-left aged out late (%s after op-updated's update): the update's age not checked", since)
		}
	}
	waitGone("op-updated")

	got, _, fresh, err := s.Claim(ctx, rec("op-updated"))
	if err != nil || !fresh || got.State != idempotency.InFlight {
		t.Fatalf("claim after the record aged out: %+v fresh %v, %v; want a fresh claim", got, fresh, err)
	}
}
