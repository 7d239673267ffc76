package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/apierror"
)

// ConnMetrics counts a listener's connections.
type ConnMetrics interface {
	// AddOpen moves the open-connection gauge of listener by delta.
	AddOpen(listener string, delta int)
	// IncRejected counts a connection closed because the cap was reached.
	IncRejected(listener string)
}

// cappedListener closes connections accepted beyond max at once, instead of leaving them in the kernel's
// backlog where a client cannot tell a full gateway from a slow one.
type cappedListener struct {
	net.Listener
	max     int64
	name    string
	metrics ConnMetrics
	open    atomic.Int64
}

func newCappedListener(ln net.Listener, max int, name string, m ConnMetrics) net.Listener {
	if max <= 0 && m == nil {
		return ln
	}
	return &cappedListener{Listener: ln, max: int64(max), name: name, metrics: m}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); l.max > 0 && n > l.max {
			l.open.Add(-1)
			if l.metrics != nil { // counted before the client can see the close
				l.metrics.IncRejected(l.name)
			}
			_ = c.Close()
			continue
		}
		if l.metrics != nil {
			l.metrics.AddOpen(l.name, 1)
		}
		return &countedConn{Conn: c, l: l}, nil
	}
}

// countedConn gives its slot back exactly once, however often it is closed.
type countedConn struct {
	net.Conn
	l    *cappedListener
	once sync.Once
}

// CloseWrite passes net/http's half-close through (it looks for the method on the connection).
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		if c.l.metrics != nil {
			c.l.metrics.AddOpen(c.l.name, -1)
		}
	})
	return err
}

// withDeadlines bounds a slow client: the request body must arrive within body, and each write of the
// response must complete within write (a client that stops reading a stream is cut off, which cancels the
// request and releases its worker connection). Zero durations leave that side unbounded.
//
// The read deadline is lifted as soon as the body is read to its end, or the response starts, so that it
// never outlives the body (net/http lifts it too when it starts its HTTP/1.1 background read; the
// explicit lift also covers HTTP/2 streams). No API here streams requests, so a body is always complete
// before the response begins.
func withDeadlines(h http.Handler, body, write time.Duration) http.Handler {
	if body <= 0 && write <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		dw := &deadlineWriter{ResponseWriter: w, rc: rc, write: write}
		now := time.Now()
		if write > 0 {
			if r.ProtoMajor == 1 {
				// HTTP/1.1: a fresh deadline replaces the one the previous request on this keep-alive
				// connection left (which must not cut a 100 Continue short), and each write moves it only
				// once it is stale, so a quick answer costs one timer update, not three. It may expire
				// while the handler waits: with no write pending that harms nothing, and the next write
				// moves it first.
				dw.armWrite(now)
			} else {
				// HTTP/2: a stream whose write deadline expires is reset, so none may run while the
				// handler waits.
				_ = rc.SetWriteDeadline(time.Time{})
			}
			defer func() { dw.armWrite(time.Now()) }() // bounds the final flush
		}
		if body > 0 && r.Body != nil && r.Body != http.NoBody {
			if err := rc.SetReadDeadline(now.Add(body)); err == nil {
				db := &deadlineBody{ReadCloser: r.Body, rc: rc}
				dw.body = db
				r.Body = db
			}
		}
		h.ServeHTTP(dw, r)
	})
}

// deadlineBody lifts the read deadline once the body has been read to its end (or failed).
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.lift()
	}
	return n, err
}

func (b *deadlineBody) lift() {
	b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
}

// deadlineWriter sets a write deadline before each write and flush. Moving a connection's deadline
// costs a timer update in the runtime's poller, so a streamed frame does not move it by a few
// microseconds each time: the deadline moves once it is a sixteenth of the timeout behind, and every
// write still gets at least 15/16 of the timeout.
type deadlineWriter struct {
	http.ResponseWriter
	rc       *http.ResponseController
	write    time.Duration
	body     *deadlineBody
	deadline time.Time // the write deadline set last (zero: none yet)
}

func (d *deadlineWriter) arm() {
	if d.body != nil {
		d.body.lift()
	}
	d.armWrite(time.Now())
}

// armWrite moves the write deadline to now plus the timeout when it is a sixteenth of the timeout
// behind (or unset).
func (d *deadlineWriter) armWrite(now time.Time) {
	if d.write > 0 {
		if next := now.Add(d.write); next.Sub(d.deadline) >= d.write/16 {
			d.deadline = next
			_ = d.rc.SetWriteDeadline(next)
		}
	}
}

func (d *deadlineWriter) WriteHeader(code int) {
	if code >= 200 {
		d.arm()
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.arm()
	return d.ResponseWriter.Write(p)
}

// Flush implements http.Flusher (Connect and the SSE relay flush through it).
func (d *deadlineWriter) Flush() {
	d.arm()
	_ = d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// limitAdminBody reads an admin request body up to max bytes before the handler runs, so that an
// oversized one gets a 413 on every admin surface (grpc-gateway would only see a read error).
func limitAdminBody(h http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		tooLarge := func() {
			writeRPCError(w, r, apierror.New(http.StatusRequestEntityTooLarge, apierror.CodePayloadTooLarge,
				"admin request body exceeds "+strconv.FormatInt(max, 10)+" bytes", nil))
		}
		if r.ContentLength > max {
			tooLarge()
			return
		}
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, max)); err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				tooLarge()
				return
			}
			writeRPCError(w, r, apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, "could not read the request body", err))
			return
		}
		r.Body = io.NopCloser(&buf)
		r.ContentLength = int64(buf.Len())
		h.ServeHTTP(w, r)
	})
}
