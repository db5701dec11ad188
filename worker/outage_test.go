package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/model"
	"github.com/loopgate/loopgate/tools"
)

// A full store is an outage, not a fault of the run: JetStream refuses
// every write until an operator makes room. The run must neither spend its
// deliveries on it (and be stopped as a poison message, whose stop could
// not be recorded either, leaving it stuck) nor lose the result its worker
// holds. Its worker keeps the message and the result and tries again; once
// there is room, the run goes on with its trail as if nothing happened,
// its active-time budget untouched by the wait.
func TestARunWaitsOutAFullStore(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	m := fakeTool("slow_read", tools.Read, false)
	b := setup(t, options{
		maxFileStore: 8 << 20,
		tools:        []tools.Manifest{m}, roles: writerRoles("slow_read"),
		builtins: tools.Builtins{"slow_read": func(ctx context.Context, c tools.Call) (any, error) {
			close(entered)
			<-release
			return map[string]int{"n": 1}, nil
		}},
		agents:  map[string]config.Profile{"slow": profile("slow_read")},
		scripts: map[string]model.Model{"slow": scripted(t, `{"tool_calls":[{"tool":"slow_read","args":{}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{MaxDeliver: 2},
		retry:   20 * time.Millisecond,
		workers: 1,
	})
	// The outage outlasts the run's active-time budget: the time waited is
	// JetStream's, not the run's, and must not end it.
	tk := task("full-store-1", "slow")
	tk.Limits = &events.Limits{MaxActive: events.Duration(1500 * time.Millisecond)}
	runID := b.submit(tk)
	<-entered
	purge := fillStore(t, b.env.JS)
	close(release)

	// Refused: the executed event cannot be stored. Far more retry delays
	// than MaxDeliver allows deliveries go by (20 ms doubling: 2.5 s by
	// the 8th try), the message held.
	waitLogged(t, b, "JetStream cannot store the run's events", 8)
	info := workInfo(t, b)
	if info.NumRedelivered != 0 || info.NumAckPending != 1 {
		t.Errorf("during the outage: %d redelivered, %d unacknowledged; want the one message held, never redelivered", info.NumRedelivered, info.NumAckPending)
	}

	purge()
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, okStep("slow_read"), []string{"proposed:final", "finished:done"}))
}

// The same outage at a write's idempotency claim, a KV write the run
// cannot go on without: the worker keeps the message and tries the run
// again from its events until there is room, then the write runs once.
func TestAWriteWaitsOutAFullStoreAtItsClaim(t *testing.T) {
	t.Parallel()
	var (
		runs   atomic.Int32
		once   sync.Once
		b      *bundle
		filled = make(chan func(), 1)
	)
	m, fns := ungated("create_ticket", &runs, nil)
	m.Timeout = events.Duration(500 * time.Millisecond) // a short lease to wait out after the outage
	b = setup(t, options{
		maxFileStore: 8 << 20,
		tools:        []tools.Manifest{m}, builtins: fns, roles: writerRoles("create_ticket"),
		agents:  map[string]config.Profile{"ticketer": profile("create_ticket")},
		scripts: map[string]model.Model{"ticketer": scripted(t, `{"tool_calls":[{"tool":"create_ticket","args":{"n":7}}]}`, `{"final_answer":{"summary":"ok"}}`)},
		layout:  journal.Layout{MaxDeliver: 2},
		retry:   20 * time.Millisecond,
		crash: func(point string) {
			if point == "after:executing" {
				once.Do(func() { filled <- fillStore(t, b.env.JS) })
			}
		},
		workers: 1,
	})
	runID := b.submit(task("full-store-2", "ticketer"))
	waitLogged(t, b, "keeping its message and trying again", 5)
	info := workInfo(t, b)
	if info.NumRedelivered != 0 || info.NumAckPending != 1 {
		t.Errorf("during the outage: %d redelivered, %d unacknowledged; want the one message held, never redelivered", info.NumRedelivered, info.NumAckPending)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the write ran %d times without its claim", n)
	}
	(<-filled)()
	evs := b.waitEnd(runID)
	assertTrail(t, evs, concat([]string{"started"}, okStep("create_ticket"), []string{"proposed:final", "finished:done"}))
	if n := runs.Load(); n != 1 {
		t.Errorf("the write ran %d times, want once", n)
	}
}

// fillStore fills the server's JetStream store with a stream of its own
// until it refuses a write, and returns a func that deletes that stream.
func fillStore(t *testing.T, js jetstream.JetStream) (purge func()) {
	t.Helper()
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	chunk := []byte(strings.Repeat("x", 256<<10))
	for i := 0; ; i++ {
		_, err := js.Publish(ctx, "filler", chunk)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code == 503 {
			t.Logf("store full after %d chunks: %v", i, err)
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 1000 {
			t.Fatal("the store never filled up")
		}
	}
	return func() {
		if err := js.DeleteStream(context.Background(), "FILLER"); err != nil {
			t.Fatal(fmt.Errorf("make room: %w", err))
		}
	}
}

// workInfo reads the state of the workers' consumer.
func workInfo(t *testing.T, b *bundle) *jetstream.ConsumerInfo {
	t.Helper()
	cons, err := b.env.JS.Consumer(t.Context(), journal.StreamWork, journal.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// waitLogged waits until the pool's log holds s at least n times.
func waitLogged(t *testing.T, b *bundle, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(b.logs.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q %d times:\n%s", s, n, b.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
