package app

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// DefaultGCPercent is the GC target sluice runs with unless GOGC is set. A gateway's garbage is
// per-request: collecting 4x less often cut the gateway's CPU per PD request by ~8% (158-165 -> 141-149
// µs, same run, docs/benchmarks.md). The price is a heap of up to five times what is live, so TuneGC
// also caps the heap below a container's memory limit. A big cache_aware tree (up to twice
// --max-tree-size characters per worker and model) is mostly outside the heap (placement's bulk.go),
// so it is not multiplied by five; followMemoryLimit keeps the cap's room for it.
const DefaultGCPercent = 400

// memoryLimitShare is the part of a container's memory limit given to Go's soft limit: the rest is
// for what the runtime does not count (thread stacks, the kernel's socket buffers are not ours anyway).
const memoryLimitShare = 0.9

// TuneGC applies DefaultGCPercent when the operator did not choose one with GOGC and, in a container
// with a memory limit, sets Go's soft memory limit to 90% of it unless GOMEMLIMIT is set: without it a
// GC target of five times the live heap could pass the container's limit and get the gateway killed,
// where collecting more often near the limit costs only CPU.
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if limit, ok := cgroupMemoryLimit(os.ReadFile); ok {
			debug.SetMemoryLimit(int64(float64(limit) * memoryLimitShare))
		}
	}
}

// cgroupMemoryLimit reads the memory limit of the process's cgroup (v2, then v1); ok is false when
// there is none ("max" in v2, a near-2^63 sentinel in v1) or it cannot be read.
func cgroupMemoryLimit(read func(string) ([]byte, error)) (int64, bool) {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := read(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// memoryLimitEvery is how often followMemoryLimit reads the trees' mapped memory: trees grow by
// megabytes a second at most, and the soft limit is a target, not a wall.
const memoryLimitEvery = 5 * time.Second

// followMemoryLimit lowers Go's soft memory limit, when one is set (by TuneGC from the container's, or
// by GOMEMLIMIT), by what mapped says the placement trees hold outside the heap, which the runtime
// does not count: so heap and trees together stay under the limit. It reads mapped every interval
// until ctx ends, then puts the limit back. Without a limit it returns at once.
func followMemoryLimit(ctx context.Context, mapped func() int64, every time.Duration) {
	base := debug.SetMemoryLimit(-1)
	if base == math.MaxInt64 {
		return
	}
	defer debug.SetMemoryLimit(base)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			debug.SetMemoryLimit(limitBesideTrees(base, mapped()))
		}
	}
}

// limitBesideTrees is the heap's limit when trees hold mapped bytes of base. It keeps at least a
// quarter of base: below that the collector would run without pause, and trees that large are a
// --max-tree-size too big for the container.
func limitBesideTrees(base, mapped int64) int64 {
	return max(base-mapped, base/4)
}
