//go:build unix

package natsd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockStore takes an exclusive lock on dir, creating it if needed, so two
// servers (in one process or two) never share a JetStream store:
// nats-server itself does not guard against it. The lock is released when
// the returned file is closed or the process exits.
func lockStore(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("natsd: Config.StoreDir %q: %w", dir, err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("natsd: Config.StoreDir %q: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("natsd: Config.StoreDir %q: %w", dir, ErrStoreInUse)
		}
		return nil, fmt.Errorf("natsd: Config.StoreDir %q: lock %s: %w", dir, path, err)
	}
	return f, nil
}
