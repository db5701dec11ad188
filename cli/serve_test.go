package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/natsd"
)

// startPlainServer starts a nats-server with JetStream and no
// authorization, for a worker to join with --nats.
func startPlainServer(t *testing.T) string {
	t.Helper()
	srv, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv.ClientURL()
}

// configWithServer copies the CityOps example to a directory of its own,
// with server settings added, and returns the copy's loopgate.yaml.
func configWithServer(t *testing.T, server string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("..", "examples", "cityops"))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "loopgate.yaml")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\nserver:\n" + server); err != nil {
		t.Fatal(err)
	}
	return path
}

// mainWithin runs the command line for at most d: a command that should
// have refused its input at once must not serve until the test's end.
func mainWithin(t *testing.T, d time.Duration, args ...string) (code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var out, errOut syncBuffer
	return Main(ctx, args, nil, &out, &errOut), errOut.String()
}

// A bad server setting, from a flag or from the config file, is refused
// before anything starts, naming the flag and its config key, never the
// Go field of the package that would have refused it.
func TestServeNamesTheFlagAndConfigKeyOfABadSetting(t *testing.T) {
	t.Parallel()
	url := startPlainServer(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"workers", []string{"serve", "--workers", "-1"}, "--workers (server.workers) -1: want at least 1"},
		{"workers 0", []string{"serve", "--workers", "0"}, "--workers (server.workers) 0: want at least 1"},
		{"replicas", []string{"serve", "--replicas", "9"}, "--replicas (server.replicas) 9: want 1 to 5"},
		{"replicas worker", []string{"worker", "--nats", url, "--replicas", "9"}, "--replicas (server.replicas) 9: want 1 to 5"},
		{"ack wait", []string{"serve", "--ack-wait", "10ms"}, "--ack-wait (server.ack_wait) 10ms: want at least 100ms"},
		{"sync interval", []string{"serve", "--sync-interval", "bogus"}, `--sync-interval (server.sync_interval) "bogus": want "always" or a positive duration`},
		{"listen", []string{"serve", "--listen", "bogus"}, `--listen (server.listen) "bogus": want host:port`},
		{"listen port", []string{"serve", "--listen", "127.0.0.1:70000"}, `--listen (server.listen) "127.0.0.1:70000"`},
		{"listen in the config", []string{"serve", "--config", configWithServer(t, "  listen: bogus\n")}, `--listen (server.listen) "bogus"`},
		// A record must outlive its run's redeliveries: with the default
		// deadlines (30s, 1, 2, 4, 4 min) and a day beyond them, and with
		// a longer ack wait from the flag, whose deadlines move the least.
		{"idempotency max age", []string{"worker", "--nats", url, "--config", configWithServer(t, "  idempotency_max_age: 24h\n")},
			"server.idempotency_max_age 24h0m0s: want at least 24h11m30s, a day beyond the 5 deliveries' deadlines"},
		{"idempotency max age and ack wait", []string{"serve", "--ack-wait", "10m", "--config", configWithServer(t, "  idempotency_max_age: 24h30m\n")},
			"server.idempotency_max_age 24h30m0s: want at least 24h50m0s"},
		// An ack wait of days outgrows the 30-day default itself.
		{"idempotency max age by default", []string{"serve", "--ack-wait", "150h"},
			"server.idempotency_max_age 720h0m0s (the default): want at least 774h0m0s"},
		// The config's own check, before any flag is read.
		{"ack wait in the config", []string{"worker", "--nats", url, "--config", configWithServer(t, "  ack_wait: 50ms\n")},
			"/server/ack_wait: must be at least 100ms, not 50ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stderr := mainWithin(t, 20*time.Second, append(tc.args, "--data", t.TempDir(), "--log-format", "json")...)
			if code != exitError || !strings.Contains(stderr, tc.want) {
				t.Errorf("loopgate %v: exit %d, want %d and %q\n%s", tc.args, code, exitError, tc.want, stderr)
			}
			for _, field := range []string{"Layout.", "Config.", "Workers must"} {
				if strings.Contains(stderr, field) {
					t.Errorf("loopgate %v names a Go field (%s):\n%s", tc.args, field, stderr)
				}
			}
		})
	}
}

// With --nats there is no embedded server: its flags would do nothing,
// so they are refused, and the serving line logs no fsync interval of
// loopgate's, which says nothing of the external server's.
func TestWorkerWithNATSRefusesEmbeddedServerFlags(t *testing.T) {
	t.Parallel()
	url := startPlainServer(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"worker", "--sync-interval", "bogus", "--listen", "127.0.0.1:4999"}, []string{"--listen, --sync-interval", "--nats"}},
		{[]string{"worker", "--sync-interval", "always"}, []string{"--sync-interval", "--nats"}},
		{[]string{"serve", "--listen", "127.0.0.1:4999"}, []string{"--listen", "--nats"}},
	} {
		code, stderr := mainWithin(t, 10*time.Second, append(tc.args, "--nats", url, "--data", t.TempDir(), "--log-format", "json")...)
		if code != exitError {
			t.Errorf("loopgate %v --nats: exit %d, want %d\n%s", tc.args, code, exitError, stderr)
		}
		for _, want := range tc.want {
			if !strings.Contains(stderr, want) {
				t.Errorf("loopgate %v --nats: stderr lacks %q\n%s", tc.args, want, stderr)
			}
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var out, errOut syncBuffer
	go func() {
		done <- Main(ctx, []string{"worker", "--nats", url, "--data", t.TempDir(), "--log-format", "json"}, nil, &out, &errOut)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errOut.String(), "loopgate serving") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("worker --nats: exit %d\n%s", code, errOut.String())
	}
	logs := errOut.String()
	if !strings.Contains(logs, "loopgate serving") || strings.Contains(logs, "sync_interval") {
		t.Errorf("worker --nats: want a serving line without sync_interval:\n%s", logs)
	}
}

// A NATS user that may not subscribe to its inbox prefix gets no answer
// to any request: serve and worker fail at once, naming the refusal,
// instead of waiting for JetStream to answer for two minutes.
func TestServeAndWorkerFailAtOnceWhenNATSRefusesTheUser(t *testing.T) {
	t.Parallel()
	srv, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", ConfigFile: accountsConf, Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	// The worker user, with the auditor's inbox prefix.
	creds := []string{"--nats-user", "worker", "--nats-password", "worker-change-me", "--inbox-prefix", "_INBOX_auditor"}
	for name, args := range map[string][]string{
		"serve":  {"serve", "--nats-config", accountsConf, "--listen", "127.0.0.1:0", "--sync-interval", "2m"},
		"worker": {"worker", "--nats", srv.ClientURL()},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			code, stderr := mainWithin(t, 40*time.Second, append(append(args, creds...), "--data", t.TempDir(), "--log-format", "json")...)
			took := time.Since(began)
			if code != exitError || took > 20*time.Second {
				t.Errorf("%s: exit %d after %s, want %d at once\n%s", name, code, took.Round(time.Millisecond), exitError, stderr)
			}
			for _, want := range []string{"refused this user", `Permissions Violation for Subscription to "_INBOX_auditor.`} {
				if !strings.Contains(stderr, "loopgate: ") || !strings.Contains(stderr, want) {
					t.Errorf("%s: stderr lacks %q\n%s", name, want, stderr)
				}
			}
		})
	}
}
