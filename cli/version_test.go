package cli

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionNamesTheModuleVersionRevisionAndGo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		given *debug.BuildInfo
		want  string
	}{
		{"no build info", nil, "loopgate unknown " + runtime.Version()},
		{"a work tree without VCS stamping", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}}, "loopgate (devel) go1.26.1"},
		{"go install @version", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "19a7f63c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "false"}}},
			"loopgate v0.4.0 (revision 19a7f63c1d2e, 2026-01-02T03:04:05Z) go1.26.1"},
		{"a modified work tree", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			"loopgate (devel) (revision abc123, modified) go1.26.1"},
	} {
		if got := versionOf(tc.given).String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestVersionCommandPrintsOneLineOrJSON(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, stderr := run(t, "", args...)
		if code != exitOK || !strings.HasPrefix(out, "loopgate ") || strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, " "+runtime.Version()+"\n") || stderr != "" {
			t.Errorf("loopgate %s: exit %d, stdout %q, stderr %q; want one line ending in %s", args[0], code, out, stderr, runtime.Version())
		}
	}
	code, out, _ := run(t, "", "version", "--json")
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil || v.Go != runtime.Version() || v.Version == "" {
		t.Errorf("version --json: exit %d, %q (%v)", code, out, err)
	}
}
