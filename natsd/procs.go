package natsd

import "cmp"

// Procs is the GOMAXPROCS a process that embeds the server should run with,
// given the server's SyncInterval and the process's GOMAXPROCS now: twice
// as many with "always", as many otherwise.
//
// With "always" each of the server's streams stores its appends in one
// goroutine that spends most of its busy time in fsync system calls (about
// half, in the benchmarks' execution traces; docs/benchmarks.md, seventh
// round). A goroutine in a system call keeps its P until the runtime takes
// it back, so with one P per core the streams' fsyncs hold Ps the pool's
// goroutines and the other streams are ready to run on: a fifth of each
// stream's time went to waiting for a P. Twice the Ps let the kernel, not
// the Go scheduler, share the cores; it raised the happy path's runs/s by
// 10–20 % on two vCPUs. With an interval no fsync waits in an append and
// the process is bound by its CPU, where more Ps than cores only cost.
func Procs(syncInterval string, current int) int {
	if cmp.Or(syncInterval, SyncAlways) == SyncAlways {
		return 2 * current
	}
	return current
}
