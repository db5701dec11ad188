package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// buildVersion is what loopgate version reports of the running binary.
type buildVersion struct {
	// Version is the main module's version: a tag or pseudo-version for
	// `go install …@version`, "(devel)" for a build from a work tree.
	Version string `json:"version"`
	// Revision, Time and Modified are the VCS revision the binary was
	// built from, its commit time and whether the work tree had
	// uncommitted changes, when the build recorded them.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Go is the Go version the binary was built with.
	Go string `json:"go"`
}

// versionOf reads v from build info bi (nil: none recorded).
func versionOf(bi *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: "unknown", Go: runtime.Version()}
	if bi == nil {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the one line loopgate version prints: the version, the
// revision (12 hex digits), its time and "modified" where known, and the
// Go version.
func (v buildVersion) String() string {
	var vcs []string
	if v.Revision != "" {
		vcs = append(vcs, "revision "+v.Revision[:min(12, len(v.Revision))])
	}
	if v.Time != "" {
		vcs = append(vcs, v.Time)
	}
	if v.Modified {
		vcs = append(vcs, "modified")
	}
	s := "loopgate " + v.Version
	if len(vcs) > 0 {
		s += " (" + strings.Join(vcs, ", ") + ")"
	}
	return s + " " + v.Go
}

// runVersion is loopgate version (and loopgate --version).
func runVersion(_ context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the version as a JSON object")
	if code, ok := parseOnlyFlags(fs, e, args); !ok {
		return code
	}
	var v buildVersion
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = versionOf(bi)
	} else {
		v = versionOf(nil)
	}
	if *asJSON {
		b, _ := json.Marshal(v)
		fmt.Fprintln(e.stdout, string(b))
		return exitOK
	}
	fmt.Fprintln(e.stdout, v)
	return exitOK
}
