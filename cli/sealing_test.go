package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	piiReason = "Open 9 days; the resident (jane.roe@example.com, 555-867-5309) called twice."
	piiArgs   = `{"reason":"` + piiReason + `","request_id":"SR-10421"}`
)

// piiCityOps copies the CityOps example to a new directory, its happy
// path's first draft quoting a resident's contact details, and returns the
// config's path. edit, when not nil, rewrites the config.
func piiCityOps(t *testing.T, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../examples/cityops")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "scripts", "happy.json")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	const first = "Open 9 days, past the 5-day sanitation escalation threshold."
	if !strings.Contains(string(b), first) {
		t.Fatalf("the happy script no longer holds %q", first)
	}
	if err := os.WriteFile(script, []byte(strings.Replace(string(b), first, piiReason, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "loopgate.yaml")
	if edit != nil {
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, []byte(edit(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

// An approver without the seal key sees the redacted arguments and is
// told plainly that values are sealed and how to see them; with the key,
// pending and approve show the real arguments, and the approved draft is
// written with them.
func TestApproversSeeSealedArgumentsOnlyWithTheKey(t *testing.T) {
	t.Parallel()
	cfg := piiCityOps(t, nil)
	dataDir := t.TempDir()
	srv := launchServe(t, func(addr string) []string {
		return []string{"serve", "--config", cfg, "--listen", addr, "--data", dataDir, "--workers", "2", "--log-format", "json"}
	})
	runID := parkedRun(t, srv, "sealed-pending-1")
	key := filepath.Join(filepath.Dir(cfg), "keys", "demo-seal.key")

	code, out, errOut := run(t, "", "pending", "--nats", srv.url)
	if code != exitOK {
		t.Fatalf("pending exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`args       {"reason":"Open 9 days; the resident ([email], [phone]) called twice.","request_id":"SR-10421"}`,
		"sealed     sealed values hidden (1× [email], 1× [phone]): the call runs with the real ones; to see them, give this command the seal key (--seal-key FILE, or LOOPGATE_SEAL_KEY)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("pending without the key lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "jane.roe") {
		t.Errorf("pending without the key shows the e-mail address:\n%s", out)
	}

	code, out, errOut = run(t, "", "pending", "--nats", srv.url, "--seal-key", key)
	if code != exitOK {
		t.Fatalf("pending --seal-key exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"args       " + piiArgs,
		"sealed     opened with the seal key: these are the real arguments (the stored copy is redacted)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("pending with the key lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = run(t, "", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--yes", "--nats", srv.url,
		"--key", "../examples/cityops/keys/supervisor@cityops.nk", "--seal-key", key, "--wait", "20s")
	if code != exitOK {
		t.Fatalf("approve exit %d: %s\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "args       "+piiArgs) {
		t.Errorf("approve with the key does not show the real arguments:\n%s", out)
	}
	names := drafts(t, dataDir)
	if len(names) != 1 {
		t.Fatalf("drafts %v, want the approved one", names)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "outbox", names[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), piiReason) {
		t.Errorf("the draft does not hold the approved reason %q:\n%s", piiReason, b)
	}
}

// A config whose profiles offer a gated write, with redaction on and no
// key to seal with, is refused at start, naming the setting.
func TestServeRefusesAWriteProfileWithoutASealKey(t *testing.T) {
	t.Parallel()
	cfg := piiCityOps(t, func(s string) string {
		return strings.Replace(s, "  seal_key_file: keys/demo-seal.key\n", "  keys: [password]\n", 1)
	})
	code, _, errOut := run(t, "", "serve", "--config", cfg, "--listen", freeAddr(t), "--data", t.TempDir())
	if code == exitOK {
		t.Fatal("serve started without a seal key")
	}
	for _, want := range []string{"redaction.seal_key_file", "LOOPGATE_SEAL_KEY", `"draft_escalation"`, "loopgate keys seal-new"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the refusal does not name %s:\n%s", want, errOut)
		}
	}
	// Redaction off: nothing is replaced, nothing to seal; serve starts.
	off := piiCityOps(t, func(s string) string {
		return strings.Replace(s, "  seal_key_file: keys/demo-seal.key\n", "  keys: []\n  patterns: []\n", 1)
	})
	dataDir := t.TempDir()
	launchServe(t, func(addr string) []string {
		return []string{"serve", "--config", off, "--listen", addr, "--data", dataDir, "--workers", "1", "--log-format", "json"}
	})
}

// keys seal-new prints a key the workers read; keys shred deletes a
// tenant's data key only when told --yes, after which an approved call
// whose arguments were sealed ends args_lost and writes nothing.
func TestKeysSealNewAndShred(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "", "keys", "seal-new")
	if code != exitOK {
		t.Fatalf("keys seal-new exit %d: %s", code, errOut)
	}
	keyFile := filepath.Join(t.TempDir(), "seal.key")
	if err := os.WriteFile(keyFile, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := piiCityOps(t, func(s string) string {
		return strings.Replace(s, "  seal_key_file: keys/demo-seal.key\n", "  seal_key_file: "+keyFile+"\n", 1)
	})
	dataDir := t.TempDir()
	srv := launchServe(t, func(addr string) []string {
		return []string{"serve", "--config", cfg, "--listen", addr, "--data", dataDir, "--workers", "2", "--log-format", "json"}
	})
	runID := parkedRun(t, srv, "sealed-shred-1")

	if code, _, errOut := run(t, "", "keys", "shred", "cityops", "--nats", srv.url); code == exitOK || !strings.Contains(errOut, "--yes") {
		t.Fatalf("keys shred without --yes: exit %d: %s", code, errOut)
	}
	code, out, errOut = run(t, "", "keys", "shred", "cityops", "--yes", "--nats", srv.url)
	if code != exitOK || !strings.Contains(out, "the data key of tenant cityops is deleted") {
		t.Fatalf("keys shred: exit %d: %s%s", code, out, errOut)
	}
	code, out, errOut = run(t, "", "pending", "--nats", srv.url, "--seal-key", keyFile)
	if code != exitOK || !strings.Contains(out, "sealed     sealed values hidden: they do not open with this key") {
		t.Errorf("pending after shredding: exit %d:\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, "", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--yes", "--nats", srv.url,
		"--key", "../examples/cityops/keys/supervisor@cityops.nk", "--wait", "20s")
	if code != exitOK {
		t.Fatalf("approve exit %d: %s\n%s", code, errOut, out)
	}
	code, out, errOut = run(t, "", "audit", runID, "--nats", srv.url)
	if code != exitOK {
		t.Fatalf("audit exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "args_lost") || !strings.Contains(out, "crypto-shredded") {
		t.Errorf("the audit does not show the call lost to the shredded key:\n%s", out)
	}
	if names := drafts(t, dataDir); len(names) != 0 {
		t.Errorf("drafts %v after shredding, want none", names)
	}
}
