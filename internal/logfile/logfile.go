// Package logfile writes log lines to a file per UTC day in a directory (SMG's --log-dir):
// DIR/sluice.YYYY-MM-DD, opened for appending, the next one started at the first write after
// midnight UTC. It only writes; nothing is deleted.
//
// # Concurrency Model
//
// A Writer is safe for concurrent use: one mutex guards the open file and its day. It owns no
// goroutines.
package logfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Writer is an io.WriteCloser over the day's file.
type Writer struct {
	dir, prefix string
	now         func() time.Time

	mu   sync.Mutex
	f    *os.File
	day  string
	err  error // sticky: a file that cannot be opened stops file logging, not the gateway
	done bool
}

// Open creates dir if needed and opens today's file. now is the clock (time.Now when nil).
func Open(dir, prefix string, now func() time.Time) (*Writer, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	w := &Writer{dir: dir, prefix: prefix, now: now}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.rotateLocked(); err != nil {
		return nil, err
	}
	return w, nil
}

// Path returns the name of today's file.
func (w *Writer) Path() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return filepath.Join(w.dir, w.prefix+"."+w.day)
}

func (w *Writer) rotateLocked() error {
	day := w.now().UTC().Format(time.DateOnly)
	if w.f != nil && day == w.day {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(w.dir, w.prefix+"."+day), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	if w.f != nil {
		_ = w.f.Close()
	}
	w.f, w.day = f, day
	return nil
}

// Write appends p to the day's file. After an error opening a new day's file it reports that error
// and writes nothing more.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return 0, os.ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	if err := w.rotateLocked(); err != nil {
		w.err = err
		return 0, err
	}
	return w.f.Write(p)
}

// Close closes the file; later writes fail.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
