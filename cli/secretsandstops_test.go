package cli

import (
	"context"
	"strings"
	"testing"
	"time"
)

// withPassword puts a user and password into a nats://host:port URL, as
// the README allows (--nats nats://auditor:…@host:4222).
func withPassword(url, user, password string) string {
	return strings.Replace(url, "nats://", "nats://"+user+":"+password+"@", 1)
}

// runUntilReady runs the command line until stderr contains ready (or
// 20s pass), then cancels it like SIGTERM and returns the exit code and
// both outputs.
func runUntilReady(t *testing.T, ready string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, args, nil, &out, &errOut) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errOut.String(), ready) && time.Now().Before(deadline) {
		select {
		case code := <-done:
			return code, out.String(), errOut.String()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !strings.Contains(errOut.String(), ready) {
		t.Errorf("loopgate %v: no %q within 20s\n%s", args, ready, errOut.String())
	}
	cancel()
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("loopgate %v did not stop", args)
	}
	return code, out.String(), errOut.String()
}

// A worker given its credentials in the --nats URL must not write the
// password to its log (which goes to a log aggregator) nor serve to its
// stdout: the serving line names the URL as given.
func TestServeAndWorkerDoNotLogThePasswordOfTheNATSURL(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pw-in-url"
	// A server without authorization accepts any user and password.
	url := withPassword(startPlainServer(t), "worker", password)
	for _, cmd := range []string{"worker", "serve"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runUntilReady(t, "loopgate serving",
				cmd, "--nats", url, "--data", t.TempDir(), "--workers", "1", "--log-format", "json")
			if code != exitOK {
				t.Errorf("%s: exit %d\n%s", cmd, code, stderr)
			}
			if !strings.Contains(stderr, "loopgate serving") {
				t.Fatalf("%s never served:\n%s", cmd, stderr)
			}
			if strings.Contains(stderr, password) {
				t.Errorf("%s logs the NATS password:\n%s", cmd, stderr)
			}
			if strings.Contains(stdout, password) {
				t.Errorf("%s prints the NATS password:\n%s", cmd, stdout)
			}
		})
	}
}

// The client commands (connect, in stack.go) take credentials from the
// URL too; their errors must not repeat the password.
func TestClientConnectErrorsDoNotRepeatThePasswordOfTheURL(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pw-in-url"
	plain := startPlainServer(t) // up, but no loopgate layout on it
	for name, url := range map[string]string{
		"no server":   withPassword("nats://"+freeAddr(t), "auditor", password),
		"no loopgate": withPassword(plain, "auditor", password),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			code, stderr := mainWithin(t, 20*time.Second, "runs", "--nats", url)
			if code != exitError {
				t.Errorf("runs --nats %s: exit %d, want %d\n%s", url, code, exitError, stderr)
			}
			if strings.Contains(stderr, password) {
				t.Errorf("runs: the error repeats the password of the URL:\n%s", stderr)
			}
		})
	}
}

// A --nats value that holds no URL (an unset $NATS, a stray comma) is not
// an address: nats.go falls back to nats://127.0.0.1:4222, and serve with
// --nats "" embeds a server. Either way the process does what the
// operator did not ask for; it must be refused at once, naming --nats.
func TestANATSFlagWithoutAURLIsRefused(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"worker comma": {"worker", "--nats", " , "},
		"serve blank":  {"serve", "--nats", " "},
		"serve empty":  {"serve", "--nats", "", "--listen", "127.0.0.1:0"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			code, stderr := mainWithin(t, 6*time.Second, append(args, "--data", t.TempDir(), "--workers", "1", "--log-format", "json")...)
			if code != exitError || !strings.Contains(stderr, "--nats") {
				t.Errorf("loopgate %q: exit %d after %s, want %d at once naming --nats\n%s", args, code, time.Since(start).Round(time.Millisecond), exitError, stderr)
			}
			if strings.Contains(stderr, "loopgate serving") || strings.Contains(stderr, "NATS does not answer yet") {
				t.Errorf("loopgate %q went on instead of refusing the flag:\n%s", args, stderr)
			}
		})
	}
}

// SIGTERM (here: ctx cancelled) to a worker still waiting for its NATS
// servers is an operator stopping it: it stops cleanly, exit 0, rather
// than failing with the last connection error (which a supervisor
// reports as a failed unit).
func TestAWorkerStoppedWhileWaitingForNATSExitsCleanly(t *testing.T) {
	t.Parallel()
	url := "nats://" + freeAddr(t) // nothing listens there
	code, _, stderr := runUntilReady(t, "NATS does not answer yet",
		"worker", "--nats", url, "--data", t.TempDir(), "--workers", "1", "--log-format", "json")
	if code != exitOK {
		t.Errorf("worker stopped while waiting for NATS: exit %d, want %d\n%s", code, exitOK, stderr)
	}
}
