package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// tracedLoop spins for spin, makes fsync system calls for a while, then
// blocks on release: each of Analyze's states has a known lower bound.
func tracedLoop(t *testing.T, spin time.Duration, release <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for end := time.Now().Add(spin); time.Now().Before(end); {
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "sync"))
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	for range 20 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Error(err)
			return
		}
		if err := f.Sync(); err != nil {
			t.Error(err)
			return
		}
	}
	<-release
}

func TestAnalyzeSplitsAGoroutinesTimeByState(t *testing.T) {
	const spin, blocked = 30 * time.Millisecond, 60 * time.Millisecond
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	release, done := make(chan struct{}), make(chan struct{})
	go tracedLoop(t, spin, release, done)
	// The loop spins, syncs, then blocks; release it only once it has
	// been blocked for at least `blocked` (it cannot be blocked before
	// spin has passed).
	time.Sleep(spin + blocked + 200*time.Millisecond)
	close(release)
	<-done
	trace.Stop()

	gs, span, err := Analyze(&buf, "tracedLoop")
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 {
		t.Fatalf("%d goroutines matched tracedLoop, want 1: %+v", len(gs), gs)
	}
	g := gs[0]
	if !strings.HasSuffix(g.Func, ".tracedLoop") {
		t.Errorf("Func %q, want the loop's function", g.Func)
	}
	if g.Running+g.Runnable < spin {
		t.Errorf("running %v + runnable %v, want at least the %v it spun", g.Running, g.Runnable, spin)
	}
	if g.Waiting < blocked {
		t.Errorf("waiting %v, want at least the %v it was blocked on release", g.Waiting, blocked)
	}
	if g.Busy()+g.Waiting > span {
		t.Errorf("busy %v + waiting %v exceed the trace span %v", g.Busy(), g.Waiting, span)
	}
	var chanWait, sync bool
	for _, s := range g.Sites {
		if strings.HasPrefix(s.Where, "waiting (chan receive)") && strings.Contains(s.Where, "tracedLoop") && s.Time >= blocked {
			chanWait = true
		}
		if strings.HasPrefix(s.Where, "syscall") && strings.Contains(s.Where, "Fsync") {
			sync = true
		}
	}
	if !chanWait {
		t.Errorf("no site for the blocked receive of at least %v in %+v", blocked, g.Sites)
	}
	if !sync && g.Syscall > 0 {
		t.Errorf("system call time %v but no Fsync site in %+v", g.Syscall, g.Sites)
	}
}

func TestAnalyzeRejectsWhatIsNotATrace(t *testing.T) {
	if _, _, err := Analyze(strings.NewReader("not a trace"), "x"); err == nil || !strings.Contains(err.Error(), "read trace") {
		t.Fatalf("err %v, want a read trace error", err)
	}
}
