package wait_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loopgate/loopgate/internal/wait"
)

func TestForWaitsTheDuration(t *testing.T) {
	t.Parallel()
	start := time.Now()
	if err := wait.For(t.Context(), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("returned after %s, want at least 20ms", waited)
	}
}

func TestForEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := wait.For(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("waited %s for a cancelled context", waited)
	}
}
