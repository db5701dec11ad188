package journal_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
		journal.BucketApprovals: false, journal.BucketIdempotency: false, journal.BucketSessions: false, journal.BucketRuns: true, journal.BucketKeys: false,
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
			// Only the runs projection takes atomic batches (PutRuns).
			if got, want := st.CachedInfo().Config.AllowAtomicPublish, bucket == journal.BucketRuns; got != want {
				t.Errorf("%s: bucket %s allow_atomic %v, want %v", when, bucket, got, want)
			}
		}
	}
	check("after Ensure")
	if err := journal.Ensure(ctx, c.JS, journal.Layout{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	check("after a second Ensure")

	// Every read of the deciding buckets, through any server, is a message
	// get the stream leader answers, never a direct get that any replica
	// may answer. (A stale follower read is rare on loopback: counting
	// the requests is what tells the two paths apart here.)
	spy := c.Conn
	direct, err := spy.SubscribeSync("$JS.API.DIRECT.GET.>")
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Unsubscribe()
	leader, err := spy.SubscribeSync("$JS.API.STREAM.MSG.GET.*")
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Unsubscribe()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	reads := 0
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
		for _, bucket := range []string{journal.BucketApprovals, journal.BucketIdempotency, journal.BucketSessions} {
			kv, err := js.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatalf("server %d: %v", i, err)
			}
			rev, err := kv.Put(ctx, "k", fmt.Appendf(nil, "%d", i))
			if err != nil {
				t.Fatal(err)
			}
			e, err := kv.Get(ctx, "k")
			if err != nil {
				t.Fatalf("read %s through server %d: %v", bucket, i, err)
			}
			if e.Revision() != rev {
				t.Fatalf("read %s through server %d: revision %d, want the one just written, %d", bucket, i, e.Revision(), rev)
			}
			reads++
		}
	}
	// The requests of the other servers' clients reach the spy over the
	// routes, a moment later. Only the three buckets' count: loopgate_runs
	// keeps direct gets, and natstest reads the events stream.
	deciding := func(sub *nats.Subscription) (n int) {
		for {
			m, err := sub.NextMsg(0)
			if err != nil {
				return n
			}
			for _, b := range []string{journal.BucketApprovals, journal.BucketIdempotency, journal.BucketSessions} {
				if strings.Contains(m.Subject, ".KV_"+b) {
					n++
				}
			}
		}
	}
	gets := 0
	for deadline := time.Now().Add(5 * time.Second); gets < reads && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		gets += deciding(leader)
	}
	if gets != reads {
		t.Errorf("%d message gets to the stream leaders for %d reads", gets, reads)
	}
	if n := deciding(direct); n != 0 {
		t.Errorf("%d reads of the deciding buckets were direct gets, which any replica answers", n)
	}
}
