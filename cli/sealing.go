package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/redact"
	"github.com/loopgate/loopgate/seal"
	"github.com/loopgate/loopgate/tools"
)

// sealKeySetting names where a key-encryption key comes from, for errors.
const sealKeySetting = "redaction.seal_key_file (or the " + seal.EnvKey + " environment variable)"

// sealingKey returns the key-encryption key of cfg: the file
// redaction.seal_key_file names (relative to the config file), else the
// LOOPGATE_SEAL_KEY environment variable; nil when neither is set.
func sealingKey(cfg *config.Config) (*seal.LocalKey, error) {
	if path := cfg.Redaction.SealKeyFile; path != "" {
		var (
			b   []byte
			err error
		)
		if filepath.IsAbs(path) {
			b, err = os.ReadFile(path)
		} else {
			b, err = cfg.ReadFile(path)
		}
		if err != nil {
			return nil, fmt.Errorf("config: redaction.seal_key_file: %w", err)
		}
		k, err := seal.ParseKey(b)
		if err != nil {
			return nil, fmt.Errorf("config: redaction.seal_key_file %s: %w", path, err)
		}
		return seal.NewLocalKey(k)
	}
	return seal.KeyFromEnv()
}

// needsSealing returns the first profile (by name) offering a tool whose
// calls may wait for a human, or run in a later pass than the one that
// proposed them, with arguments the redactor changes: a write or a gated
// tool. Empty when redaction is off or no profile offers such a tool.
func needsSealing(cfg *config.Config) (agent, tool string) {
	r := cfg.Redaction
	if r.Keys != nil && len(r.Keys) == 0 && r.Patterns != nil && len(r.Patterns) == 0 {
		return "", "" // redaction is off: nothing is replaced, nothing lost
	}
	manifests := map[string]tools.Manifest{}
	for _, m := range cfg.Tools {
		manifests[m.Name] = m
	}
	names := make([]string, 0, len(cfg.Agents))
	for name := range cfg.Agents {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, t := range cfg.Agents[name].Tools {
			if m, ok := manifests[t]; ok && (m.Permission == tools.Write || m.NeedsApproval()) {
				return name, t
			}
		}
	}
	return "", ""
}

// workersKey returns the key-encryption key workers seal arguments with,
// or an error naming the setting when cfg needs one and has none.
func workersKey(cfg *config.Config) (*seal.LocalKey, error) {
	kek, err := sealingKey(cfg)
	if err != nil || kek != nil {
		return kek, err
	}
	if agent, tool := needsSealing(cfg); agent != "" {
		return nil, fmt.Errorf("config: agent %q offers %q, whose approved arguments may hold values the redactor replaces, and no key seals them: set %s to a key-encryption key (make one with `loopgate keys seal-new --out FILE`)",
			agent, tool, sealKeySetting)
	}
	return nil, nil
}

// keyring opens the tenants' data keys under kek.
func keyring(ctx context.Context, js jetstream.JetStream, kek *seal.LocalKey) (*seal.Keyring, error) {
	kv, err := js.KeyValue(ctx, journal.BucketKeys)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", journal.BucketKeys, err)
	}
	return seal.NewKeyring(kv, kek), nil
}

// redactionMarkers are what the redactor writes in place of a value.
var redactionMarkers = func() []string {
	ms := []string{redact.Marker}
	for _, p := range redact.AllPatterns {
		ms = append(ms, "["+string(p)+"]")
	}
	return ms
}()

// sealedNote says, for a question whose arguments were redacted, what an
// approver sees and how to see the rest.
func sealedNote(args []byte, opened bool) string {
	if opened {
		return "opened with the seal key: these are the real arguments (the stored copy is redacted)"
	}
	var markers []string
	for _, m := range redactionMarkers {
		if n := strings.Count(string(args), m); n > 0 {
			markers = append(markers, fmt.Sprintf("%d× %s", n, m))
		}
	}
	return fmt.Sprintf("sealed values hidden (%s): the call runs with the real ones; to see them, give this command the seal key (--seal-key FILE, or %s)",
		strings.Join(markers, ", "), seal.EnvKey)
}

// readSealKey is the key an approver opens sealed arguments with: the file
// --seal-key names, else LOOPGATE_SEAL_KEY; nil when neither.
func readSealKey(path string) (*seal.LocalKey, error) {
	if path != "" {
		return seal.LoadKeyFile(path)
	}
	return seal.KeyFromEnv()
}

// unseal shows q's real arguments when its call's arguments were sealed
// and kek (may be nil) opens them; otherwise it notes what is hidden and
// how to see it. A question whose arguments were never redacted is left
// as it is. The opened arguments must hash to the question's args_hash.
func unseal(ctx context.Context, js jetstream.JetStream, j *journal.Journal, kek *seal.LocalKey, q *question) error {
	if !slices.ContainsFunc(redactionMarkers, func(m string) bool { return strings.Contains(string(q.Args), m) }) {
		return nil // nothing was replaced, so nothing is sealed
	}
	evs, err := j.Replay(ctx, events.EventSubject(q.Tenant, q.RunID, events.TypeValidated))
	if err != nil {
		return fmt.Errorf("read the call's validated event: %w", err)
	}
	var v *events.ValidatedData
	for _, e := range evs {
		if e.CallID != q.CallID {
			continue
		}
		var d events.ValidatedData
		if err := e.Decode(&d); err != nil {
			return err
		}
		v = &d
	}
	if v == nil || v.Sealed == nil {
		return nil
	}
	if kek == nil {
		q.Sealed = sealedNote(q.Args, false)
		return nil
	}
	kr, err := keyring(ctx, js, kek)
	if err != nil {
		return err
	}
	plain, err := kr.Open(ctx, q.Tenant, v.Sealed, events.SealAAD(q.RunID, q.CallID, events.TypeValidated))
	if err != nil {
		q.Sealed = fmt.Sprintf("sealed values hidden: they do not open with this key: %v", err)
		return nil
	}
	if _, hash, err := tools.CanonicalHash(plain); err != nil || hash != q.ArgsHash {
		return fmt.Errorf("the sealed arguments of run %s call %s do not hash to the question's args_hash %s: do not approve it", q.RunID, q.CallID, q.ArgsHash)
	}
	q.Args, q.Sealed = plain, sealedNote(plain, true)
	return nil
}
