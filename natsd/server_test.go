package natsd

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start starts a server on dir and shuts it down in t.Cleanup.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, s *Server, viaTCP bool) *nats.Conn {
	t.Helper()
	var (
		nc  *nats.Conn
		err error
	)
	if viaTCP {
		nc, err = nats.Connect(s.ClientURL())
	} else {
		nc, err = s.Connect()
	}
	if err != nil {
		t.Fatalf("connect (tcp=%v): %v", viaTCP, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestConfigDefaultsAndSyncOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		given        string
		wantAlways   bool
		wantInterval time.Duration
	}{
		{given: "", wantAlways: true},
		{given: "always", wantAlways: true},
		{given: "2m", wantInterval: 2 * time.Minute},
		{given: "500ms", wantInterval: 500 * time.Millisecond},
	} {
		opts, err := Config{StoreDir: "x", SyncInterval: tc.given}.withDefaults().options()
		if err != nil {
			t.Fatalf("SyncInterval %q: %v", tc.given, err)
		}
		if opts.SyncAlways != tc.wantAlways || (tc.wantInterval != 0 && opts.SyncInterval != tc.wantInterval) {
			t.Errorf("SyncInterval %q: SyncAlways=%v SyncInterval=%v, want %v %v",
				tc.given, opts.SyncAlways, opts.SyncInterval, tc.wantAlways, tc.wantInterval)
		}
		if opts.Host != "127.0.0.1" || opts.Port != -1 || !opts.JetStream || !opts.NoSigs {
			t.Errorf("default listen: host %q port %d js %v nosigs %v", opts.Host, opts.Port, opts.JetStream, opts.NoSigs)
		}
	}
}

func TestBadConfigNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		given Config
		want  string
	}{
		{"no store dir", Config{}, "Config.StoreDir"},
		{"bad sync", Config{StoreDir: "x", SyncInterval: "sometimes"}, "Config.SyncInterval"},
		{"negative sync", Config{StoreDir: "x", SyncInterval: "-1s"}, "Config.SyncInterval"},
		{"listen without port", Config{StoreDir: "x", Listen: "localhost"}, "Config.Listen"},
		{"listen bad port", Config{StoreDir: "x", Listen: "localhost:http"}, "Config.Listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Start(tc.given)
			if err == nil {
				s.Shutdown()
				t.Fatal("Start succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

func TestStartConnectBothWaysAndRestartKeepsStream(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := t.Context()

	s, err := Start(Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
		t.Errorf("ClientURL = %q", s.ClientURL())
	}
	if !s.ns.JetStreamConfig().SyncAlways {
		t.Error("default SyncInterval did not set SyncAlways")
	}
	inproc := connect(t, s, false)
	tcp := connect(t, s, true)
	if inproc.ConnectedUrl() == "" || tcp.ConnectedUrl() == "" {
		t.Fatal("not connected")
	}

	js, err := jetstream.New(inproc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KEEP", Subjects: []string{"keep.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	// Publish over TCP, read back in-process: both connections see one server.
	jsTCP, err := jetstream.New(tcp)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one", "two"} {
		if _, err := jsTCP.Publish(ctx, "keep.it", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	inproc.Close()
	tcp.Close()
	s.Shutdown()
	s.Shutdown() // idempotent

	s2 := start(t, Config{StoreDir: dir})
	js2, err := jetstream.New(connect(t, s2, false))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js2.Stream(ctx, "KEEP")
	if err != nil {
		t.Fatalf("stream lost across restart: %v", err)
	}
	if n := st.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("after restart: %d messages, want 2", n)
	}
	m, err := st.GetMsg(ctx, 2)
	if err != nil || string(m.Data) != "two" {
		t.Fatalf("GetMsg(2) = %v, %v", m, err)
	}
}

func TestShutdownConcurrentCallersAllWait(t *testing.T) {
	t.Parallel()
	s, err := Start(Config{StoreDir: t.TempDir(), SyncInterval: "2m"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ns.JetStreamConfig().SyncAlways || s.ns.JetStreamConfig().SyncInterval != 2*time.Minute {
		t.Errorf("SyncInterval 2m: got %+v", s.ns.JetStreamConfig())
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s.Shutdown()
			if s.ns.Running() {
				t.Error("Shutdown returned while the server still runs")
			}
		})
	}
	wg.Wait()
}

func TestListenAddressInUseIsAnError(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var logs bytes.Buffer
	s, err := Start(Config{
		StoreDir: t.TempDir(),
		Listen:   l.Addr().String(),
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err == nil {
		s.Shutdown()
		t.Fatal("Start on a busy port succeeded")
	}
	if !strings.Contains(err.Error(), "Config.Listen") {
		t.Errorf("error %q does not name Config.Listen", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("fatal line not logged as an error:\n%s", logs.String())
	}
}

func TestServerLogsAreQuietAtInfoAndVisibleAtDebug(t *testing.T) {
	t.Parallel()
	var info, debug bytes.Buffer
	for _, c := range []struct {
		buf   *bytes.Buffer
		level slog.Level
	}{{&info, slog.LevelInfo}, {&debug, slog.LevelDebug}} {
		s, err := Start(Config{
			StoreDir: t.TempDir(),
			Logger:   slog.New(slog.NewTextHandler(c.buf, &slog.HandlerOptions{Level: c.level})),
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Shutdown()
	}
	if info.Len() != 0 {
		t.Errorf("Info logger got server lines:\n%s", info.String())
	}
	if !strings.Contains(debug.String(), "component=nats-server") {
		t.Errorf("Debug logger got no server notices:\n%s", debug.String())
	}
	if strings.Contains(debug.String(), "level=DEBUG-4") {
		t.Errorf("Debug logger got server debug chatter")
	}
}

func TestConnectAfterShutdownFails(t *testing.T) {
	t.Parallel()
	s, err := Start(Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	nc, err := s.Connect(nats.NoReconnect())
	if err == nil {
		nc.Close()
		t.Fatal("Connect after Shutdown succeeded")
	}
}

func TestSecondServerOnOneStoreDirIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, Config{StoreDir: dir})
	s2, err := Start(Config{StoreDir: dir})
	if err == nil {
		s2.Shutdown()
		t.Fatal("a second server started on the same StoreDir")
	}
	if !errors.Is(err, ErrStoreInUse) || !strings.Contains(err.Error(), "Config.StoreDir") {
		t.Errorf("second Start = %v, want ErrStoreInUse naming Config.StoreDir", err)
	}
	s.Shutdown()
	s3 := start(t, Config{StoreDir: dir}) // released by Shutdown
	s3.Shutdown()
}

func TestStoreDirThatIsAFileIsAnError(t *testing.T) {
	t.Parallel()
	f := t.TempDir() + "/file"
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Start(Config{StoreDir: f})
	if err == nil {
		s.Shutdown()
		t.Fatal("Start on a file succeeded")
	}
	if !strings.Contains(err.Error(), "Config.StoreDir") {
		t.Errorf("error %q does not name Config.StoreDir", err)
	}
}
