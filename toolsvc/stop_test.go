package toolsvc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/toolsvc"
)

// Stop before Start (a shutdown signal during startup, Stop racing Start)
// marks the service stopped with no micro service to stop. Start used to
// register one anyway, and no later Stop stopped it (Stop only stops
// micro the first time): the endpoint stayed subscribed, discoverable in
// $SRV, answering every call 503 for the connection's life, and micro's
// dispatcher goroutine leaked. Now Start refuses once stopped. (In a
// child process, so that a leaked goroutine fails it there, not this
// package's goleak.)
func TestAServiceStoppedBeforeStartDoesNotServe(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Parallel()
		crashCheck(t, "TestAServiceStoppedBeforeStartDoesNotServe")
		return
	}
	b := setup(t)
	svc, err := toolsvc.New(b.svcConn, &toolsvc.Config{Name: "early", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Add("greet", "test.greet", func(context.Context, toolsvc.Request) (any, error) { return "hi", nil }); err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err == nil {
		t.Error("Start after Stop succeeded, want it refused")
	}
	if err := svc.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.svcConn.Flush(); err != nil {
		t.Fatal(err)
	}
	msg, err := b.lgConn.Request("test.greet", []byte(`{}`), 2*time.Second)
	if !errors.Is(err, nats.ErrNoResponders) {
		if msg != nil {
			t.Fatalf("after Stop, Start, Stop: reply %v %q, want no responders", msg.Header, msg.Data)
		}
		t.Fatalf("after Stop, Start, Stop: %v, want no responders", err)
	}
}

// Stop drains the endpoints' subscriptions. It used to return without
// waiting for the drain to finish, once the calls already handed to
// handlers ended: calls the server had delivered to the connection were
// still queued in the subscription, and closing the connection after
// Stop (defer nc.Close() around defer svc.Stop(ctx), the usual shape)
// dropped them unanswered, so loopgate saw a timeout (outcome unknown, a
// write sent to reconciliation) for calls that never ran. Now Stop
// returns once every one of them is answered (a result, or 503
// "stopping"), and so does a second Stop racing the first.
func TestStopAnswersEveryCallAlreadyDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svcConn := b.connect()
	svc := b.start(svcConn, toolsvc.Config{}, func(context.Context, toolsvc.Request) (any, error) { return "hi", nil })
	replies := make(chan *nats.Msg, 4096)
	inbox := nats.NewInbox()
	sub, err := b.lgConn.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	const n = 2000
	for range n {
		m := nats.NewMsg("test.greet")
		m.Reply, m.Data = inbox, []byte(`{"name":"Ada"}`)
		if err := b.lgConn.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// Every call has reached the server, which routed it to svcConn.
	if err := b.lgConn.Flush(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := svc.Stop(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	svcConn.Close()
	got := 0
	for deadline := time.After(3 * time.Second); got < n; {
		select {
		case <-replies:
			got++
		case <-deadline:
			t.Fatalf("%d of %d calls delivered before Stop got no reply (neither a result nor 503): loopgate reads each as a timeout", n-got, n)
		}
	}
}
