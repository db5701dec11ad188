package natstest

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/natsd"
)

// The child server process is the test binary run again with these set.
const (
	childDirEnv  = "LOOPGATE_NATSTEST_CHILD_DIR"
	childSyncEnv = "LOOPGATE_NATSTEST_CHILD_SYNC"
)

// ChildServer is the embedded nats-server running in a child process, so
// that the heap of the test process is the pool's alone (benchmarks of
// memory per run). Connections to it are TCP on loopback.
type ChildServer struct {
	URL string
	in  io.WriteCloser
	out *bufio.Reader
}

// ServeChildIfAsked turns this process into the child server when
// StartChildServer started it, and then never returns. Call it first
// thing in the test package's init.
func ServeChildIfAsked() {
	if dir := os.Getenv(childDirEnv); dir != "" {
		os.Exit(childMain(dir, os.Getenv(childSyncEnv)))
	}
}

// childMain runs the embedded server on dir, prints its client URL,
// answers each "heap" line on stdin with its heap in use after a GC, and
// returns when stdin closes (the parent ended or died).
func childMain(dir, interval string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := natsd.Start(natsd.Config{StoreDir: dir, SyncInterval: interval, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "natstest child server:", err)
		return 1
	}
	defer s.Shutdown()
	fmt.Println(s.ClientURL())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "heap" {
			fmt.Println(HeapInUse())
		}
	}
	return 0
}

// HeapInUse is the heap in use after two GCs (the second collects what
// the first one's finalizers let go).
func HeapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// StartChildServer starts the embedded server with the given fsync
// setting in a child process on a tb.TempDir and returns it once it
// serves. It stops when tb's cleanups run (registered now, so after the
// cleanups of connections made later).
func StartChildServer(tb testing.TB, interval string) *ChildServer {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), childDirEnv+"="+tb.TempDir(), childSyncEnv+"="+interval)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s := &ChildServer{in: in, out: bufio.NewReader(out)}
	tb.Cleanup(func() {
		_ = in.Close() // the child shuts down on EOF
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("natstest child server: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			tb.Error("natstest child server did not stop; killed")
		}
	})
	line, err := s.out.ReadString('\n')
	if err != nil {
		tb.Fatalf("natstest child server did not start: %v", err)
	}
	s.URL = strings.TrimSpace(line)
	return s
}

// Heap asks the child for its heap in use after a GC.
func (s *ChildServer) Heap() (uint64, error) {
	if _, err := io.WriteString(s.in, "heap\n"); err != nil {
		return 0, err
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("natstest child server heap: %w", err)
	}
	return strconv.ParseUint(strings.TrimSpace(line), 10, 64)
}
