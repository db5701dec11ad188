//go:build !unix

package cli

import "os"

// freeze cannot stop a process here; it crashes it instead, so an armed
// point still breaks the run where it was asked to.
func freeze() { os.Exit(crashExitCode) }
