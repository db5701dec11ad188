package natstest_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartEnsuresTheLayoutAndRestartKeepsIt(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{Layout: journal.Layout{MaxDeliver: 2}})
	ctx := t.Context()
	cons, err := env.JS.Consumer(ctx, journal.StreamWork, journal.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cons.CachedInfo().Config; cfg.AckWait != 5*time.Second || cfg.MaxDeliver != 2 {
		t.Errorf("worker consumer: AckWait %v MaxDeliver %d, want 5s and 2", cfg.AckWait, cfg.MaxDeliver)
	}
	if !env.Conn.IsConnected() || env.Journal == nil || env.Dir == "" {
		t.Fatalf("incomplete env: %+v", env)
	}
	old := env.Conn
	env.Restart(t)
	if !old.IsClosed() || !env.Conn.IsConnected() {
		t.Fatal("Restart did not replace the connection")
	}
	if _, err := env.JS.Consumer(ctx, journal.StreamWork, journal.ConsumerWorkers); err != nil {
		t.Fatalf("worker consumer lost across Restart: %v", err)
	}
}
