package enginerpc

import (
	"io"
	"sync"
)

// sseBufferLimit bounds what a stream's writer renders ahead of its reader: past it, the writer waits,
// and so the Generate stream is read no faster than the client takes the answer.
const sseBufferLimit = 64 << 10

// sseBuffer carries a streamed answer from its writer goroutine to the response body's reader. Unlike
// io.Pipe, whose Write waits until a Read has taken every byte, a Write returns once its bytes are
// buffered, and a Read takes everything buffered: frames that arrive while the relay is still writing
// the previous ones to the client go out together, in one write and one flush, as an HTTP engine's
// frames do when they wait in the socket. A pipe made each frame a write, a flush and two goroutine
// switches of its own.
type sseBuffer struct {
	mu        sync.Mutex
	buf       []byte
	off       int   // buf[off:] is unread
	werr      error // the writer's end: io.EOF or its error
	rclosed   bool  // the reader closed: writes fail with rerr
	rerr      error
	readable  chan struct{} // a wake-up for a waiting Read (1 slot: a missed one is never needed)
	writeable chan struct{} // a wake-up for a Write waiting for room
	pool      *sync.Pool    // of *[]byte: where buf comes from and goes back to (nil: none)
}

// newSSEBuffer returns a buffer whose bytes come from pool (nil: allocated as it grows). A buffer grown
// for one stream serves the next: grown afresh, each stream's allocated, cleared and copied its bytes
// a few times over, more than half of relaying a frame of a fast stream.
func newSSEBuffer(pool *sync.Pool) *sseBuffer {
	b := &sseBuffer{readable: make(chan struct{}, 1), writeable: make(chan struct{}, 1), pool: pool}
	if pool != nil {
		if p, ok := pool.Get().(*[]byte); ok {
			b.buf = (*p)[:0]
		}
	}
	return b
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Write buffers p (copied), waiting while the buffer is over its limit.
func (b *sseBuffer) Write(p []byte) (int, error) {
	for {
		b.mu.Lock()
		switch {
		case b.rclosed:
			b.mu.Unlock()
			return 0, b.rerr
		case b.werr != nil:
			b.mu.Unlock()
			return 0, io.ErrClosedPipe
		case len(b.buf)-b.off < sseBufferLimit:
			if b.off == len(b.buf) {
				b.buf, b.off = b.buf[:0], 0
			}
			b.buf = append(b.buf, p...)
			b.mu.Unlock()
			wake(b.readable)
			return len(p), nil
		}
		b.mu.Unlock()
		<-b.writeable
	}
}

// Read returns what is buffered, waiting for a Write when nothing is; after the writer's close and the
// last byte, the writer's error (io.EOF for none).
func (b *sseBuffer) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		switch {
		case b.rclosed:
			b.mu.Unlock()
			return 0, io.ErrClosedPipe
		case b.off < len(b.buf):
			n := copy(p, b.buf[b.off:])
			b.off += n
			b.mu.Unlock()
			wake(b.writeable)
			return n, nil
		case b.werr != nil:
			b.mu.Unlock()
			return 0, b.werr
		}
		b.mu.Unlock()
		<-b.readable
	}
}

// CloseWithError ends the writer's side: the reader gets what is buffered, then err (nil: io.EOF).
func (b *sseBuffer) CloseWithError(err error) {
	if err == nil {
		err = io.EOF
	}
	b.mu.Lock()
	if b.werr == nil {
		b.werr = err
	}
	b.mu.Unlock()
	wake(b.readable)
}

// CloseRead ends the reader's side: what is buffered is dropped and writes fail with err.
// Its bytes go back to the pool: neither side touches them once the reader closed.
func (b *sseBuffer) CloseRead(err error) {
	b.mu.Lock()
	var buf []byte
	if !b.rclosed {
		buf = b.buf
		b.rclosed, b.rerr, b.buf, b.off = true, err, nil, 0
	}
	b.mu.Unlock()
	wake(b.writeable)
	wake(b.readable)
	if b.pool != nil && cap(buf) > 0 && cap(buf) <= 2*sseBufferLimit {
		buf = buf[:0]
		b.pool.Put(&buf)
	}
}
