package app

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

func TestCgroupMemoryLimit(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if v, ok := m[p]; ok {
				return []byte(v), nil
			}
			return nil, fs.ErrNotExist
		}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"v2 limit", map[string]string{"/sys/fs/cgroup/memory.max": "2147483648\n"}, 2147483648, true},
		{"v2 unlimited", map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}, 0, false},
		{"v1 limit", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n"}, 1073741824, true},
		{"v1 unlimited", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"garbage", map[string]string{"/sys/fs/cgroup/memory.max": "lots"}, 0, false},
		{"no cgroup", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := cgroupMemoryLimit(files(tc.files))
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %d %v, want %d %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	// A read error on v2 falls through to v1.
	read := func(p string) ([]byte, error) {
		if p == "/sys/fs/cgroup/memory.max" {
			return nil, errors.New("permission denied")
		}
		return []byte("536870912"), nil
	}
	if got, ok := cgroupMemoryLimit(read); !ok || got != 536870912 {
		t.Errorf("v2 unreadable: got %d %v, want the v1 limit", got, ok)
	}
}

func TestLimitBesideTrees(t *testing.T) {
	for _, c := range []struct{ base, mapped, want int64 }{
		{1 << 30, 0, 1 << 30},
		{1 << 30, 256 << 20, 768 << 20},
		{1 << 30, 1 << 30, 256 << 20}, // floored at a quarter
	} {
		if got := limitBesideTrees(c.base, c.mapped); got != c.want {
			t.Errorf("limitBesideTrees(%d, %d) = %d, want %d", c.base, c.mapped, got, c.want)
		}
	}
}

// TestFollowMemoryLimit: with a soft limit set, the trees' mapped bytes come off it while the loop
// runs, and the limit is put back when it ends. It changes the process's limit, so it is not parallel.
func TestFollowMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(1 << 30)
	defer debug.SetMemoryLimit(prev)
	var mapped atomic.Int64
	mapped.Store(256 << 20)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		followMemoryLimit(ctx, mapped.Load, time.Millisecond)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for debug.SetMemoryLimit(-1) != 768<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d, want %d", debug.SetMemoryLimit(-1), 768<<20)
		}
		time.Sleep(time.Millisecond) // polling the loop's effect, with a deadline
	}
	cancel()
	<-done
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Fatalf("after the loop ended the limit is %d, want %d back", got, 1<<30)
	}
}

// TestFollowMemoryLimitWithoutLimit: with no limit set the loop does nothing and returns at once.
func TestFollowMemoryLimitWithoutLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(prev)
	followMemoryLimit(t.Context(), func() int64 { t.Fatal("mapped read without a limit"); return 0 }, time.Millisecond)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit %d, want none", got)
	}
}
