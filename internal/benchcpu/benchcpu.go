// Package benchcpu adds the process's CPU time per operation to Go benchmarks. The machines these
// benchmarks run on are shared: wall time per operation (ns/op) counts the time the benchmark waited
// for a CPU others held, CPU time (cpu-ns/op: user + system time of every thread of the process,
// garbage collection included) does not, so it is the steadier figure to compare with benchstat.
package benchcpu

import (
	"syscall"
	"testing"
	"time"
)

// Now returns the user + system CPU time the process has used.
func Now() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Start begins measuring; call the returned function once the timed loop is done (before any
// teardown) to report cpu-ns/op.
func Start(b *testing.B) func() {
	b.Helper()
	start := Now()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(Now()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
