package journal_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// The buckets whose reads decide something read from the stream leader on
// a cluster: a write acknowledged through one server is read back through
// any other at once. Buckets as nats.go makes them answer reads from any
// replica, and a follower may not have the write yet (make soak saw an
// approval rejected as already decided by its own decision).
func TestDecidingBucketsReadFromTheLeader(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t)
	ctx := t.Context()
	want := map[string]bool{ // bucket: direct gets (reads from any replica)
		journal.BucketApprovals: false, journal.BucketIdempotency: false, journal.BucketSessions: false, journal.BucketRuns: true,
	}
	check := func(when string) {
		for bucket, direct := range want {
			st, err := c.JS.Stream(ctx, "KV_"+bucket)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.CachedInfo().Config.AllowDirect; got != direct {
				t.Errorf("%s: bucket %s allow_direct %v, want %v", when, bucket, got, direct)
			}
		}
	}
	check("after Ensure")
	if err := journal.Ensure(ctx, c.JS, journal.Layout{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	check("after a second Ensure")

	// Read-your-writes through every server: a write acknowledged through
	// the first connection is what the others read next.
	var readers []jetstream.KeyValue
	for i, s := range c.Servers {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, journal.BucketApprovals)
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		readers = append(readers, kv)
	}
	writer := readers[0]
	for n := range 200 {
		rev, err := writer.Put(ctx, "k", fmt.Appendf(nil, "%d", n))
		if err != nil {
			t.Fatal(err)
		}
		for i, kv := range readers {
			e, err := kv.Get(ctx, "k")
			if err != nil {
				t.Fatalf("write %d, read through server %d: %v", n, i, err)
			}
			if e.Revision() != rev {
				t.Fatalf("write %d (revision %d), read through server %d: revision %d, a stale read", n, rev, i, e.Revision())
			}
		}
	}
}
