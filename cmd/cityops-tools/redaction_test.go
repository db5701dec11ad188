package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// A NATS URL may carry a user and password (nats://user:pass@host). The
// command redacts it in the "serving" line (ConnectedUrlRedacted); a
// connect failure used to print the URL as given.
func TestConnectFailureDoesNotPrintTheNATSPassword(t *testing.T) {
	t.Parallel()
	const pass = "hunter2-nats-pass"
	var stderr strings.Builder
	env := map[string]string{tokenEnv: "x"}
	code := run(t.Context(), []string{"--nats", "nats://tools:" + pass + "@127.0.0.1:1", "--outbox", filepath.Join(t.TempDir(), "o")},
		func(k string) string { return env[k] }, io.Discard, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %q", code, stderr.String())
	}
	if strings.Contains(stderr.String(), pass) {
		t.Errorf("stderr shows the NATS password: %q", stderr.String())
	}
}

// The --nats flag's default used to be $NATS_URL, and the flag package
// prints defaults in the usage text: a bad flag (or -h) printed
// NATS_URL's password to stderr.
func TestUsageDoesNotPrintTheNATSURLPassword(t *testing.T) {
	t.Parallel()
	const pass = "hunter2-nats-pass"
	env := map[string]string{tokenEnv: "x", "NATS_URL": "nats://tools:" + pass + "@nats.internal:4222"}
	for _, args := range [][]string{{"--no-such-flag"}, {"-h"}} {
		var stderr strings.Builder
		run(t.Context(), args, func(k string) string { return env[k] }, io.Discard, &stderr)
		if strings.Contains(stderr.String(), pass) {
			t.Errorf("%v: usage shows NATS_URL's password: %q", args, stderr.String())
		}
	}
}
