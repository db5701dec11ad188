//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// freeze stops this process until it receives SIGCONT. SIGSTOP takes
// effect in each thread only when the kernel next gets hold of it, so the
// calling goroutine could run on for a moment (past a check it was meant
// to stop before); waiting for SIGCONT keeps it exactly here.
func freeze() {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	<-cont
}
