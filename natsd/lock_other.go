//go:build !unix

package natsd

import (
	"fmt"
	"os"
)

// lockStore creates dir. Elsewhere than on unix it takes no lock: running
// two servers on one StoreDir is then the operator's mistake to avoid.
func lockStore(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("natsd: Config.StoreDir %q: %w", dir, err)
	}
	return nil, nil
}
