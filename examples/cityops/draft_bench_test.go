package cityops

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// BenchmarkWriteOnce is what one draft costs the machine: a synced temp
// file hard-linked into place, on the disk (the test's temp dir) and on
// tmpfs (/dev/shm, where there is one), with the process's CPU time per
// draft. It says how much of the happy path's CPU (three drafts a run) is
// the example tool's file system rather than loopgate's (docs/benchmarks.md,
// fifteenth round):
//
//	go test -run '^$' -bench WriteOnce ./examples/cityops
func BenchmarkWriteOnce(b *testing.B) {
	dirs := map[string]string{"disk": b.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "loopgate-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
		dirs["tmpfs"] = dir
	}
	content := renderDraft(Complaint{RequestID: "SR-10421", Category: "sanitation", Address: "12 Elm St", Summary: "missed pickup", DaysOpen: 9},
		"open for nine days", opA)
	for _, where := range []string{"disk", "tmpfs"} {
		dir, ok := dirs[where]
		if !ok {
			continue
		}
		b.Run("outbox="+where, func(b *testing.B) {
			start := processCPU(b)
			i := 0
			for b.Loop() {
				if _, err := writeOnce(dir, fmt.Sprintf("%s-%d.txt", where, i), content); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64((processCPU(b)-start).Microseconds())/float64(i), "cpu-us/draft")
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
