package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/events"
)

// The payload approval-payload prints, published with a plain nats.go
// client on the subject its nats pub line names, approves a parked call.
func TestApprovalPayloadPublishedWithPlainNATSApprovesTheCall(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	runID := parkedRun(t, srv, "payload-1")
	code, out, stderr := run(t, "", "pending", "--json", "--nats", srv.url)
	var entry struct {
		ArgsHash string `json:"args_hash"`
	}
	if err := json.Unmarshal([]byte(out), &entry); code != exitOK || err != nil || entry.ArgsHash == "" {
		t.Fatalf("pending --json: exit %d, %v\n%s%s", code, err, out, stderr)
	}

	code, out, stderr = run(t, "", "approval-payload", runID, "s3c1", "--args-hash", entry.ArgsHash,
		"--as", "supervisor@cityops", "--key", exampleKeys+"supervisor@cityops.nk")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	subject := "loopgate.approvals.cityops." + runID + ".s3c1"
	if code != exitOK || len(lines) != 2 || lines[1] != "nats pub "+subject+" '"+lines[0]+"'" {
		t.Fatalf("approval-payload: exit %d, want the JSON and its nats pub line\n%s%s", code, out, stderr)
	}

	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	decided := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe("loopgate.events.cityops."+runID+".*", decided)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Publish(subject, []byte(lines[0])); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-decided:
			switch {
			case strings.HasSuffix(m.Subject, "."+string(events.TypeApproved)):
				if !strings.Contains(string(m.Data), "supervisor@cityops") {
					t.Errorf("approved by someone else: %s", m.Data)
				}
				return
			case strings.HasSuffix(m.Subject, "."+string(events.TypeApprovalRejected)):
				t.Fatalf("the printed payload was rejected: %s", m.Data)
			}
		case <-timeout:
			t.Fatal("the printed payload decided nothing within 30s")
		}
	}
}

func TestApprovalPayloadRefusesWhatItCannotSign(t *testing.T) {
	t.Parallel()
	key := exampleKeys + "supervisor@cityops.nk"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"r1", "s3c1", "--as", "a", "--key", key}, "--args-hash is required"},
		{[]string{"r1", "s3c1", "--args-hash", "sha256:x", "--key", key}, "--as ID is required"},
		{[]string{"r1", "s3c1", "--args-hash", "sha256:x", "--as", "a"}, "--key FILE is required"},
		{[]string{"r1", "s3c1", "--args-hash", "sha256:x", "--as", "a", "--key", key, "--deny"}, "--deny needs --reason"},
	} {
		code, out, stderr := run(t, "", append([]string{"approval-payload"}, tc.args...)...)
		if code != exitError || out != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("approval-payload %v: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, stderr, tc.want)
		}
	}
}
