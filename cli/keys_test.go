package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
)

func TestKeysNewWritesASeedOnlyItsOwnerReadsAndPrintsThePublicKey(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "boss.nk")
	code, out, errOut := run(t, "", "keys", "new", "--out", file)
	if code != exitOK {
		t.Fatalf("keys new: exit %d: %s", code, errOut)
	}
	pub := strings.TrimSpace(out)
	if !nkeys.IsValidPublicUserKey(pub) || strings.Count(out, "\n") != 1 {
		t.Fatalf("stdout = %q, want one user public key", out)
	}
	if !strings.Contains(errOut, "seed written to "+file+" (mode 0600)") {
		t.Errorf("stderr = %q", errOut)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed file mode %04o, want 0600", fi.Mode().Perm())
	}
	seed, _ := os.ReadFile(file)
	kp, err := approvals.ParseSeed(seed)
	if err != nil {
		t.Fatalf("the seed file does not parse: %v", err)
	}
	if got, _ := kp.PublicKey(); got != pub {
		t.Fatalf("the seed's public key is %s, stdout said %s", got, pub)
	}

	// keys public reads it back; keys new never overwrites a key.
	code, out, errOut = run(t, "", "keys", "public", file)
	if code != exitOK || strings.TrimSpace(out) != pub || errOut != "" {
		t.Fatalf("keys public: exit %d, %q, %q", code, out, errOut)
	}
	code, _, errOut = run(t, "", "keys", "new", "--out", file)
	if code != exitError || !strings.Contains(errOut, "exists: not overwriting a key") {
		t.Fatalf("keys new over an existing file: exit %d: %s", code, errOut)
	}
	if again, _ := os.ReadFile(file); string(again) != string(seed) {
		t.Fatal("the existing key was changed")
	}
}

func TestKeysNewWithoutOutPrintsBothHalves(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "", "keys", "new")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var pub, seed string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "U"):
			pub = line
		case strings.HasPrefix(line, "SU"):
			seed = line
		}
	}
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatalf("no seed in %q: %v", out, err)
	}
	if got, _ := kp.PublicKey(); got != pub {
		t.Fatalf("public key %q does not match the seed's %q", pub, got)
	}
}

func TestKeysUsageAndBadKeyFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notAKey := filepath.Join(dir, "x.nk")
	if err := os.WriteFile(notAKey, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"keys"}, "usage: loopgate keys new"},
		{[]string{"keys", "old"}, `unknown subcommand "old"`},
		{[]string{"keys", "public", notAKey}, "not a user nkey seed"},
		{[]string{"keys", "public", filepath.Join(dir, "missing.nk")}, "no such file"},
		{[]string{"approve", "r1", "s1c1", "--as", "boss", "--key", notAKey}, "not a user nkey seed"},
	} {
		if code, _, errOut := run(t, "", c.args...); code != exitError || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

// exampleKeys holds the example approvers' seeds; the example policy
// (examples/cityops/loopgate.yaml, what startServe runs) requires signed
// approvals.
const exampleKeys = "../examples/cityops/keys/"

func TestApproveWithKeySignsAndOnlyTheSignedApprovalIsAccepted(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startServe(t, data) // the example requires signatures
	runID := parkedRun(t, srv, "signed-approve-1")

	// Unsigned: loopgate refuses it, and says why.
	code, out, errOut := run(t, "", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--yes", "--nats", srv.url, "--wait", "30s")
	if code != exitApprovalRejected || !strings.Contains(out, "REJECTED (unsigned)") || !strings.Contains(errOut, "send it again with --key FILE") {
		t.Fatalf("unsigned approve: exit %d\n%s\n%s", code, out, errOut)
	}
	// Signed with someone else's key.
	code, out, _ = run(t, "", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--key", exampleKeys+"intern@cityops.nk",
		"--yes", "--nats", srv.url, "--wait", "30s")
	if code != exitApprovalRejected || !strings.Contains(out, "REJECTED (bad_signature)") {
		t.Fatalf("approve signed with the intern's key: exit %d\n%s", code, out)
	}
	if d := drafts(t, data); len(d) != 0 {
		t.Fatalf("a rejected approval wrote %v", d)
	}

	code, out, errOut = run(t, "", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--key", exampleKeys+"supervisor@cityops.nk",
		"--reason", "past the threshold", "--yes", "--nats", srv.url, "--wait", "30s")
	if code != exitOK {
		t.Fatalf("signed approve: exit %d\n%s\n%s", code, out, errOut)
	}
	const supervisorKey = "UCJN2NYVAL65XJGSGU55VPPCX57DA73TQUMCSI42HTRVSPYK46LQBTKJ"
	for _, want := range []string{", signed by " + supervisorKey + ")", "accepted: s3c1 approve by supervisor@cityops", "approval_requested s4c1"} {
		if !strings.Contains(out, want) {
			t.Errorf("signed approve output lacks %q:\n%s", want, out)
		}
	}
	if d := drafts(t, data); len(d) != 1 {
		t.Fatalf("after the signed approval the outbox holds %v, want one draft", d)
	}

	// The message as stored is signed over exactly what it says.
	m := regexp.MustCompile(`approvals seq (\d+), signed by`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no approvals seq in %s", out)
	}
	seq, _ := strconv.ParseUint(m[1], 10, 64)
	stored := storedApproval(t, srv.url, seq)
	if err := approvals.VerifySignature(stored, supervisorKey); err != nil || stored.Reason != "past the threshold" || stored.SignedAt == "" {
		t.Fatalf("stored approval %+v: %v", stored, err)
	}

	// A signed denial works the same way.
	code, out, errOut = run(t, "", "deny", runID, "s4c1", "--as", "supervisor@cityops", "--key", exampleKeys+"supervisor@cityops.nk",
		"--reason", "already with the crew", "--yes", "--nats", srv.url, "--wait", "30s")
	if code != exitOK || !strings.Contains(out, "DENIED by supervisor@cityops: already with the crew") {
		t.Fatalf("signed deny: exit %d\n%s\n%s", code, out, errOut)
	}
}

func storedApproval(t *testing.T, url string, seq uint64) approvals.Message {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "LOOPGATE_APPROVALS")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetMsg(t.Context(), seq)
	if err != nil {
		t.Fatal(err)
	}
	var m approvals.Message
	if err := json.Unmarshal(raw.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
