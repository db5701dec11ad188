package worker

import (
	"testing"
	"time"
)

// Told of a recovery, a message waiting out an outage tries again at
// once, but never sooner than RetryDelay after its last try; untold, it
// waits its whole delay.
func TestWaitOutageTriesAgainWhenTold(t *testing.T) {
	t.Parallel()
	p := &Pool{opts: Config{RetryDelay: 300 * time.Millisecond}}

	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.waitOutage(t.Context(), 10*time.Second) }()
	time.Sleep(50 * time.Millisecond)
	awaitWaiter(t, &p.recovery)
	p.recovery.tell()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited < 300*time.Millisecond || waited > 3*time.Second {
		t.Errorf("told after 50ms, waited %s: want RetryDelay (300ms) since the last try, not less, and not the 10s delay", waited)
	}

	began = time.Now()
	go func() { done <- p.waitOutage(t.Context(), 200*time.Millisecond) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited < 200*time.Millisecond {
		t.Errorf("untold, waited %s of a 200ms delay", waited)
	}

	// Told long after the last try: no further wait.
	began = time.Now()
	go func() { done <- p.waitOutage(t.Context(), 10*time.Second) }()
	time.Sleep(500 * time.Millisecond)
	awaitWaiter(t, &p.recovery)
	p.recovery.tell()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited > 3*time.Second {
		t.Errorf("told after 500ms, waited %s", waited)
	}
}

// awaitWaiter returns once some waitOutage holds r's channel: a tell
// before that wakes no one, and on a loaded machine the goroutine may
// reach its wait only after the test's sleep.
func awaitWaiter(t *testing.T, r *recovery) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		waiting := r.ch != nil
		r.mu.Unlock()
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no waitOutage began waiting within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
