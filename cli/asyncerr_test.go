package cli

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/internal/natstest"
)

// A slow consumer is logged with the kind of subscription that dropped
// messages and how many: the subject alone (a bare inbox) does not say
// whose they were.
func TestASlowConsumerIsLoggedWithItsKindAndDrops(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	nc, err := nats.Connect(env.Server.ClientURL(), logAsyncErrors(log, func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ch := make(chan *nats.Msg, 1) // room for one: the rest are dropped
	sub, err := nc.ChanSubscribe("slow", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for range 3 {
		if err := nc.Publish("slow", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		logged := buf.String()
		if strings.Contains(logged, "slow consumer") {
			if !strings.Contains(logged, "subject=slow") || !strings.Contains(logged, "subscription=chan") || !strings.Contains(logged, "dropped=") {
				t.Fatalf("the slow consumer's log line does not name its subject, kind and drops:\n%s", logged)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slow consumer logged:\n%s", logged)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
