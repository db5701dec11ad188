package follow_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/follow"
	"github.com/loopgate/loopgate/internal/natstest"
)

// A follower makes its consumer again when the one it has goes
// away (its server died: here the consumer is deleted under it, three
// times, while messages keep coming) and hands on every message after its
// start exactly once, in stream order: a consumer made again starts after
// the last message handled, and one that overlaps another is not handed on
// twice.
func TestAFollowerGoesOnWhenItsConsumerGoesAway(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	st, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "FOLLOW_TEST", Subjects: []string{"follow.>"}})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		for i := from; i <= to; i++ {
			if _, err := env.JS.Publish(ctx, "follow."+strconv.Itoa(i%3), []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(1, 10) // before the start: not followed

	var got received
	stop, err := follow.Stream(ctx, env.JS, "FOLLOW_TEST", []string{"follow.>"}, 11, got.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	const perRound, rounds = 50, 4
	for round := range rounds {
		first := 11 + round*perRound
		publish(first, first+perRound-1)
		got.waitFor(t, (round+1)*perRound, 30*time.Second)
		if round == rounds-1 {
			break
		}
		// The consumer goes away, as with the server that held it.
		names := st.ConsumerNames(ctx)
		var deleted int
		for name := range names.Name() {
			// A consumer the follower retired earlier may be listed and
			// then deleted by the follower itself before this gets to it.
			err := st.DeleteConsumer(ctx, name)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("delete consumer %s: %v", name, err)
			}
			deleted++
		}
		if deleted == 0 {
			t.Fatalf("round %d: no consumer to delete (%v)", round, names.Err())
		}
	}
	got.exactly(t, 11, 10+rounds*perRound)
}

// received collects the messages a follower hands on, each a number.
type received struct {
	mu  sync.Mutex
	got []int
}

func (r *received) handle(m jetstream.Msg, _ uint64) {
	n, _ := strconv.Atoi(string(m.Data()))
	r.mu.Lock()
	r.got = append(r.got, n)
	r.mu.Unlock()
}

func (r *received) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// waitFor waits until n messages were handed on, failing after within.
func (r *received) waitFor(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for r.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d messages of %d", r.count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exactly checks, after a moment for any message handed on twice to
// come, that the messages from to to were handed on, each once, in order.
func (r *received) exactly(t *testing.T, from, to int) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := len(r.got) == to-from+1
	for i, n := range r.got {
		ok = ok && n == from+i
	}
	if !ok {
		t.Fatalf("want messages %d to %d handed on once each, in order; got %v", from, to, r.got)
	}
}

// A follower's first consumer is made before Stream returns, so a
// stream that is not there is an error then, not a silent follower.
func TestAFollowerFailsAtOnceWithoutItsStream(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if stop, err := follow.Stream(ctx, env.JS, "NO_SUCH_STREAM", []string{"none.>"}, 1, func(jetstream.Msg, uint64) {}); err == nil {
		stop()
		t.Fatal("followed a stream that does not exist")
	}
}
