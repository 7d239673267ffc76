package logfile

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestDailyFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs") // created by Open
	var mu sync.Mutex
	now := time.Date(2026, 8, 1, 23, 59, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	w, err := Open(dir, "sluice", clock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if _, err := w.Write([]byte("second\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"sluice.2026-08-01": "first\n", "sluice.2026-08-02": "second\n"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := w.Write([]byte("late")); err == nil {
		t.Error("write after Close succeeded")
	}
	// Reopening appends.
	w2, err := Open(dir, "sluice", clock)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w2.Write([]byte("third\n"))
	_ = w2.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "sluice.2026-08-02")); string(b) != "second\nthird\n" {
		t.Errorf("appended file %q", b)
	}
}

func TestOpenFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(file, "sub"), "sluice", nil); err == nil {
		t.Fatal("Open under a regular file succeeded")
	}
}
