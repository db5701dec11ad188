// Package wait sleeps without outliving a context: retries and backoffs
// across loopgate (the journal, the model providers, the worker) wait the
// same way.
package wait

import (
	"context"
	"time"
)

// For waits d, or until ctx is done; then it returns ctx's error.
func For(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
