package server

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/apierror"
)

// net/http answers a request it cannot parse (headers too large, a malformed request line or header,
// an unsupported HTTP version or transfer coding) itself, before any handler runs, by writing one
// plain-text response straight to the connection and closing it
// ($GOROOT/src/net/http/server.go, conn.serve: `const errorHeaders`). Every other answer of the gateway
// is OpenAI-shaped JSON, so the connection below recognises exactly that write and replaces it with
// the same answer in JSON.
//
// The write is recognised by its whole form, not a prefix: one Write holding
// "HTTP/1.1 <status line>" + errorHeaders + a body that repeats the status line. A response written
// through a handler never has that form (net/http writes its headers sorted, Connection before
// Content-Type, and always with a Date), so nothing else is touched.
const (
	netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	netHTTPStatusPrefix = "HTTP/1.1 "
)

// h2Preface is what an h2c (prior knowledge) client sends first. With h2c on, net/http peeks at the
// first len("PRI * HTTP/2.0") bytes of a connection before it parses HTTP/1, so a shorter malformed
// request ("hello\r\n\r\n") would wait for the header timeout. The connection answers it at once.
const h2Preface = "PRI * HTTP/2.0"

// wireErrConn rewrites net/http's own error answers as JSON and ends a short malformed first request
// at once. Its normal path costs a flag test per Read (after the connection's first bytes) and a
// prefix test per Write (BenchmarkWireErrConn). Read and Write touch disjoint fields: net/http reads in
// the background while a handler writes.
type wireErrConn struct {
	net.Conn
	maxHeaderBytes int

	// judged: the first bytes have been seen; head holds them until then.
	judged bool
	head   []byte
	// eof ends the stream once: the malformed line is already buffered inside net/http.
	eof bool
}

func newWireErrConn(c net.Conn, maxHeaderBytes int) *wireErrConn {
	return &wireErrConn{Conn: c, maxHeaderBytes: maxHeaderBytes}
}

func (c *wireErrConn) Read(p []byte) (int, error) {
	if c.judged {
		return c.Conn.Read(p)
	}
	if c.eof {
		c.judged = true
		return 0, io.EOF
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.judge(p[:n])
	}
	return n, err
}

// judge looks at the connection's first bytes while net/http's h2c peek could hold them: fewer than
// len(h2Preface). A complete first line that can be no request line ends the stream after these bytes,
// so that net/http parses what it has and answers 400 at once. A valid request is never short enough
// to be judged here: the shortest ("A / HTTP/1.1\n\n") already fills the peek.
func (c *wireErrConn) judge(b []byte) {
	c.head = append(c.head, b...)
	if len(c.head) >= len(h2Preface) {
		c.judged, c.head = true, nil
		return
	}
	if strings.HasPrefix(h2Preface, string(c.head)) {
		return // may still be h2c
	}
	line, _, complete := bytes.Cut(c.head, []byte("\n"))
	if !complete {
		return
	}
	if looksLikeRequestLine(bytes.TrimSuffix(line, []byte("\r"))) {
		c.judged = true
	} else {
		c.eof = true
	}
	c.head = nil
}

// looksLikeRequestLine is net/http's split of a request line (method SP target SP HTTP/x.y); net/http
// judges the parts itself, this only tells a line that can never be one.
func looksLikeRequestLine(line []byte) bool {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(rest, []byte(" "))
	return ok1 && ok2 && len(method) > 0 && len(target) > 0 && bytes.HasPrefix(proto, []byte("HTTP/"))
}

func (c *wireErrConn) Write(p []byte) (int, error) {
	// net/http's own answers are all 4xx or 5xx; a 2xx response pays for these three tests only.
	if len(p) < len(netHTTPStatusPrefix)+len(netHTTPErrorHeaders) || (p[9] != '4' && p[9] != '5') ||
		string(p[:len(netHTTPStatusPrefix)]) != netHTTPStatusPrefix {
		return c.Conn.Write(p)
	}
	e := c.netHTTPError(p)
	if e == nil {
		return c.Conn.Write(p)
	}
	body := append(e.JSON(), '\n')
	resp := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		e.Status, http.StatusText(e.Status), len(body))
	if _, err := c.Conn.Write(append(resp, body...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite half-closes the connection as net/http does after a 431 (so the client reads the answer
// before the reset); without it net/http would skip the half-close.
func (c *wireErrConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// netHTTPError classifies p if it is one of net/http's own error answers, else returns nil.
func (c *wireErrConn) netHTTPError(p []byte) *apierror.Error {
	rest := p[len(netHTTPStatusPrefix):]
	i := bytes.IndexByte(rest, '\r')
	if i < 4 || rest[3] != ' ' || len(rest)-i < len(netHTTPErrorHeaders) || string(rest[i:i+len(netHTTPErrorHeaders)]) != netHTTPErrorHeaders {
		return nil
	}
	status, body := string(rest[:i]), string(rest[i+len(netHTTPErrorHeaders):])
	code, err := strconv.Atoi(status[:3])
	if err != nil {
		return nil
	}
	text, reason := status[4:], http.StatusText(code)
	detail, hasDetail := strings.CutPrefix(text, reason+": ")
	switch {
	case code == http.StatusNotImplemented && text == reason && body == "Unsupported transfer encoding":
		return apierror.New(code, apierror.CodeUnsupportedTransferEncoding,
			"the request's Transfer-Encoding is not supported (only chunked is)", nil)
	case body != status:
		return nil // not net/http's form: its body repeats the status line
	case code == http.StatusRequestHeaderFieldsTooLarge && text == reason:
		return apierror.New(code, apierror.CodeHeadersTooLarge,
			"the request line and headers exceed the gateway's limit of "+strconv.Itoa(c.maxHeaderBytes)+" bytes", nil)
	case code == http.StatusBadRequest && text == reason:
		return apierror.New(code, apierror.CodeMalformedRequest,
			"malformed HTTP request: the request line or a header could not be parsed", nil)
	case code == http.StatusHTTPVersionNotSupported && hasDetail:
		return apierror.New(code, apierror.CodeHTTPVersionNotSupported,
			"HTTP version not supported: the gateway speaks HTTP/1.0, HTTP/1.1 and HTTP/2", nil)
	case hasDetail:
		// net/http's statusError names the fault in plain words ("missing required Host header").
		return apierror.New(code, apierror.CodeMalformedRequest, "malformed HTTP request: "+detail, nil)
	}
	return nil
}

// wireErrListener wraps each accepted plaintext connection. TLS connections keep net/http's own answers:
// net/http needs the *tls.Conn itself for ALPN (h2), so nothing may sit between them.
type wireErrListener struct {
	net.Listener
	maxHeaderBytes int
}

func (l wireErrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newWireErrConn(c, l.maxHeaderBytes), nil
}
