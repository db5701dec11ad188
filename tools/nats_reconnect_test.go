package tools_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/tools"
)

// A request the client refuses to buffer while it reconnects
// (nats.ErrReconnectBufExceeded: the reconnect buffer is full) was never
// sent: nothing ran, and a retry once the connection is back may succeed.
// requestError used to classify it as neither transient nor outcome
// unknown, so the worker recorded an "unexpected" tool_failed and
// quarantined the tool for the rest of the run. Now it wraps ErrTransient.
func TestARequestRefusedWhileReconnectingIsTransient(t *testing.T) {
	t.Parallel()
	s, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	reconnecting := make(chan struct{}, 1)
	nc, err := nats.Connect(s.ClientURL(), nats.ReconnectBufSize(1), nats.MaxReconnects(-1), nats.ReconnectWait(time.Hour),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { reconnecting <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	fn := remote(t, nc, "test.echo", tools.Manifest{})
	s.Shutdown()
	select {
	case <-reconnecting:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection did not notice the server stopped")
	}
	// Fill the 1-byte reconnect buffer.
	_ = nc.Publish("test.other", []byte("x"))
	_, err = fn(t.Context(), call())
	if !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Fatalf("precondition: err %v, want the client's ErrReconnectBufExceeded", err)
	}
	if !errors.Is(err, tools.ErrTransient) || errors.Is(err, tools.ErrOutcomeUnknown) {
		t.Errorf("err %v: a request known not sent must wrap ErrTransient", err)
	}
}
