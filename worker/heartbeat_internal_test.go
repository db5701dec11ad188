package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// A heartbeat whose tick comes as its message is settled says nothing
// (there is nothing left to keep alive); one that fails for another
// reason, here a closed connection, is a warning.
func TestAHeartbeatAfterTheAckIsQuiet(t *testing.T) {
	t.Parallel()
	env := natstest.Start(t)
	ctx := t.Context()
	nc, err := env.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, journal.StreamWork, journal.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p := &Pool{log: slog.New(slog.NewTextHandler(&out, nil)), opts: Config{Heartbeat: 5 * time.Millisecond}}
	beatFor := func(msg jetstream.Msg) string {
		out.Reset()
		hb, stop := context.WithTimeout(ctx, 60*time.Millisecond)
		defer stop()
		p.heartbeat(hb, msg)
		return out.String()
	}
	take := func() jetstream.Msg {
		t.Helper()
		if _, err := js.Publish(ctx, "loopgate.tasks.cityops", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	for name, settle := range map[string]func(jetstream.Msg) error{
		"ack":  func(m jetstream.Msg) error { return m.DoubleAck(ctx) },
		"term": func(m jetstream.Msg) error { return m.Term() },
	} {
		msg := take()
		if err := settle(msg); err != nil {
			t.Fatal(err)
		}
		if logged := beatFor(msg); logged != "" {
			t.Errorf("heartbeats after %s logged\n%s", name, logged)
		}
	}
	held := take()
	nc.Close()
	if logged := beatFor(held); !strings.Contains(logged, `level=WARN msg=heartbeat`) {
		t.Errorf("heartbeats on a closed connection logged %q, want a warning", logged)
	}
}
