package app

import (
	"errors"
	"io/fs"
	"testing"
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
