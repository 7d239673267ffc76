package enginerpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// genCaller makes the engines' Generate calls itself, on the HTTP/2 client connect uses for their other
// calls. A Generate is one request message and a stream of answers, so the request's body is known
// whole: it is sent from the caller's goroutine, and the answers' envelopes are read in place into one
// buffer and decoded by hand (wire.go). Connect started a goroutine and a pipe for every call (whose
// stack grew on the way down net/http's HTTP/2 client) and made about 40 allocations a call; that was
// a fifth of gRPC mode's extra CPU (docs/benchmarks.md). Its errors are connect's, with the codes
// connect gives the same failures, since the transport reads them (statusForCode, migrationReason): an
// engine's grpc-status is a wire error; a failure of the connection or the stream is a coded error that
// is not one.
type genCaller struct {
	hc  connect.HTTPClient
	url string // the engine's base URL and the Generate procedure
	l   *wireLayout
	// h2 is the engine's connections for the client of our own (h2c.go) when it is reached in
	// cleartext; nil (grpcs://) uses hc.
	h2   *h2Pool
	path string
}

// newGenCaller is the Generate caller of the engine at base (http:// for grpc://, https:// for
// grpcs://): cleartext engines get the client of our own, TLS ones net/http's.
func newGenCaller(hc connect.HTTPClient, base, procedure string, l *wireLayout) genCaller {
	g := genCaller{hc: hc, url: base + procedure, l: l, path: procedure}
	if addr, ok := strings.CutPrefix(base, "http://"); ok {
		g.h2 = newH2Pool(addr)
	}
	return g
}

// closeIdle closes the idle connections of the client of our own (shut: for good).
func (g genCaller) closeIdle(shut bool) {
	if g.h2 != nil {
		g.h2.closeIdle(shut)
	}
}

// maxMessage bounds one answer message: an engine's Complete of a long generation with logprobs is a
// few MiB at most.
const maxMessage = 64 << 20

var genUserAgent = "sluice-grpc (" + runtime.Version() + ")"

// requestSizeHint is room for a GenerateRequest's message in one allocation: its prompt's text and ids
// (up to 3 bytes a varint id, ids below 2^21) are most of it, and growing the buffer by doubling from a
// small guess copied them twice.
func requestSizeHint(sg *sglangpb.GenerateRequest, vl *vllmpb.GenerateRequest) int {
	var t interface {
		GetOriginalText() string
		GetInputIds() []uint32
	}
	switch {
	case sg != nil:
		t = sg.GetTokenized()
	case vl != nil:
		t = vl.GetTokenized()
	}
	if t == nil {
		return 256
	}
	return 256 + len(t.GetOriginalText()) + 3*len(t.GetInputIds())
}

// call sends msg and returns the stream once the engine's response headers have come.
func (g genCaller) call(ctx context.Context, msg proto.Message) (genStream, error) {
	sg, isSGLang := msg.(*sglangpb.GenerateRequest)
	vl, isVLLM := msg.(*vllmpb.GenerateRequest)
	b := make([]byte, 5, requestSizeHint(sg, vl))
	switch {
	case isSGLang && sglangRequestValid(sg):
		b = appendSGLangRequest(b, sg)
	case isVLLM && vllmRequestValid(vl):
		b = appendVLLMRequest(b, vl)
	default: // another message, or strings proto3 refuses: proto.Marshal says which
		var err error
		if b, err = (proto.MarshalOptions{}).MarshalAppend(b, msg); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("marshal request: %w", err))
		}
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	if g.h2 != nil {
		return g.callH2(ctx, b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(b))
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	// Lower-case names: net/http's HTTP/2 client lower-cases any other name it does not know, a copy each.
	req.Header = http.Header{
		"content-type":    {"application/grpc"},
		"te":              {"trailers"},
		"user-agent":      {genUserAgent},
		"accept-encoding": {"identity"}, // gRPC compresses per message, and nothing is offered
	}
	if dl, ok := ctx.Deadline(); ok {
		req.Header["grpc-timeout"] = []string{grpcTimeout(time.Until(dl))}
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // not a clean end: the request never got an answer
		}
		return nil, coded(ctx, err, connect.CodeUnavailable)
	}
	if err := validResponse(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return &genStreamRaw{ctx: ctx, resp: resp, l: g.l}, nil
}

// validResponse checks a Generate's response head as a gRPC client must (gRPC's HTTP mapping).
func validResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK {
		return connect.NewError(httpToCode(resp.StatusCode), fmt.Errorf("HTTP status %v", resp.Status))
	}
	switch ct := resp.Header.Get("Content-Type"); {
	case ct == "application/grpc" || ct == "application/grpc+proto":
	case strings.HasPrefix(ct, "application/grpc"):
		return connect.NewError(connect.CodeInternal, fmt.Errorf("invalid content-type: %q; expecting %q", ct, "application/grpc"))
	default:
		return connect.NewError(connect.CodeUnknown, fmt.Errorf("invalid content-type: %q; expecting %q", ct, "application/grpc"))
	}
	if enc := resp.Header.Get("Grpc-Encoding"); enc != "" && enc != "identity" {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("unknown encoding %q: no encodings are accepted", enc))
	}
	return nil
}

// genStreamRaw is one Generate's answers.
type genStreamRaw struct {
	ctx  context.Context
	resp *http.Response
	l    *wireLayout
	hdr  [5]byte
	buf  []byte // the last message; decoding copies what it keeps
	ev   event
	read bool // a message was read
	err  error
	done bool
}

func (s *genStreamRaw) event() event { return s.ev }

func (s *genStreamRaw) Err() error { return s.err }

// Close ends the call: before its end, the engine sees the stream reset.
func (s *genStreamRaw) Close() error { return s.resp.Body.Close() }

// Receive reads the next answer; false at the end of the stream (Err then says why, nil for a clean
// end with grpc-status 0).
func (s *genStreamRaw) Receive() bool {
	if s.done {
		return false
	}
	if err := s.ctx.Err(); err != nil {
		return s.fail(coded(s.ctx, err, connect.CodeCanceled))
	}
	if _, err := io.ReadFull(s.resp.Body, s.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return s.fail(s.status())
		}
		return s.fail(coded(s.ctx, err, connect.CodeInternal, "protocol error: incomplete envelope"))
	}
	if s.hdr[0] != 0 { // compressed (nothing was offered) or a gRPC-Web trailer
		return s.fail(connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: invalid envelope flags %d", s.hdr[0])))
	}
	n := binary.BigEndian.Uint32(s.hdr[1:])
	if n > maxMessage {
		return s.fail(connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("message size %d is larger than configured max %d", n, maxMessage)))
	}
	if cap(s.buf) < int(n) {
		s.buf = make([]byte, n)
	}
	s.buf = s.buf[:n]
	if _, err := io.ReadFull(s.resp.Body, s.buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return s.fail(connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: promised %d bytes in enveloped message: %w", n, err)))
		}
		return s.fail(coded(s.ctx, err, connect.CodeUnknown, "read enveloped message"))
	}
	s.read = true
	s.ev = event{ids: s.ev.ids[:0]}
	if err := s.l.decode(s.buf, &s.ev); err != nil {
		return s.fail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unmarshal message: %w", err)))
	}
	return true
}

func (s *genStreamRaw) fail(err error) bool {
	s.err, s.done = err, true
	return false
}

// status is the stream's end by its grpc-status: in the trailers, or in the headers of a trailers-only
// answer (no message, no trailers). nil for 0.
func (s *genStreamRaw) status() error {
	t := s.resp.Trailer
	if !s.read && len(t) == 0 {
		t = s.resp.Header
	}
	code := t.Get("Grpc-Status")
	switch code {
	case "0":
		return nil
	case "":
		c := connect.CodeUnknown
		if len(t) == 0 {
			c = connect.CodeInternal
		}
		return connect.NewError(c, errors.New("protocol error: no Grpc-Status trailer: unexpected EOF"))
	}
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return connect.NewError(connect.CodeUnknown, fmt.Errorf("protocol error: invalid error code %q", code))
	}
	msg, err := url.PathUnescape(t.Get("Grpc-Message"))
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: invalid error message %q", t.Get("Grpc-Message")))
	}
	return connect.NewWireError(connect.Code(n), errors.New(msg))
}

// coded gives a failure of the call's connection or stream the code connect gives it: the context's end,
// a connection the engine's host reset, an HTTP/2 stream reset by its code, else fallback (prefixed by
// what was being done, when given).
func coded(ctx context.Context, err error, fallback connect.Code, doing ...string) error {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET),
		err.Error() == "client disconnected", err.Error() == "http2: stream closed":
		return connect.NewError(connect.CodeCanceled, err)
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	if c, ok := rstCode(ctx, err); ok {
		return connect.NewError(c, err)
	}
	if len(doing) > 0 {
		err = fmt.Errorf("%s: %w", doing[0], err)
	}
	return connect.NewError(fallback, err)
}

// rstCode reads an HTTP/2 RST_STREAM the engine sent ("stream error: stream ID 3; CANCEL; received from
// peer") as gRPC's HTTP/2 mapping does.
func rstCode(ctx context.Context, err error) (connect.Code, bool) {
	if ue := new(url.Error); errors.As(err, &ue) {
		err = ue.Unwrap()
	}
	msg, ok := strings.CutPrefix(err.Error(), "stream error: ")
	if !ok {
		return 0, false
	}
	if msg, ok = strings.CutSuffix(msg, "; received from peer"); !ok {
		return 0, false
	}
	i := strings.LastIndex(msg, ";")
	if i < 0 {
		return 0, false
	}
	switch strings.TrimSpace(msg[i+1:]) {
	case "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
		"SETTINGS_TIMEOUT", "FRAME_SIZE_ERROR", "COMPRESSION_ERROR", "CONNECT_ERROR":
		return connect.CodeInternal, true
	case "REFUSED_STREAM":
		return connect.CodeUnavailable, true
	case "CANCEL":
		if dl, ok := ctx.Deadline(); ok && time.Now().After(dl) {
			return connect.CodeDeadlineExceeded, true
		}
		return connect.CodeCanceled, true
	case "ENHANCE_YOUR_CALM":
		return connect.CodeResourceExhausted, true
	case "INADEQUATE_SECURITY":
		return connect.CodePermissionDenied, true
	}
	return 0, false
}

// httpToCode is gRPC's mapping of a non-200 HTTP status (doc/http-grpc-status-mapping.md).
func httpToCode(status int) connect.Code {
	switch status {
	case 400:
		return connect.CodeInternal
	case 401:
		return connect.CodeUnauthenticated
	case 403:
		return connect.CodePermissionDenied
	case 404:
		return connect.CodeUnimplemented
	case 429, 502, 503, 504:
		return connect.CodeUnavailable
	}
	return connect.CodeUnknown
}

// grpcTimeout encodes a timeout as grpc-timeout: at most 8 digits and the finest unit they allow.
func grpcTimeout(d time.Duration) string {
	if d <= 0 {
		return "0n"
	}
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if v := d / u.unit; v <= 99999999 {
			return strconv.FormatInt(int64(v), 10) + u.name
		}
	}
	return strconv.FormatInt(min(int64(d/time.Hour), 99999999), 10) + "H"
}

// callH2 sends the request b on the client of our own and reads the response's headers.
func (g genCaller) callH2(ctx context.Context, b []byte) (genStream, error) {
	hdrs := []h2Header{{"content-type", "application/grpc"}, {"te", "trailers"}, {"user-agent", genUserAgent}}
	if dl, ok := ctx.Deadline(); ok {
		hdrs = append(hdrs, h2Header{"grpc-timeout", grpcTimeout(time.Until(dl))})
	}
	s, err := h2Call(ctx, g.h2, g.path, hdrs, b)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, coded(ctx, err, connect.CodeUnavailable)
	}
	if err := s.readHead(); err != nil {
		s.done()
		return nil, err
	}
	if err := validH2Head(&s.header); err != nil {
		s.done()
		return nil, err
	}
	return &h2GenStream{s: s, l: g.l}, nil
}

// validH2Head is validResponse for the client of our own.
func validH2Head(h *h2Fields) error {
	if st := h.status; st != "200" {
		code, _ := strconv.Atoi(st)
		return connect.NewError(httpToCode(code), fmt.Errorf("HTTP status %s", st))
	}
	switch ct := h.contentType; {
	case ct == "application/grpc" || ct == "application/grpc+proto":
	case strings.HasPrefix(ct, "application/grpc"):
		return connect.NewError(connect.CodeInternal, fmt.Errorf("invalid content-type: %q; expecting %q", ct, "application/grpc"))
	default:
		return connect.NewError(connect.CodeUnknown, fmt.Errorf("invalid content-type: %q; expecting %q", ct, "application/grpc"))
	}
	if enc := h.encoding; enc != "" && enc != "identity" {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("unknown encoding %q: no encodings are accepted", enc))
	}
	return nil
}

// h2GenStream is a Generate's answers on the client of our own.
type h2GenStream struct {
	s    *h2Stream
	l    *wireLayout
	ev   event
	read bool
	err  error
	done bool
}

func (g *h2GenStream) event() event { return g.ev }

func (g *h2GenStream) Err() error { return g.err }

func (g *h2GenStream) Close() error {
	g.s.done()
	return nil
}

// ready says whether Receive would return without waiting for the engine.
func (g *h2GenStream) ready() bool { return g.done || g.s.ready() }

func (g *h2GenStream) Receive() bool {
	if g.done {
		return false
	}
	if err := g.s.ctx.Err(); err != nil {
		return g.fail(coded(g.s.ctx, err, connect.CodeCanceled))
	}
	msg, err := g.s.message()
	if errors.Is(err, io.EOF) {
		fields := &g.s.trailer
		if !g.read && !fields.got { // trailers-only
			fields = &g.s.header
		}
		return g.fail(h2Status(fields))
	}
	if err != nil {
		return g.fail(err)
	}
	g.read = true
	g.ev = event{ids: g.ev.ids[:0]}
	if err := g.l.decode(msg, &g.ev); err != nil {
		return g.fail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unmarshal message: %w", err)))
	}
	return true
}

func (g *h2GenStream) fail(err error) bool {
	g.err, g.done = err, true
	return false
}
