package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
)

// accountsConf is the example the embedded server runs with here.
const accountsConf = "../deploy/nats-accounts.conf"

// startSecuredServe runs loopgate serve embedding a server configured
// with deploy/nats-accounts.conf, connected as its worker user.
func startSecuredServe(t *testing.T) *server {
	t.Helper()
	data := t.TempDir()
	return launchServe(t, func(addr string) []string {
		return []string{"serve", "--listen", addr, "--data", data, "--workers", "2", "--log-format", "json",
			"--sync-interval", "2m", "--nats-config", accountsConf,
			"--nats-user", "worker", "--nats-password", "worker-change-me", "--inbox-prefix", "_INBOX_worker"}
	})
}

// Not parallel: the client commands authenticate from the environment.
func TestServeWithNATSConfigRunsAsWorkerAndEachRoleConnectsAsItself(t *testing.T) {
	srv := startSecuredServe(t)
	ctx := t.Context()

	// upstream: any NATS client, publishing a task.
	up, err := nats.Connect(srv.url, nats.UserInfo("upstream", "upstream-change-me"), nats.CustomInboxPrefix("_INBOX_upstream"))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	js, _ := jetstream.New(up)
	task := `{"task_id":"auth-1","tenant":"cityops","principal":{"id":"dev@cityops","roles":["operator"]},` +
		`"agent":"dry-run-assistant","input":"Draft an escalation for SR-10421.","dry_run":true}`
	if _, err := js.Publish(ctx, events.TaskSubject("cityops"), []byte(task), jetstream.WithMsgID("auth-1")); err != nil {
		t.Fatalf("publish a task as upstream: %v", err)
	}
	runID := events.RunID("cityops", "auth-1")

	// auditor: loopgate audit, authenticated by the environment.
	t.Setenv("NATS_USER", "auditor")
	t.Setenv("NATS_PASSWORD", "auditor-change-me")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX_auditor")
	var out, errOut syncBuffer
	if code := Main(ctx, []string{"audit", runID, "--follow", "--nats", srv.url}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("audit --follow as auditor: exit %d\n%s%s\nserve:\n%s", code, out.String(), errOut.String(), srv.stderr.String())
	}
	if !strings.Contains(out.String(), "finished") {
		t.Errorf("audit printed no end:\n%s", out.String())
	}
	// auditor: loopgate runs, once the projection has the finished run.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, errOut = syncBuffer{}, syncBuffer{}
		code := Main(ctx, []string{"runs", "--nats", srv.url}, nil, &out, &errOut)
		if code != exitOK {
			t.Fatalf("runs as auditor: exit %d\n%s%s", code, out.String(), errOut.String())
		}
		if strings.Contains(out.String(), "1 run (any tenant): finished 1 (done 1)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs as auditor never listed the finished run:\n%s%s", out.String(), errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// approver: loopgate pending.
	t.Setenv("NATS_USER", "approver")
	t.Setenv("NATS_PASSWORD", "approver-change-me")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX_approver")
	out, errOut = syncBuffer{}, syncBuffer{}
	if code := Main(ctx, []string{"pending", "--tenant", "cityops", "--nats", srv.url}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("pending as approver: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	// The approver may not list runs: the refusal is named.
	out, errOut = syncBuffer{}, syncBuffer{}
	if code := Main(ctx, []string{"runs", "--nats", srv.url}, nil, &out, &errOut); code == exitOK ||
		!strings.Contains(errOut.String(), "refused this user") || !strings.Contains(errOut.String(), "KV_loopgate_runs") {
		t.Errorf("runs as approver: exit %d, want the refusal named\n%s%s", code, out.String(), errOut.String())
	}

	// upstream may not read the audit log: the refusal is named, not
	// only a timeout.
	t.Setenv("NATS_USER", "upstream")
	t.Setenv("NATS_PASSWORD", "upstream-change-me")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX_upstream")
	out, errOut = syncBuffer{}, syncBuffer{}
	if code := Main(ctx, []string{"audit", runID, "--nats", srv.url}, nil, &out, &errOut); code == exitOK ||
		!strings.Contains(errOut.String(), "Permissions Violation for Publish to \"$JS.API.STREAM.INFO.LOOPGATE_EVENTS\"") {
		t.Errorf("audit as upstream: exit %d, want the refusal named\n%s%s", code, out.String(), errOut.String())
	}
	if strings.Contains(srv.stderr.String(), "refused an operation") {
		t.Errorf("the worker hit a permission violation:\n%s", srv.stderr.String())
	}
}

func TestServeWithNATSConfigNeedsCredentialsAndNoExternalNATS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0"}, "a user of the server's config"},
		{[]string{"--listen", "127.0.0.1:0", "--nats-user", "worker", "--nats-password", "wrong"}, "a user of the server's config"},
		{[]string{"--nats", "nats://127.0.0.1:1"}, "--nats-config"},
		{[]string{"--listen", "127.0.0.1:0", "--nats-user", "worker", "--nats-password", "x", "--nkey", "seed.nk"}, "one way"},
	} {
		var out, errOut syncBuffer
		args := append([]string{"serve", "--data", t.TempDir(), "--nats-config", accountsConf}, tc.args...)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		code := Main(ctx, args, nil, &out, &errOut)
		cancel()
		if code != exitError || !strings.Contains(strings.ToLower(errOut.String()), strings.ToLower(tc.want)) {
			t.Errorf("serve %v: exit %d, want %d and %q\n%s", tc.args, code, exitError, tc.want, errOut.String())
		}
	}
}
