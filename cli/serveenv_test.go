package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The container image sets LOOPGATE_LISTEN and LOOPGATE_DATA: serve given
// neither flag listens and stores there; a flag still wins. Not parallel:
// it sets the process's environment.
func TestServeTakesItsAddressAndDataFromTheEnvironment(t *testing.T) {
	addr, data := freeAddr(t), t.TempDir()
	t.Setenv(envListen, addr)
	t.Setenv(envData, data)
	s, line, err := tryServe(addr, func(string) []string {
		return []string{"serve", "--config", "../examples/cityops/loopgate.yaml", "--workers", "1", "--log-format", "json"}
	})
	if err != nil {
		t.Fatalf("serve did not start: %q %v\n%s", line, err, s.stderr.String())
	}
	t.Cleanup(func() { s.stop(t) })
	if !strings.Contains(line, "serving on nats://"+addr) {
		t.Errorf("serving line %q: want it on %s, from %s", line, addr, envListen)
	}
	if _, err := os.Stat(filepath.Join(data, "jetstream")); err != nil {
		t.Errorf("no JetStream store under %s (from %s): %v", data, envData, err)
	}

	// A flag wins over the environment.
	other, otherData := freeAddr(t), t.TempDir()
	s2, line, err := tryServe(other, func(string) []string {
		return []string{"serve", "--config", "../examples/cityops/loopgate.yaml", "--workers", "1", "--log-format", "json", "--listen", other, "--data", otherData}
	})
	if err != nil {
		t.Fatalf("serve with flags did not start: %q %v\n%s", line, err, s2.stderr.String())
	}
	t.Cleanup(func() { s2.stop(t) })
	if !strings.Contains(line, "serving on nats://"+other) {
		t.Errorf("serving line %q: want the --listen address %s", line, other)
	}
}
