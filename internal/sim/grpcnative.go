package sim

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The engines serve gRPC on a native HTTP/2 transport (grpcio's C core; TensorRT-LLM's and vLLM's
// servicers run on it too), not on a general-purpose HTTP server. net/http's HTTP/2 server hands every
// frame between a connection's goroutine and the handler's: measured with grpc-go's health client, a
// unary call took 136-165 µs against connect-go on net/http and 50-54 µs against grpc-go's own server
// (docs/benchmarks.md, issue #35). So an engine-only simulator (Config.EngineGRPCOnly) serves gRPC
// on grpc-go's transport: connections that open with HTTP/2's client preface go to a grpc.Server,
// the rest (the HTTP API, /metrics, /sim/faults) to net/http. The engines' services stay the
// connect-go handlers every other mode runs: one generic bridge runs them for each grpc-go stream,
// messages in and out as raw bytes, so no service is written twice.

// sniffTimeout bounds how long a new connection may take to show its first bytes.
const sniffTimeout = 10 * time.Second

var h2ClientPreface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// portMux splits one listener's connections by their first bytes: HTTP/2's client preface to h2, the
// rest to h1. Closing either side's listener closes the port; it ends when the port is closed, after
// every connection it was still reading has been closed.
type portMux struct {
	ln     net.Listener
	h1, h2 *muxListener
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup // the connections being sniffed

	mu       sync.Mutex
	sniffing map[net.Conn]struct{}
}

func newPortMux(ln net.Listener) *portMux {
	m := &portMux{ln: ln, done: make(chan struct{}), sniffing: make(map[net.Conn]struct{})}
	m.h1 = &muxListener{m: m, conns: make(chan net.Conn)}
	m.h2 = &muxListener{m: m, conns: make(chan net.Conn)}
	return m
}

// run accepts until the listener is closed, then waits for the connections it is still sniffing.
func (m *portMux) run() {
	defer m.wg.Wait()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			m.close()
			return
		}
		m.wg.Add(1)
		go m.route(c)
	}
}

func (m *portMux) close() {
	m.once.Do(func() {
		close(m.done)
		_ = m.ln.Close()
		m.mu.Lock()
		for c := range m.sniffing {
			_ = c.Close()
		}
		m.mu.Unlock()
	})
}

// route reads as much of the preface as the connection's first bytes match, then hands it on.
func (m *portMux) route(c net.Conn) {
	defer m.wg.Done()
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		_ = c.Close()
		return
	default:
	}
	m.sniffing[c] = struct{}{}
	m.mu.Unlock()

	buf := make([]byte, len(h2ClientPreface))
	n := 0
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	for n < len(buf) && bytes.Equal(buf[:n], h2ClientPreface[:n]) {
		k, err := c.Read(buf[n:])
		n += k
		if err != nil {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	m.mu.Lock()
	delete(m.sniffing, c)
	m.mu.Unlock()
	if n == 0 {
		_ = c.Close()
		return
	}
	to := m.h1
	if n == len(buf) && bytes.Equal(buf, h2ClientPreface) {
		to = m.h2
	}
	select {
	case to.conns <- &prefixConn{Conn: c, prefix: buf[:n]}:
	case <-m.done:
		_ = c.Close()
	}
}

// muxListener is one side of a portMux.
type muxListener struct {
	m     *portMux
	conns chan net.Conn
}

func (l *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

func (l *muxListener) Close() error   { l.m.close(); return nil }
func (l *muxListener) Addr() net.Addr { return l.m.ln.Addr() }

// prefixConn gives back the bytes the mux read before the connection's own.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// newGRPCServer returns a grpc.Server that runs h (the engine's routes) for every call. life ends
// the calls with the incarnation, as net/http's BaseContext does for the HTTP side.
func newGRPCServer(h http.Handler, life context.Context, logger *slog.Logger) *grpc.Server {
	b := &grpcBridge{h: h, life: life, logger: logger}
	return grpc.NewServer(
		grpc.UnknownServiceHandler(b.serve),
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.MaxRecvMsgSize(256<<20),
		// The handshake after the preface: Stop (a crash, under the engine's lock) waits for it.
		grpc.ConnectionTimeout(sniffTimeout),
		// Static windows turn grpc-go's BDP estimation off. It pings whenever data arrives and no ping is
		// out, which is once per call on a connection that carries one call at a time (the gateway's
		// Generate client): a PING and its ACK more per call than an engine costs. grpcio's estimator
		// (src/core/lib/transport/bdp_estimator.cc) pings 100 ms apart at first and further apart as
		// its estimate settles; these windows are what it settles on for small messages, and more.
		grpc.InitialWindowSize(4<<20),
		grpc.InitialConnWindowSize(16<<20),
	)
}

// rawCodec passes messages through as bytes: the connect handlers behind the bridge decode them.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	// A copy: the transport writes the message after SendMsg returns, and the bridge reuses its buffer.
	return mem.BufferSlice{mem.Copy(*v.(*[]byte), mem.DefaultBufferPool())}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// grpcBridge runs an http.Handler that serves gRPC (connect-go's handlers) for grpc-go streams: the
// request's messages become an enveloped body, the written envelopes become messages, and the
// grpc-status trailers (or the HTTP status of a non-gRPC answer) become the call's status.
type grpcBridge struct {
	h      http.Handler
	life   context.Context
	logger *slog.Logger
}

func (b *grpcBridge) serve(_ any, ss grpc.ServerStream) (err error) {
	method, _ := grpc.MethodFromServerStream(ss)
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	defer context.AfterFunc(b.life, cancel)()
	req := bridgeRequest(ctx, method)
	req.Body = &streamBody{ss: ss}
	w := &streamWriter{ss: ss, header: make(http.Header, 4), status: 0}
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler { //nolint:errorlint // the sentinel is panicked, not wrapped
				b.logger.Error("sim: gRPC handler panicked", "method", method, "panic", p)
			}
			// A handler aborts to break the call off as a crashing engine would: the client sees the
			// stream fail INTERNAL, as it does when net/http resets it.
			err = status.Error(codes.Internal, "stream reset by the engine")
		}
	}()
	b.h.ServeHTTP(w, req)
	return w.finish()
}

func bridgeRequest(ctx context.Context, method string) *http.Request {
	md, _ := metadata.FromIncomingContext(ctx)
	req := &http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Path: method},
		RequestURI:    method,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        make(http.Header, len(md)+1),
		ContentLength: -1,
	}
	for k, vs := range md {
		switch {
		case k == ":authority":
			if len(vs) > 0 {
				req.Host = vs[0]
			}
		case strings.HasPrefix(k, ":"), k == "grpc-accept-encoding", k == "grpc-encoding":
			// grpc-go decompressed the request; the answer is left to it to compress.
		case strings.HasSuffix(k, "-bin"):
			enc := make([]string, len(vs))
			for i, v := range vs {
				enc[i] = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			req.Header[http.CanonicalHeaderKey(k)] = enc
		default:
			req.Header[http.CanonicalHeaderKey(k)] = vs
		}
	}
	req.Header["Content-Type"] = []string{"application/grpc"}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		req.RemoteAddr = p.Addr.String()
	}
	return req.WithContext(ctx)
}

// streamBody is a call's request messages as a gRPC body: each message with its 5-byte envelope.
type streamBody struct {
	ss  grpc.ServerStream
	buf []byte
	off int
	err error
}

func (b *streamBody) Read(p []byte) (int, error) {
	for b.off == len(b.buf) {
		if b.err != nil {
			return 0, b.err
		}
		var msg []byte
		if err := b.ss.RecvMsg(&msg); err != nil {
			b.err = err
			continue
		}
		b.buf = binary.BigEndian.AppendUint32(append(b.buf[:0], 0), uint32(len(msg)))
		b.buf = append(b.buf, msg...)
		b.off = 0
	}
	n := copy(p, b.buf[b.off:])
	b.off += n
	return n, nil
}

func (b *streamBody) Close() error { return nil }

// streamWriter takes a gRPC answer written as HTTP and sends its messages as they complete.
type streamWriter struct {
	ss         grpc.ServerStream
	header     http.Header
	status     int
	sentHeader bool
	buf        []byte // an envelope not yet complete
	body       []byte // a non-gRPC answer's body, for its error message
	err        error  // SendMsg's failure: the call is broken
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *streamWriter) Flush() {}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.err != nil {
		return 0, w.err
	}
	if w.status != http.StatusOK {
		if len(w.body) < 512 {
			w.body = append(w.body, p[:min(len(p), 512-len(w.body))]...)
		}
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	off := 0
	for len(w.buf)-off >= 5 {
		n := int(binary.BigEndian.Uint32(w.buf[off+1 : off+5]))
		if len(w.buf)-off < 5+n {
			break
		}
		if w.buf[off]&1 != 0 {
			w.err = status.Error(codes.Internal, "sim: the handler compressed a message")
			return 0, w.err
		}
		msg := w.buf[off+5 : off+5+n]
		if err := w.send(&msg); err != nil {
			w.err = err
			return 0, err
		}
		off += 5 + n
	}
	w.buf = w.buf[:copy(w.buf, w.buf[off:])]
	return len(p), nil
}

func (w *streamWriter) send(msg *[]byte) error {
	if err := w.setHeader(); err != nil {
		return err
	}
	return w.ss.SendMsg(msg)
}

// setHeader sets the answer's custom header metadata once, before its first message or its status.
func (w *streamWriter) setHeader() error {
	if w.sentHeader {
		return nil
	}
	w.sentHeader = true
	if md := headerMetadata(w.header); len(md) > 0 {
		return w.ss.SetHeader(md)
	}
	return nil
}

// finish turns the answer's trailers into the call's status.
func (w *streamWriter) finish() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) > 0 {
		return status.Error(codes.Internal, "sim: the handler ended inside a message")
	}
	trailer := make(http.Header, 4)
	for k, vs := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			trailer[http.CanonicalHeaderKey(name)] = vs
		}
	}
	if trailer.Get("Grpc-Status") == "" && w.header.Get("Grpc-Status") != "" {
		trailer = w.header // a trailers-only answer in the headers
	}
	_ = w.setHeader() // a call that failed already fails with its status
	if md := headerMetadata(trailer); len(md) > 0 {
		w.ss.SetTrailer(md)
	}
	code := trailer.Get("Grpc-Status")
	if code == "" {
		if w.status == 0 || w.status == http.StatusOK {
			return status.Error(codes.Internal, "sim: the handler answered without a grpc-status")
		}
		return status.Error(httpStatusCode(w.status), "HTTP "+strconv.Itoa(w.status)+": "+string(w.body))
	}
	n, err := strconv.Atoi(code)
	if err != nil {
		return status.Error(codes.Internal, "sim: bad grpc-status "+strconv.Quote(code))
	}
	if n == 0 {
		return nil
	}
	if details := trailer.Get("Grpc-Status-Details-Bin"); details != "" {
		if raw, err := decodeBinaryHeader(details); err == nil {
			var st spb.Status
			if proto.Unmarshal(raw, &st) == nil {
				return status.FromProto(&st).Err()
			}
		}
	}
	msg, err := url.PathUnescape(trailer.Get("Grpc-Message"))
	if err != nil {
		msg = trailer.Get("Grpc-Message")
	}
	return status.Error(codes.Code(n), msg)
}

// headerMetadata is the custom metadata among h: what gRPC itself carries (content type, status,
// encodings) and net/http's trailer declarations are left out; binary values are decoded.
func headerMetadata(h http.Header) metadata.MD {
	var md metadata.MD
	for k, vs := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "grpc-") || lk == "content-type" || lk == "content-length" || lk == "date" ||
			lk == "trailer" || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		if md == nil {
			md = make(metadata.MD, len(h))
		}
		if strings.HasSuffix(lk, "-bin") {
			for _, v := range vs {
				if raw, err := decodeBinaryHeader(v); err == nil {
					md[lk] = append(md[lk], string(raw))
				}
			}
			continue
		}
		md[lk] = append(md[lk], vs...)
	}
	return md
}

func decodeBinaryHeader(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// httpStatusCode maps the HTTP status of an answer without a grpc-status, as gRPC clients do
// (grpc/doc/http-grpc-status-mapping.md).
func httpStatusCode(s int) codes.Code {
	switch s {
	case http.StatusBadRequest:
		return codes.Internal
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	default:
		return codes.Unknown
	}
}

// stopGRPC ends a grpc.Server's calls at once (Crash, Close).
func stopGRPC(s *grpc.Server) {
	if s != nil {
		s.Stop()
	}
}

// shutdownGRPC lets a grpc.Server's calls finish until ctx ends, then stops it.
func shutdownGRPC(ctx context.Context, s *grpc.Server) error {
	if s == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.GracefulStop()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Stop()
		<-done
		return ctx.Err()
	}
}
