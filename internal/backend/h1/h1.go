package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Transport is the HTTP/1.1 client for plain-http engines: a request's whole round trip runs in
// the calling goroutine. net/http's Transport hands each request to a writer goroutine and takes its
// answer from a reader goroutine, two goroutine hand-offs each way for every leg, which on the
// gateway's hot path cost more than the syscalls themselves; here the caller writes the request,
// reads the answer's head and, through the body, the answer itself.
//
// What it keeps of net/http's guarantees:
//
//   - Cancellation: a request's context ending interrupts whatever is blocked on its connection (the
//     dial, the write, the wait for the head, a body read) and the call returns the context's error;
//     that connection is never reused.
//   - Streaming: the body reads the connection as the engine writes; a read returns what has arrived.
//   - No duplicate requests: a request is sent again only when nothing of it reached the engine — its
//     first write on a pooled connection failed outright — and then once, on a checked connection. A
//     request that was written and got no answer is an error, never retried here.
//   - A connection pooled for checkAfterIdle or longer is checked before use: one the engine has
//     closed (or that has bytes nobody asked for) is dropped, so the engines' keep-alive timeouts do
//     not fail requests. One used more recently is not checked: see checkAfterIdle.
//
// Connections are pooled per host, most recently used first; a connection goes back only when its
// body was read to the end, the engine did not ask to close it and its request's context is alive.
//
// # Concurrency Model
//
// The pool is the only shared state (one mutex). A connection belongs to one request from the moment
// it is taken to the moment its body is done. The only goroutine is the one context.AfterFunc starts
// when a request's context ends while the request still holds its connection: it sets a past
// deadline on the connection and returns; it is stopped when the request ends, and a connection whose
// stop came too late is closed, not pooled.
type Transport struct {
	dialer                *net.Dialer
	maxIdlePerHost        int
	idleTimeout           time.Duration
	responseHeaderTimeout time.Duration
	readBufferSize        int

	checkAfter time.Duration // checkAfterIdle; tests set their own

	mu   sync.Mutex
	idle map[string][]*h1Conn // by host:port, most recently used last
}

// checkAfterIdle is how long a connection stays pooled before its next use checks it. The check is a
// system call (a peek at the socket) a leg, and under load a pooled connection is used again within
// milliseconds: checking each cost 3.5% of a PD request's CPU (docs/benchmarks.md). An engine closes
// an idle connection after its keep-alive timeout (uvicorn's, 5 s in vLLM and SGLang), well past this,
// so those closes are still caught. What a recent connection can miss is an engine that stops or
// dies within the second: the request written into it fails with the transport error the closed
// connection gives (the dispatcher retries a transport failure as a new attempt, as it would a
// refused dial), and the host's other pooled connections, likely closed by the same stop, are
// dropped with it (dropIdle).
const checkAfterIdle = time.Second

// Options tunes a Transport; the caller supplies every value (backend.HTTPClientOptions holds the
// defaults, so they are written once).
type Options struct {
	// DialTimeout bounds TCP connect; KeepAlive is the TCP keep-alive period.
	DialTimeout, KeepAlive time.Duration
	// MaxIdlePerHost bounds the pool per host:port.
	MaxIdlePerHost int
	// IdleTimeout closes pooled connections idle this long.
	IdleTimeout time.Duration
	// ResponseHeaderTimeout, when positive, bounds the wait for a response head.
	ResponseHeaderTimeout time.Duration
}

// New returns a Transport with no connections yet.
func New(o Options) *Transport {
	return &Transport{
		dialer:                &net.Dialer{Timeout: o.DialTimeout, KeepAlive: o.KeepAlive},
		maxIdlePerHost:        o.MaxIdlePerHost,
		idleTimeout:           o.IdleTimeout,
		responseHeaderTimeout: o.ResponseHeaderTimeout,
		readBufferSize:        8 << 10,
		checkAfter:            checkAfterIdle,
		idle:                  map[string][]*h1Conn{},
	}
}

// h1Conn is one connection to an engine.
type h1Conn struct {
	t      *Transport
	key    string
	c      net.Conn
	br     *bufio.Reader
	idleAt time.Time
	// idleTimer closes the connection when it has stayed in the pool for the idle timeout: without it,
	// connections to an engine that is gone (a pod deleted, a worker removed) would stay open until
	// the process ends. It is not moved at each use (a stop and a reset were two timer updates a leg,
	// about 0.8 µs of a PD request): when it fires, expire closes the connection if it has been idle
	// long enough and else sets it for the rest; one that a request holds is set again when pooled.
	idleTimer *time.Timer
	armed     bool // idleTimer is set; guarded by t.mu
}

var (
	errH1Scheme        = errors.New("h1: only http:// URLs")
	errH1BodyLength    = errors.New("h1: request body shorter than its ContentLength")
	errH1Closed        = errors.New("h1: connection closed before the response")
	errH1Malformed     = errors.New("h1: malformed HTTP response")
	errH1HeaderTooLong = errors.New("h1: response header too long")
	errH1InvalidHeader = errors.New("h1: invalid request header")
)

// maxH1ResponseHeader bounds a response's head.
const maxH1ResponseHeader = 1 << 20

// aLongTimeAgo is a deadline in the past: it wakes whatever is blocked on a connection.
var aLongTimeAgo = time.Unix(1, 0)

// h1BufPool holds request write buffers.
var h1BufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// RoundTrip sends req and returns the head of its answer; the body streams from the connection.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		closeReqBody(req)
		return nil, errH1Scheme
	}
	ctx := req.Context()
	bp := h1BufPool.Get().(*[]byte)
	wbuf, err := appendRequest((*bp)[:0], req)
	closeReqBody(req)
	defer func() {
		if cap(wbuf) <= 1<<20 {
			*bp = wbuf[:0]
			h1BufPool.Put(bp)
		}
	}()
	if err != nil {
		return nil, err
	}
	key := canonicalAddr(req.URL.Host)
	for attempt := 0; ; attempt++ {
		pc, reused, err := t.getConn(ctx, key, attempt > 0)
		if err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { _ = pc.c.SetDeadline(aLongTimeAgo) })
		n, err := pc.c.Write(wbuf)
		if err != nil {
			stop()
			pc.close()
			if n == 0 && reused && attempt == 0 && ctx.Err() == nil {
				continue // nothing of it reached the engine, which had closed the connection: once more, on a new one
			}
			return nil, ctxErr(ctx, err)
		}
		resp, err := pc.readResponse(req, stop)
		if err != nil {
			stop()
			pc.close()
			if reused && closedByEngine(err) {
				t.dropIdle(key)
			}
			return nil, ctxErr(ctx, err)
		}
		return resp, nil
	}
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// ctxErr reports the context's end rather than the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// appendRequest appends req's request line, headers and body to b.
func appendRequest(b []byte, req *http.Request) ([]byte, error) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, req.URL.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	if req.Header.Get("User-Agent") == "" {
		b = append(b, "User-Agent: Go-http-client/1.1\r\n"...)
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	if hasBody || (req.ContentLength == 0 && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch)) {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, max(req.ContentLength, 0), 10)
		b = append(b, "\r\n"...)
	}
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			continue // framing is this transport's
		}
		if !validHeaderName(k) {
			return b, fmt.Errorf("%w: name %q", errH1InvalidHeader, k)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return b, fmt.Errorf("%w: value of %q", errH1InvalidHeader, k)
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, "\r\n"...)
	if !hasBody {
		return b, nil
	}
	if req.ContentLength < 0 {
		return b, errors.New("h1: request body of unknown length")
	}
	n := int(req.ContentLength)
	b = grow(b, n)
	got, err := io.ReadFull(req.Body, b[len(b):len(b)+n])
	if err != nil || got != n {
		return b, errH1BodyLength
	}
	return b[:len(b)+n], nil
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n)
	copy(nb, b)
	return nb
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' || c == 0 {
			return false
		}
	}
	return true
}

// canonicalAddr is host:port, port 80 when absent.
func canonicalAddr(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}

// closedByEngine reports an answer that never came because the engine closed the connection.
func closedByEngine(err error) bool {
	return errors.Is(err, errH1Closed) || errors.Is(err, syscall.ECONNRESET)
}

// getConn takes the most recently pooled live connection to key, or dials one. A pooled connection
// is checked when it has been idle for checkAfterIdle, or always when check is set.
func (t *Transport) getConn(ctx context.Context, key string, check bool) (*h1Conn, bool, error) {
	now := time.Now()
	for {
		t.mu.Lock()
		l := t.idle[key]
		if len(l) == 0 {
			t.mu.Unlock()
			break
		}
		pc := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[key] = l[:len(l)-1]
		t.mu.Unlock() // its idle timer runs on: expire leaves a connection a request holds open
		idle := now.Sub(pc.idleAt)
		if idle > t.idleTimeout || ((check || idle >= t.checkAfter) && !connAlive(pc.c)) {
			pc.close()
			continue
		}
		return pc, true, nil
	}
	c, err := t.dialer.DialContext(ctx, "tcp", key)
	if err != nil {
		return nil, false, ctxErr(ctx, err)
	}
	return &h1Conn{t: t, key: key, c: c, br: bufio.NewReaderSize(c, t.readBufferSize)}, false, nil
}

// putIdle pools pc, dropping the oldest connection of its host beyond the bound, and one that has
// been idle too long.
func (t *Transport) putIdle(pc *h1Conn) {
	pc.idleAt = time.Now()
	var drop *h1Conn
	t.mu.Lock()
	l := append(t.idle[pc.key], pc)
	if len(l) > t.maxIdlePerHost || pc.idleAt.Sub(l[0].idleAt) > t.idleTimeout {
		drop = l[0]
		copy(l, l[1:])
		l[len(l)-1] = nil
		l = l[:len(l)-1]
	}
	t.idle[pc.key] = l
	switch {
	case pc.idleTimer == nil:
		pc.idleTimer = time.AfterFunc(t.idleTimeout, func() { t.expire(pc) })
	case !pc.armed:
		pc.idleTimer.Reset(t.idleTimeout)
	}
	pc.armed = true
	t.mu.Unlock()
	if drop != nil {
		drop.close()
	}
}

// expire is pc's idle timer: it closes pc if it is pooled and has been idle for the idle timeout, sets
// the timer for the rest if pc is pooled but was used since, and leaves a pc that a request holds
// open (putIdle sets the timer again).
func (t *Transport) expire(pc *h1Conn) {
	t.mu.Lock()
	pc.armed = false
	l := t.idle[pc.key]
	i := slices.Index(l, pc)
	if i >= 0 {
		if idle := time.Since(pc.idleAt); idle < t.idleTimeout {
			pc.armed = true
			pc.idleTimer.Reset(t.idleTimeout - idle)
			t.mu.Unlock()
			return
		}
		t.idle[pc.key] = slices.Delete(l, i, i+1)
		if len(t.idle[pc.key]) == 0 {
			delete(t.idle, pc.key)
		}
	}
	t.mu.Unlock()
	if i >= 0 {
		pc.close()
	}
}

// dropIdle closes key's pooled connections: one of them was found closed by its engine without a
// check, and an engine that stops closes them all.
func (t *Transport) dropIdle(key string) {
	t.mu.Lock()
	l := t.idle[key]
	delete(t.idle, key)
	t.mu.Unlock()
	for _, pc := range l {
		pc.close()
	}
}

// CloseIdleConnections closes every pooled connection.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	all := t.idle
	t.idle = map[string][]*h1Conn{}
	t.mu.Unlock()
	for _, l := range all {
		for _, pc := range l {
			pc.close()
		}
	}
}

func (pc *h1Conn) close() {
	if pc.idleTimer != nil {
		pc.idleTimer.Stop()
	}
	_ = pc.c.Close()
}

// IdleConns is the number of pooled connections, for tests and diagnostics.
func (t *Transport) IdleConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range t.idle {
		n += len(l)
	}
	return n
}
