package journal_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

func idempotencyMaxAge(t *testing.T, js jetstream.JetStream) time.Duration {
	t.Helper()
	st, err := js.Stream(t.Context(), "KV_"+journal.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config.MaxAge
}

// Idempotency records are never deleted, only aged out (DESIGN): the
// bucket has a max age, 30 days unless the layout says otherwise, and a
// bucket an earlier version made without one gets it from Ensure.
func TestIdempotencyRecordsAgeOut(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	if got := idempotencyMaxAge(t, env.JS); got != 30*24*time.Hour {
		t.Errorf("max age of %s after Ensure: %s, want 720h", journal.BucketIdempotency, got)
	}

	// As an earlier version left it: no max age.
	kv, err := env.JS.KeyValue(ctx, journal.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := kv.Status(ctx)
	cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	cfg.MaxAge = 0
	if _, err := env.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if got := idempotencyMaxAge(t, env.JS); got != 0 {
		t.Fatalf("max age after clearing it: %s", got)
	}
	layout := journal.Layout{AckWait: 5 * time.Second, IdempotencyMaxAge: 48 * time.Hour}
	if err := journal.Ensure(ctx, env.JS, layout); err != nil {
		t.Fatal(err)
	}
	if got := idempotencyMaxAge(t, env.JS); got != 48*time.Hour {
		t.Errorf("max age after Ensure of an old bucket: %s, want 48h", got)
	}
	// The per-key TTLs and reads from the leader stay as they were.
	info, err := env.JS.Stream(ctx, "KV_"+journal.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.SubjectDeleteMarkerTTL != time.Minute || c.AllowDirect {
		t.Errorf("bucket after the max age changed: marker TTL %s, allow_direct %v", c.SubjectDeleteMarkerTTL, c.AllowDirect)
	}
}

// A max age shorter than a run's redeliveries plus a day would let a
// crashed write's record go before the run comes back to it (and the
// write would read as never started): refused, naming the field and the
// least it takes for the layout's deadlines.
func TestEnsureRefusesAnIdempotencyMaxAgeInsideTheRedeliveries(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	for _, tc := range []struct {
		layout journal.Layout
		least  time.Duration
	}{
		// 30s, 1m, 2m, 4m, and the last step again for the fifth delivery.
		{journal.Layout{IdempotencyMaxAge: 24 * time.Hour}, 24*time.Hour + 11*time.Minute + 30*time.Second},
		// One delivery: its AckWait.
		{journal.Layout{AckWait: time.Minute, MaxDeliver: 1, IdempotencyMaxAge: time.Hour}, 24*time.Hour + time.Minute},
		// The steps stop doubling at max(AckWait, 5m): 2, 4, 5, 5, 5 min,
		// and 5 again for the sixth delivery.
		{journal.Layout{AckWait: 2 * time.Minute, MaxDeliver: 6, IdempotencyMaxAge: 24*time.Hour + 25*time.Minute}, 24*time.Hour + 26*time.Minute},
	} {
		if got := tc.layout.MinIdempotencyMaxAge(); got != tc.least {
			t.Errorf("%+v: least max age %s, want %s", tc.layout, got, tc.least)
		}
		err := journal.Ensure(t.Context(), env.JS, tc.layout)
		if err == nil || !strings.Contains(err.Error(), "Layout.IdempotencyMaxAge") || !strings.Contains(err.Error(), tc.least.String()) {
			t.Errorf("Ensure(%+v) = %v, want an error naming Layout.IdempotencyMaxAge and %s", tc.layout, err, tc.least)
		}
		ok := tc.layout
		ok.IdempotencyMaxAge = tc.least
		if err := journal.Ensure(t.Context(), env.JS, ok); err != nil {
			t.Errorf("Ensure with the least max age, %s: %v", tc.least, err)
		}
	}
}
