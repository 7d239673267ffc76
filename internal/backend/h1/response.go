package h1

// Reading an engine's answer off the connection: the head, 1xx answers skipped, and the body with
// its framing (length, chunked, until close) and its return to the pool.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// readResponse reads the answer's head (skipping 1xx answers) and sets up its body.
func (pc *h1Conn) readResponse(req *http.Request, stop func() bool) (*http.Response, error) {
	t := pc.t
	if t.responseHeaderTimeout > 0 {
		_ = pc.c.SetReadDeadline(time.Now().Add(t.responseHeaderTimeout))
	}
	var resp *http.Response
	for {
		var err error
		resp, err = readResponseHead(pc.br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errH1Closed
			}
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if t.responseHeaderTimeout > 0 {
		_ = pc.c.SetReadDeadline(time.Time{})
		if req.Context().Err() != nil {
			// The request ended while its head was read: clearing the deadline may have undone the
			// past deadline its cancellation set, and the body's reads would then not be interrupted.
			_ = pc.c.SetDeadline(aLongTimeAgo)
		}
	}
	resp.Request = req
	reusable := !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols
	b := &h1Body{pc: pc, ctx: req.Context(), stop: stop, reusable: reusable}
	switch {
	case req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		resp.StatusCode == http.StatusSwitchingProtocols:
		resp.ContentLength = 0
		resp.Body = http.NoBody
		b.finish(reusable)
		return resp, nil
	case len(resp.TransferEncoding) > 0:
		b.chunked = true
		b.r = httputil.NewChunkedReader(pc.br)
		resp.ContentLength = -1
	case resp.ContentLength >= 0:
		b.remaining = resp.ContentLength
		if b.remaining == 0 {
			resp.Body = http.NoBody
			b.finish(reusable)
			return resp, nil
		}
	default: // delimited by the connection's end
		b.reusable = false
		b.r = pc.br
	}
	resp.Body = b
	return resp, nil
}

// readResponseHead parses a status line and header block.
func readResponseHead(br *bufio.Reader) (*http.Response, error) {
	line, err := readLine(br)
	if err != nil {
		return nil, err
	}
	proto, rest, ok := strings.Cut(line, " ")
	if !ok {
		return nil, fmt.Errorf("%w: status line %q", errH1Malformed, line)
	}
	major, minor, ok := http.ParseHTTPVersion(proto)
	if !ok || major != 1 {
		return nil, fmt.Errorf("%w: version %q", errH1Malformed, proto)
	}
	code := rest
	if i := strings.IndexByte(rest, ' '); i >= 0 {
		code = rest[:i]
	}
	status, err := strconv.Atoi(code)
	if err != nil || len(code) != 3 || status < 100 {
		return nil, fmt.Errorf("%w: status %q", errH1Malformed, rest)
	}
	resp := &http.Response{Status: rest, StatusCode: status, Proto: proto, ProtoMajor: major, ProtoMinor: minor,
		ContentLength: -1}
	var fields headFields
	var scratch [512]byte
	vals, err := fields.read(br, len(line), scratch[:0])
	if err != nil {
		return nil, err
	}
	resp.Header = fields.header(string(vals))
	return resp, finishHead(resp)
}

// headFields gathers a head's header lines: the values' bytes in one buffer, so that the header map
// costs one string and one []string for all its values rather than two allocations per line (most
// of an engine answer's head, read twice per PD request). It and the values' buffer stay on the
// stack for a usual head.
type headFields struct {
	keys [16]string
	ends [16]int // end of each value in the values' buffer
	n    int
	more []headField // lines after the 16th
}

type headField struct {
	key string
	end int
}

// read reads header lines up to the blank line, appending their values to vals; size is the status
// line's length (the head's bound counts it).
func (f *headFields) read(br *bufio.Reader, size int, vals []byte) ([]byte, error) {
	for {
		l, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, errH1HeaderTooLong
			}
			return nil, err
		}
		size += len(l)
		if size > maxH1ResponseHeader {
			return nil, errH1HeaderTooLong
		}
		l = bytes.TrimRight(l, "\r\n")
		if len(l) == 0 {
			return vals, nil
		}
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok || len(k) == 0 || bytes.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%w: header line %q", errH1Malformed, l)
		}
		vals = append(vals, bytes.TrimSpace(v)...)
		if f.n < len(f.keys) {
			f.keys[f.n], f.ends[f.n] = headerKey(k), len(vals)
			f.n++
		} else {
			f.more = append(f.more, headField{headerKey(k), len(vals)})
		}
	}
}

// header builds the header map: repeated keys keep their values in order, and each key's slice is
// capped so that a caller appending to one never writes over another's.
// all is the values' buffer as one string.
func (f *headFields) header(all string) http.Header {
	total := f.n + len(f.more)
	h := make(http.Header, total)
	if total == 0 {
		return h
	}
	strs := make([]string, total)
	start := 0
	for i := range total {
		key, end := "", 0
		if i < f.n {
			key, end = f.keys[i], f.ends[i]
		} else {
			key, end = f.more[i-f.n].key, f.more[i-f.n].end
		}
		strs[i] = all[start:end]
		start = end
		if vs, ok := h[key]; ok {
			h[key] = append(vs[:len(vs):len(vs)], strs[i])
		} else {
			h[key] = strs[i : i+1 : i+1]
		}
	}
	return h
}

// readLine reads one line without its line end (at most the buffer's size).
func readLine(br *bufio.Reader) (string, error) {
	l, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", errH1HeaderTooLong
		}
		return "", err
	}
	return string(bytes.TrimRight(l, "\r\n")), nil
}

// finishHead reads framing from the headers: chunked encoding, the length, whether to close.
func finishHead(resp *http.Response) error {
	h := resp.Header
	if te := h["Transfer-Encoding"]; len(te) > 0 {
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			return fmt.Errorf("%w: transfer encoding %q", errH1Malformed, te)
		}
		resp.TransferEncoding = []string{"chunked"}
		delete(h, "Content-Length")
	} else if cl := h["Content-Length"]; len(cl) > 0 {
		for _, v := range cl[1:] {
			if v != cl[0] {
				return fmt.Errorf("%w: conflicting Content-Length %q", errH1Malformed, cl)
			}
		}
		n, err := strconv.ParseInt(cl[0], 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: Content-Length %q", errH1Malformed, cl[0])
		}
		resp.ContentLength = n
	}
	conn := strings.ToLower(strings.Join(h["Connection"], ","))
	resp.Close = strings.Contains(conn, "close") || (resp.ProtoMinor == 0 && !strings.Contains(conn, "keep-alive"))
	return nil
}

// commonHeaders are engines' usual response header names, canonical, so parsing them allocates no key.
var commonHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Content-Type", "Content-Length", "Date", "Server", "Transfer-Encoding", "Connection",
		"Retry-After", "X-Request-Id", "Keep-Alive", "Cache-Control", "Vary", "Content-Encoding", "Traceparent",
		"Tracestate", "X-Accel-Buffering", "Access-Control-Allow-Origin", "Grpc-Status", "Grpc-Message", "Trailer"} {
		m[k] = k
		m[strings.ToLower(k)] = k
	}
	return m
}()

func headerKey(k []byte) string {
	if s, ok := commonHeaders[string(k)]; ok {
		return s
	}
	return textproto.CanonicalMIMEHeaderKey(string(k))
}

// h1Body streams an answer's body from its connection and gives the connection back (or closes it)
// when done.
type h1Body struct {
	pc        *h1Conn
	ctx       context.Context
	stop      func() bool
	r         io.Reader // chunked or connection-delimited bodies; nil for a known length
	remaining int64
	chunked   bool
	reusable  bool
	done      bool
	err       error
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	var n int
	var err error
	if b.r == nil {
		if int64(len(p)) > b.remaining {
			p = p[:b.remaining]
		}
		n, err = b.pc.br.Read(p)
		b.remaining -= int64(n)
		if b.remaining == 0 {
			b.finish(b.reusable)
			return n, io.EOF
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
	} else {
		n, err = b.r.Read(p)
		if errors.Is(err, io.EOF) {
			if b.chunked && b.readTrailer() != nil {
				b.finish(false)
				return n, io.EOF
			}
			b.finish(b.reusable && b.chunked)
			return n, io.EOF
		}
	}
	if err != nil {
		err = ctxErr(b.ctx, err)
		b.err = err
		b.finish(false)
	}
	return n, err
}

// readTrailer consumes a chunked body's trailer section (discarded) and its final blank line.
func (b *h1Body) readTrailer() error {
	for size := 0; ; {
		l, err := b.pc.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if size += len(l); size > maxH1ResponseHeader {
			return errH1HeaderTooLong
		}
		if len(bytes.TrimRight(l, "\r\n")) == 0 {
			return nil
		}
	}
}

// Close ends the body; a body not read to its end costs its connection.
func (b *h1Body) Close() error {
	if !b.done {
		b.err = errors.New("h1: read on closed body")
		b.finish(false)
	}
	return nil
}

// finish gives the connection back when it can serve another request, else closes it.
func (b *h1Body) finish(reuse bool) {
	b.done = true
	stopped := b.stop()
	if reuse && stopped && b.ctx.Err() == nil && b.pc.br.Buffered() == 0 {
		b.pc.t.putIdle(b.pc)
		return
	}
	b.pc.close()
}
