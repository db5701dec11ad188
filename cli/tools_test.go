package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/natsd"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/toolsvc"
)

var remoteConfig = filepath.Join("..", "examples", "cityops", "remote.yaml")

// serveManifests starts an embedded server and one tool service with an
// endpoint per nats manifest of remote.yaml, advertising the manifest's
// args schema unless edit changes it (edit returns false to leave the
// tool out). It returns the server's URL.
func serveManifests(t *testing.T, edit func(m *tools.Manifest) bool) string {
	t.Helper()
	srv, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg, err := config.LoadFile(remoteConfig)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := toolsvc.New(nc, &toolsvc.Config{Name: "cityops-tools", Version: "1.0.0", Description: "test tools"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cfg.Tools {
		if !edit(&m) {
			continue
		}
		h := func(context.Context, toolsvc.Request) (any, error) { return nil, nil }
		if err := svc.Add(m.Name, m.Executor.NATS, h, toolsvc.ArgsSchema(m.ArgsSchema)); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	return srv.ClientURL()
}

func TestToolsListsTheManifestsAndTheirExecutors(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "", "tools")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"tools in the built-in CityOps example (5):", "lookup_complaints", "builtin:lookup_complaints", "write"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = run(t, "", "tools", "--config", remoteConfig)
	if code != exitOK || !strings.Contains(out, "nats:cityops.tools.draft_escalation") || !strings.Contains(out, "complaint_owner") {
		t.Errorf("remote.yaml: exit %d\n%s%s", code, out, errOut)
	}
}

func TestToolsFindsEveryRemoteToolServedAlike(t *testing.T) {
	t.Parallel()
	url := serveManifests(t, func(*tools.Manifest) bool { return true })
	code, out, errOut := run(t, "", "tools", "--config", remoteConfig, "--nats", url, "--wait", "5s")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"services on nats://", "cityops-tools 1.0.0: 1 instance, loopgate tool service (contract 1): test tools",
		"cityops.tools.complaint_owner", "queue q", "args schema advertised", "no mismatches",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestToolsFlagsMissingRespondersAndSchemasThatDiffer(t *testing.T) {
	t.Parallel()
	url := serveManifests(t, func(m *tools.Manifest) bool {
		switch m.Name {
		case "draft_status", "slow_lookup":
			return false
		case "get_procedure":
			// The service grew an argument the manifest does not know.
			m.ArgsSchema = json.RawMessage(`{"type":"object","properties":{"topic":{"type":"string"},"lang":{"type":"string"}},"required":["topic"]}`)
		case "lookup_complaints":
			// The same contract, written differently: no mismatch.
			var s map[string]any
			_ = json.Unmarshal(m.ArgsSchema, &s)
			delete(s, "additionalProperties")
			m.ArgsSchema, _ = json.MarshalIndent(s, "", "    ")
		}
		return true
	})
	code, out, _ := run(t, "", "tools", "--config", remoteConfig, "--nats", url, "--wait", "5s")
	if code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	_, problems, _ := strings.Cut(out, "mismatches (3):\n")
	for _, want := range []string{
		"draft_status: nats subject cityops.tools.draft_status has no responder",
		"slow_lookup: nats subject cityops.tools.slow_lookup has no responder",
		"get_procedure: cityops-tools 1.0.0 endpoint get_procedure (cityops.tools.get_procedure) advertises an args schema that differs from the manifest's: only the service has lang; they constrain topic differently",
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("mismatches lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(problems, "lookup_complaints") {
		t.Errorf("an equivalent schema was flagged:\n%s", out)
	}
}

func TestToolsFailsWhenNATSIsUnreachable(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, "", "tools", "--nats", "nats://127.0.0.1:1")
	if code != exitError || !strings.Contains(errOut, "connect to nats://127.0.0.1:1") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestDiscoverReturnsAfterTheWaitWhenNobodyAnswers(t *testing.T) {
	t.Parallel()
	srv, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect(nats.Name("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	began := time.Now()
	infos, err := discover(t.Context(), nc, 200*time.Millisecond)
	if err != nil || len(infos) != 0 || time.Since(began) > 5*time.Second {
		t.Errorf("discover: %v, %v after %s", infos, err, time.Since(began))
	}
}

func TestSubjectMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b.c", "a.b.c", true},
		{"a.b.c", "a.b", false},
		{"a.b", "a.b.c", false},
		{"a.*.c", "a.b.c", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{">", "a.b", true},
	}
	for _, tt := range tests {
		if got := subjectMatches(tt.pattern, tt.subject); got != tt.want {
			t.Errorf("subjectMatches(%q, %q) = %v", tt.pattern, tt.subject, got)
		}
	}
}

// toolsUsersConf is a server config whose users differ only in what
// loopgate tools needs: discoverer may ask $SRV.INFO and read its inbox,
// other may not ask, svc runs the services.
const toolsUsersConf = `authorization {
  users: [
    {user: discoverer, password: d, permissions: {publish: ["$SRV.>"], subscribe: ["_INBOX_discoverer.>"]}}
    {user: other, password: o, permissions: {publish: ["elsewhere"], subscribe: ["_INBOX_other.>"]}}
    {user: svc, password: s}
  ]
}
`

// Not parallel: loopgate tools authenticates from the environment, as the
// other client commands do, and a refusal is named, not read as "no
// services".
func TestToolsAuthenticatesFromTheEnvironmentAndNamesARefusal(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "users.conf")
	if err := os.WriteFile(conf, []byte(toolsUsersConf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := natsd.Start(natsd.Config{StoreDir: t.TempDir(), SyncInterval: "2m", ConfigFile: conf, Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect(nats.UserInfo("svc", "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := toolsvc.New(nc, &toolsvc.Config{Name: "auth-tools", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Add("echo", "auth.tools.echo", func(context.Context, toolsvc.Request) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())

	for _, tc := range []struct {
		user, password, inbox string
		wantCode              int
		want                  string
	}{
		{"discoverer", "d", "_INBOX_discoverer", exitOK, "auth-tools 1.0.0: 1 instance"},
		{"other", "o", "_INBOX_other", exitError, `refused this user: nats: permissions violation: Permissions Violation for Publish to "$SRV.INFO"`},
		{"discoverer", "d", "", exitError, `refused this user: nats: permissions violation: Permissions Violation for Subscription to "_INBOX.`},
	} {
		t.Setenv("NATS_USER", tc.user)
		t.Setenv("NATS_PASSWORD", tc.password)
		t.Setenv("NATS_INBOX_PREFIX", tc.inbox)
		code, out, errOut := run(t, "", "tools", "--nats", srv.ClientURL())
		if code != tc.wantCode || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("tools as %s (inbox %q): exit %d, want %d and %q\n%s%s", tc.user, tc.inbox, code, tc.wantCode, tc.want, out, errOut)
		}
	}
}
