package bench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// BenchmarkPendingListing lists the questions awaiting a human (what
// loopgate pending does) after `decided` questions were asked and answered
// and with 10 still open: listing=index is approvals.Store.Pending (the
// LOOPGATE_PENDING index, then the open entries); listing=every-entry is
// how it listed before, for comparison: every key of loopgate_approvals,
// each entry read.
func BenchmarkPendingListing(b *testing.B) {
	env := natstest.StartWith(b, natstest.Options{SyncInterval: "2m"})
	ctx := b.Context()
	kv, err := env.JS.KeyValue(ctx, journal.BucketApprovals)
	if err != nil {
		b.Fatal(err)
	}
	index, err := approvals.OpenIndex(ctx, env.JS, journal.StreamPending)
	if err != nil {
		b.Fatal(err)
	}
	store := approvals.NewStore(kv, index)
	const open = 10
	asked := 0
	ask := func(decide bool) {
		e := approvals.Entry{Kind: approvals.KindApproval, Round: 1, Tenant: "bench",
			RunID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", asked), CallID: "s1c1", Tool: "draft_escalation",
			ArgsHash: "sha256:00", Principal: "dev@bench", RequestedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
		asked++
		if _, err := store.Request(ctx, e); err != nil {
			b.Fatal(err)
		}
		if !decide {
			return
		}
		e, rev, err := store.Get(ctx, e.RunID, e.CallID)
		if err != nil {
			b.Fatal(err)
		}
		e.State, e.Decision = "approved", approvals.Approve
		if err := store.Decide(ctx, e, rev); err != nil {
			b.Fatal(err)
		}
	}
	for range open {
		ask(false)
	}
	decided := 0
	for _, n := range []int{1_000, 10_000} {
		for ; decided < n; decided++ {
			ask(true)
		}
		for _, l := range []struct {
			name string
			list func(context.Context) ([]approvals.Entry, error)
		}{
			{"index", func(ctx context.Context) ([]approvals.Entry, error) { return store.Pending(ctx, "") }},
			{"every-entry", func(ctx context.Context) ([]approvals.Entry, error) { return everyEntry(ctx, kv, store) }},
		} {
			b.Run(fmt.Sprintf("decided=%d/listing=%s", n, l.name), func(b *testing.B) {
				for b.Loop() {
					got, err := l.list(ctx)
					if err != nil || len(got) != open {
						b.Fatalf("listed %d (%v), want %d", len(got), err, open)
					}
				}
			})
		}
	}
}

// everyEntry is the listing before the index: every key, each entry read.
func everyEntry(ctx context.Context, kv jetstream.KeyValue, store *approvals.Store) ([]approvals.Entry, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	defer lister.Stop()
	var out []approvals.Entry
	for key := range lister.Keys() {
		runID, callID, _ := strings.Cut(key, ".")
		e, _, err := store.Get(ctx, runID, callID)
		if err != nil {
			return nil, err
		}
		if e.Pending() {
			out = append(out, e)
		}
	}
	return out, nil
}
