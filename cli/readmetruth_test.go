package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
)

// docYAML returns the first ```yaml block of file (a path from the
// repository root) that follows the line heading (a Markdown heading,
// matched whole).
func docYAML(t *testing.T, file, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	s := "\n" + string(raw)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no heading %q", file, heading)
	}
	s = s[i:]
	j := strings.Index(s, "\n```yaml\n")
	if j < 0 {
		t.Fatalf("%s has no yaml block after %q", file, heading)
	}
	s = s[j+len("\n```yaml\n"):]
	k := strings.Index(s, "\n```")
	if k < 0 {
		t.Fatalf("%s's yaml block after %q does not end", file, heading)
	}
	return s[:k+1]
}

// exampleDir makes a directory holding the CityOps example's schemas and
// scripts, so that a docs snippet's relative paths
// (schemas/lookup_complaints.schema.json, scripts/happy.json) resolve as
// they do beside examples/cityops/loopgate.yaml.
func exampleDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"schemas", "scripts"} {
		src := filepath.Join("../examples/cityops", sub)
		entries, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, sub, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// docs/configuration.md shows a whole file (it starts with `version: 1`)
// as the example of the format; an operator who copies it beside the
// CityOps schemas and scripts must get a config that loads, every tool the
// agent and the policy name having its manifest.
func TestDocsConfigurationExampleLoads(t *testing.T) {
	t.Parallel()
	dir := exampleDir(t)
	path := filepath.Join(dir, "loopgate.yaml")
	if err := os.WriteFile(path, []byte(docYAML(t, "docs/configuration.md", "# Configuration")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(path); err != nil {
		t.Errorf("docs/configuration.md's example does not load:\n%v", err)
	}
}

// docs/tools.md's Remote tools section shows the manifest of a tool served
// over NATS. Put in a file with an agent and a policy around it, it must
// load, `description` included, which the Every key table marks required
// (`/tools/0/description: is required`).
func TestDocsRemoteToolManifestLoads(t *testing.T) {
	t.Parallel()
	dir := exampleDir(t)
	doc := "version: 1\n" + docYAML(t, "docs/tools.md", "## Remote tools") + `agents:
  remote-assistant:
    model: {provider: scripted, script: scripts/happy.json}
    tools: [lookup_complaints]
    roles: [operator]
policy:
  roles:
    operator: {call: [lookup_complaints]}
`
	path := filepath.Join(dir, "remote.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(path); err != nil {
		t.Errorf("docs/tools.md's remote tool manifest does not load:\n%v\n%s", err, doc)
	}
}

// The demo used to end with "replay it any time: loopgate audit RUN
// (against a serve on the same data)" after removing that data, without
// --keep. Now, without --keep, it says to run it with --keep; with it,
// the replay hint names the data, which is still there.
func TestDemoReplayHintNamesDataThatStillExists(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"demo", "--scenario", "dry-run"}, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Fatalf("demo exit %d\n%s%s", code, out.String(), errOut.String())
	}
	s := out.String()
	m := regexp.MustCompile(`data in (\S+)\n`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("the demo did not say where its data is:\n%s", s)
	}
	dir := m[1]
	t.Cleanup(func() { os.RemoveAll(dir) })
	if regexp.MustCompile(`(?m)^replay it any time:`).MatchString(s) || !strings.Contains(s, "run the demo with --keep") {
		t.Errorf("without --keep the demo offers a replay of data it removed, or does not say how to keep it:\n%s", s)
	}

	out.Reset()
	if code := Main(t.Context(), []string{"demo", "--scenario", "dry-run", "--keep"}, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Fatalf("demo --keep exit %d\n%s%s", code, out.String(), errOut.String())
	}
	m = regexp.MustCompile(`data kept in (\S+)\n`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("demo --keep did not say where its data is:\n%s", out.String())
	}
	kept := m[1]
	t.Cleanup(func() { os.RemoveAll(kept) })
	hint := regexp.MustCompile(`(?m)^replay it any time: loopgate serve --data (\S+), then loopgate audit \S+$`).FindStringSubmatch(out.String())
	if hint == nil || hint[1] != kept {
		t.Fatalf("demo --keep gives no replay hint naming %s:\n%s", kept, out.String())
	}
	if _, err := os.Stat(filepath.Join(kept, "jetstream")); err != nil {
		t.Errorf("the demo says %q, but the data it means is gone: %v", hint[0], err)
	}
}

// docs/cli.md (`loopgate audit`): the timeline "ends with every gated
// call's story and where the run's time went". Without --follow it does;
// with --follow, on the same finished run, the `time:` line (and the
// approvals summary) used to be missing.
func TestAuditFollowEndsWithWhereTheTimeWent(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	ctx := t.Context()
	var out, errOut syncBuffer
	if code := Main(ctx, []string{"submit", "--nats", srv.url, "--agent", "dry-run-assistant", "--dry-run",
		"--task-id", "follow-summary-1", "--timeout", "30s"}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("submit: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	runID := events.RunID("cityops", "follow-summary-1")

	var plain, plainErr syncBuffer
	if code := Main(ctx, []string{"audit", runID, "--nats", srv.url}, nil, &plain, &plainErr); code != exitOK {
		t.Fatalf("audit: exit %d\n%s%s", code, plain.String(), plainErr.String())
	}
	if !strings.Contains(plain.String(), "\ntime: active ") {
		t.Fatalf("audit has no time line:\n%s", plain.String())
	}
	var followed, followedErr syncBuffer
	if code := Main(ctx, []string{"audit", runID, "--follow", "--nats", srv.url}, nil, &followed, &followedErr); code != exitOK {
		t.Fatalf("audit --follow: exit %d\n%s%s", code, followed.String(), followedErr.String())
	}
	if !strings.Contains(followed.String(), "\ntime: active ") {
		t.Errorf("audit --follow of a finished run does not end with where its time went (audit without --follow does):\n%s", followed.String())
	}
}

// docs/operations.md (NATS accounts): "A refused operation is never answered, so
// it would surface as a timeout; loopgate names the refusal instead (…
// refused this user: Permissions Violation for Publish to "$JS.API.…")".
// runs and the journal's open do; pending (as the auditor, who may not
// read loopgate_approvals) and audit without --tenant (as the approver,
// who may not get events by sequence, as docs/operations.md says) used to end
// with a bare "context deadline exceeded".
//
// Not parallel: the client commands authenticate from the environment.
func TestRefusalsAreNamedByPendingAndAudit(t *testing.T) {
	srv := startSecuredServe(t)
	ctx := t.Context()

	var out, errOut syncBuffer
	t.Setenv("NATS_USER", "auditor")
	t.Setenv("NATS_PASSWORD", "auditor-change-me")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX_auditor")
	start := time.Now()
	code := Main(ctx, []string{"pending", "--nats", srv.url}, nil, &out, &errOut)
	if code == exitOK || !strings.Contains(errOut.String(), "refused this user") {
		t.Errorf("pending as auditor: exit %d after %s, want the refusal named (refused this user: …)\n%s%s",
			code, time.Since(start).Round(time.Millisecond), out.String(), errOut.String())
	}

	t.Setenv("NATS_USER", "approver")
	t.Setenv("NATS_PASSWORD", "approver-change-me")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX_approver")
	out, errOut = syncBuffer{}, syncBuffer{}
	start = time.Now()
	code = Main(ctx, []string{"audit", events.RunID("cityops", "refused-none"), "--nats", srv.url}, nil, &out, &errOut)
	if code == exitOK || !strings.Contains(errOut.String(), "refused this user") {
		t.Errorf("audit without --tenant as approver: exit %d after %s, want the refusal named (refused this user: …)\n%s%s",
			code, time.Since(start).Round(time.Millisecond), out.String(), errOut.String())
	}
}
