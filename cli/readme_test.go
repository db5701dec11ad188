package cli

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every flag of every command is named in docs/cli.md (`--flag`), where
// operators look them up: `loopgate <command> -h` lists them, and a flag
// added without a word there fails here.
func TestTheDocsNameEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)
	for _, c := range commands() {
		args := []string{c.name, "-h"}
		if c.name == "keys" {
			args = []string{"keys", "new", "-h"}
		}
		var stdout, stderr bytes.Buffer
		Main(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
		help := stdout.String() + stderr.String()
		flags := flagLine.FindAllStringSubmatch(help, -1)
		if len(flags) == 0 && c.name != "keys" {
			t.Errorf("loopgate %s -h lists no flags:\n%s", c.name, help)
		}
		for _, f := range flags {
			if !bytes.Contains(readme, []byte("--"+f[1])) {
				t.Errorf("loopgate %s --%s is not in docs/cli.md", c.name, f[1])
			}
		}
	}
}
