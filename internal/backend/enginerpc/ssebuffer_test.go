package enginerpc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

// Frames written while nobody reads are taken by one Read, so the relay writes them to the client
// at once; then the writer's end.
func TestSSEBufferCoalescesFrames(t *testing.T) {
	b := newSSEBuffer(nil)
	for _, f := range []string{"data: 1\n\n", "data: 2\n\n", "data: 3\n\n"} {
		if _, err := b.Write([]byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	b.CloseWithError(nil)
	p := make([]byte, 100)
	n, err := b.Read(p)
	if err != nil || string(p[:n]) != "data: 1\n\ndata: 2\n\ndata: 3\n\n" {
		t.Fatalf("Read = %q, %v; want the three frames in one read", p[:n], err)
	}
	if n, err := b.Read(p); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("Read after the end = %d, %v; want io.EOF", n, err)
	}
}

// The writer writes no further ahead than the limit: past it, it waits for the reader; a small Read
// buffer takes the bytes in order.
func TestSSEBufferBoundsTheWriter(t *testing.T) {
	b := newSSEBuffer(nil)
	frame := bytes.Repeat([]byte("x"), sseBufferLimit)
	if _, err := b.Write(frame); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := b.Write([]byte("y"))
		wrote <- err
		b.CloseWithError(nil)
	}()
	select {
	case err := <-wrote:
		t.Fatalf("a write past the limit returned (%v) before any read", err)
	default:
	}
	got, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if <-wrote != nil || len(got) != sseBufferLimit+1 || got[len(got)-1] != 'y' {
		t.Fatalf("read %d bytes ending %q", len(got), got[len(got)-1:])
	}
}

// Closing the reader's side fails a writer waiting for room, and later writes, with its error.
func TestSSEBufferCloseReadFailsWriter(t *testing.T) {
	b := newSSEBuffer(nil)
	if _, err := b.Write(bytes.Repeat([]byte("x"), sseBufferLimit)); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error)
	go func() {
		_, err := b.Write([]byte("y"))
		wrote <- err
	}()
	b.CloseRead(errBodyClosed)
	if err := <-wrote; !errors.Is(err, errBodyClosed) {
		t.Fatalf("blocked Write = %v, want errBodyClosed", err)
	}
	if _, err := b.Write([]byte("z")); !errors.Is(err, errBodyClosed) {
		t.Fatalf("Write after CloseRead = %v", err)
	}
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Read after CloseRead = %v", err)
	}
}

// A stream's buffer from the pool carries only that stream's bytes, however much the last one wrote;
// once its reader closed, it goes back and its writer fails.
func TestSSEBufferFromThePool(t *testing.T) {
	var pool sync.Pool
	for round := range 3 {
		b := newSSEBuffer(&pool)
		want := strings.Repeat(fmt.Sprintf("data: %d\n\n", round), 100*(3-round)) // each shorter than the last
		if _, err := b.Write([]byte(want)); err != nil {
			t.Fatal(err)
		}
		b.CloseWithError(nil)
		got, err := io.ReadAll(b)
		if err != nil || string(got) != want {
			t.Fatalf("round %d: read %d bytes (%v), want its own %d", round, len(got), err, len(want))
		}
		b.CloseRead(errBodyClosed)
		if _, err := b.Write([]byte("late")); !errors.Is(err, errBodyClosed) {
			t.Fatalf("a write after the reader closed: %v", err)
		}
	}
}
