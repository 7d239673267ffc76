package enginerpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The Generate calls' own HTTP/2 client, for engines reached in cleartext (grpc://, prior knowledge,
// as the engines' gRPC servers serve it). net/http's HTTP/2 client reads each connection's frames on
// a goroutine of its own and hands each HEADERS and DATA frame to the stream's reader, and writes each
// request from another: 3-4 goroutine switches a call more than the HTTP/1 client, which reads and
// writes on the caller's goroutine. They were most of what gRPC mode still cost over HTTP mode (issue
// #35, docs/benchmarks.md). This client carries one stream at a time on each pooled connection, so the
// caller's goroutine writes the request and reads the answer's frames itself. It speaks what a
// Generate needs: a request of headers and one message, sent within the engine's flow-control
// windows; an answer of headers, DATA and trailers, whose windows it opens wide and tops up; SETTINGS,
// PING, GOAWAY and RST_STREAM as the protocol asks. A connection whose stream did not end cleanly is
// closed, never reused.

const (
	h2StreamWindow = 16 << 20 // what an engine may send on a stream before the client tops it up
	h2ConnWindow   = 1 << 30
	h2MaxIdle      = 64 // idle connections kept per engine
)

var h2Preface = []byte(http2.ClientPreface)

// h2Pool is one engine's connections.
type h2Pool struct {
	addr   string // host:port
	dialer net.Dialer
	mu     sync.Mutex
	idle   []*h2Conn
	shut   bool // the engine is gone: connections are closed as their calls end
}

func newH2Pool(addr string) *h2Pool {
	return &h2Pool{addr: addr, dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
}

// get returns an idle connection that is still open, or a new one.
func (p *h2Pool) get(ctx context.Context) (*h2Conn, bool, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if c.quiet() {
			return c, true, nil
		}
		c.close()
	}
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	c := newH2Conn(nc)
	if err := c.start(); err != nil {
		c.close()
		return nil, false, err
	}
	return c, false, nil
}

// h2MaxStreamID retires a connection long before its stream ids run out (2^31).
const h2MaxStreamID = 1 << 30

// put keeps c for the next call, unless the pool is full or c has used its stream ids.
func (p *h2Pool) put(c *h2Conn) {
	p.mu.Lock()
	if len(p.idle) < h2MaxIdle && !p.shut && c.nextID < h2MaxStreamID {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// closeIdle closes the idle connections; shut, for an engine that is gone, also those of the calls
// still running as they end.
func (p *h2Pool) closeIdle(shut bool) {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.shut = p.shut || shut
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

// h2Conn is one connection, used by one call at a time.
type h2Conn struct {
	nc   net.Conn
	bw   *bufio.Writer
	br   *bufio.Reader
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
	// Header blocks are decoded here rather than by the framer, into the fields a call reads (no map
	// and no list of every field: those were a tenth of a call's allocations). Every block is decoded,
	// whichever stream it is for, to keep the decoder's table in step with the engine's encoder.
	hdec   *hpack.Decoder
	hto    *h2Fields // the block being decoded goes there (nil: nowhere)
	hbytes int       // its size so far, bounded by h2MaxHeaderBytes
	hopen  uint32    // the stream whose block awaits CONTINUATION frames (0: none)
	nextID uint32
	// The engine's settings and our send windows.
	maxFrame             uint32
	initWin, connSendWin int64
	goneAway             bool   // GOAWAY received: no new streams
	connUnacked          uint32 // received on the connection since the last WINDOW_UPDATE
	closeOnce            sync.Once
}

func newH2Conn(nc net.Conn) *h2Conn {
	c := &h2Conn{nc: nc, bw: bufio.NewWriterSize(nc, 16<<10), nextID: 1, maxFrame: 16384, initWin: 65535, connSendWin: 65535}
	c.br = bufio.NewReaderSize(nc, 32<<10)
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.SetReuseFrames()
	c.hdec = hpack.NewDecoder(4096, c.emit)
	c.hdec.SetMaxStringLength(h2MaxHeaderBytes)
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// start writes the preface, our settings and the connection window.
func (c *h2Conn) start() error {
	if _, err := c.bw.Write(h2Preface); err != nil {
		return err
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h2MaxHeaderBytes}); err != nil {
		return err
	}
	if err := c.fr.WriteWindowUpdate(0, h2ConnWindow-65535); err != nil {
		return err
	}
	return c.bw.Flush()
}

// quiet reports whether an idle connection can carry a call: it is open, and what the engine sent
// while it was idle is handled (a PING answered, SETTINGS applied, a window update counted; gRPC's
// C-core servers ping to estimate bandwidth). A GOAWAY, or a frame that does not come whole at once,
// makes it one to replace.
func (c *h2Conn) quiet() bool {
	s := &h2Stream{ctx: context.Background(), c: c} // stream 0: frames of past streams are ignored
	for !c.goneAway {
		if c.br.Buffered() == 0 {
			open, pending := peekConn(c.nc)
			if !open {
				return false
			}
			if !pending {
				return true
			}
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		err := s.readFrame()
		_ = c.nc.SetReadDeadline(time.Time{})
		if err != nil {
			return false
		}
	}
	return false
}

func (c *h2Conn) close() { c.closeOnce.Do(func() { _ = c.nc.Close() }) }

// h2Header is one request header, its name lower-case.
type h2Header struct{ name, value string }

// h2Stream is one call: its request sent, its answer read frame by frame on the caller's goroutine.
// One goroutine uses it (the transport reads and closes a stream on one); the context's watch only
// sets the connection's deadline.
type h2Stream struct {
	ctx  context.Context
	pool *h2Pool
	c    *h2Conn
	id   uint32
	stop func() bool // the context's AfterFunc

	sendWin  int64
	unacked  uint32 // received on the stream since the last WINDOW_UPDATE
	header   h2Fields
	trailer  h2Fields
	headDone bool // the response headers came
	ended    bool // END_STREAM came
	closed   bool
	reset    error // the stream's RST_STREAM or the connection's end, as an error
	data     []byte
	off      int
}

// h2Call opens a stream on a connection of pool and sends the request: headers, then body in DATA
// frames within the engine's windows. It returns once the request is sent; the answer is read by
// the stream's methods. A reused connection that fails before the engine took the stream is replaced
// once, as net/http retries a request on a dead kept-alive connection.
func h2Call(ctx context.Context, pool *h2Pool, path string, hdrs []h2Header, body []byte) (*h2Stream, error) {
	for attempt := 0; ; attempt++ {
		c, reused, err := pool.get(ctx)
		if err != nil {
			return nil, err
		}
		s := &h2Stream{ctx: ctx, pool: pool, c: c, id: c.nextID, sendWin: c.initWin}
		c.nextID += 2
		s.stop = context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
		err = s.send(pool.addr, path, hdrs, body)
		if err == nil {
			return s, nil
		}
		s.abandon()
		if !reused || attempt > 0 || ctx.Err() != nil || s.headDone {
			return nil, err
		}
	}
}

func (s *h2Stream) send(authority, path string, hdrs []h2Header, body []byte) error {
	c := s.c
	c.hbuf.Reset()
	for _, h := range [...]h2Header{{":method", "POST"}, {":scheme", "http"}, {":authority", authority}, {":path", path}} {
		_ = c.henc.WriteField(hpack.HeaderField{Name: h.name, Value: h.value})
	}
	for _, h := range hdrs {
		_ = c.henc.WriteField(hpack.HeaderField{Name: h.name, Value: h.value})
	}
	if c.hbuf.Len() > int(c.maxFrame) {
		return errors.New("enginerpc: request headers larger than a frame")
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	for len(body) > 0 {
		n := min(int64(len(body)), int64(c.maxFrame), s.sendWin, c.connSendWin)
		if n <= 0 {
			// The engine's windows are full: send what is written and read until it opens them.
			if err := c.bw.Flush(); err != nil {
				return err
			}
			if err := s.readFrame(); err != nil {
				return err
			}
			if s.headDone || s.ended || s.reset != nil {
				return nil // the engine answered early (an error): the answer says what
			}
			continue
		}
		if err := c.fr.WriteData(s.id, int(n) == len(body), body[:n]); err != nil {
			return err
		}
		body = body[n:]
		s.sendWin -= n
		c.connSendWin -= n
	}
	return c.bw.Flush()
}

// readFrame reads and handles one frame of the connection.
func (s *h2Stream) readFrame() error {
	c := s.c
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return s.settings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.fr.WritePing(true, f.Data); err != nil {
			return err
		}
		return c.bw.Flush()
	case *http2.WindowUpdateFrame:
		switch f.StreamID {
		case 0:
			c.connSendWin += int64(f.Increment)
		case s.id:
			s.sendWin += int64(f.Increment)
		}
	case *http2.GoAwayFrame:
		c.goneAway = true
		if s.id > f.LastStreamID && !s.ended {
			s.reset = connect.NewError(connect.CodeUnavailable, fmt.Errorf("the engine is going away (GOAWAY %v)", f.ErrCode))
		}
	case *http2.RSTStreamFrame:
		if f.StreamID == s.id {
			s.reset = rstError(s.ctx, f.ErrCode)
		}
	case *http2.HeadersFrame:
		return s.headers(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded(), f.StreamEnded())
	case *http2.ContinuationFrame:
		if f.StreamID != c.hopen {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return s.headers(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded(), false)
	case *http2.DataFrame:
		if f.StreamID != s.id {
			return nil
		}
		s.data = append(s.data, f.Data()...)
		s.ended = s.ended || f.StreamEnded()
		return s.ack(f.Length)
	}
	return nil
}

// settings applies the engine's SETTINGS and acknowledges them.
func (s *h2Stream) settings(f *http2.SettingsFrame) error {
	c := s.c
	if f.IsAck() {
		return nil
	}
	err := f.ForeachSetting(func(st http2.Setting) error {
		switch st.ID {
		case http2.SettingMaxFrameSize:
			c.maxFrame = st.Val
		case http2.SettingInitialWindowSize:
			s.sendWin += int64(st.Val) - c.initWin
			c.initWin = int64(st.Val)
		case http2.SettingHeaderTableSize: // the engine's decoder's table bounds our encoder's
			c.henc.SetMaxDynamicTableSizeLimit(st.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		return err
	}
	return c.bw.Flush()
}

// headers decodes a fragment of a header block. The stream's first block is the answer's header, a
// later one its trailers; a block of another stream is decoded and dropped.
func (s *h2Stream) headers(id uint32, frag []byte, endHeaders, endStream bool) error {
	c := s.c
	if c.hopen == 0 { // a block begins
		c.hopen, c.hbytes, c.hto = id, 0, nil
		if id == s.id {
			c.hto = &s.trailer
			if !s.headDone {
				c.hto = &s.header
			}
			*c.hto = h2Fields{got: true}
		}
	}
	if c.hopen != id {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if _, err := c.hdec.Write(frag); err != nil {
		return err
	}
	if c.hbytes > h2MaxHeaderBytes {
		return fmt.Errorf("the engine's header block is over %d bytes", h2MaxHeaderBytes)
	}
	if id == s.id {
		s.ended = s.ended || endStream
	}
	if !endHeaders {
		return nil
	}
	c.hopen = 0
	if id == s.id {
		s.headDone = true
	}
	return c.hdec.Close()
}

// h2MaxHeaderBytes bounds a header block (names, values and 32 bytes a field, as HTTP/2 counts them).
const h2MaxHeaderBytes = 1 << 20

// h2Fields are the fields a call reads of a header block; n counts all of them, got says the block came.
type h2Fields struct {
	got                                                bool
	n                                                  int
	status, contentType, encoding, grpcStatus, message string
	hasGRPCStatus                                      bool
}

// emit takes one decoded field of the block being read.
func (c *h2Conn) emit(f hpack.HeaderField) {
	c.hbytes += int(f.Size())
	h := c.hto
	if h == nil {
		return
	}
	h.n++
	switch f.Name {
	case ":status":
		h.status = f.Value
	case "content-type":
		h.contentType = f.Value
	case "grpc-encoding":
		h.encoding = f.Value
	case "grpc-status":
		h.grpcStatus, h.hasGRPCStatus = f.Value, true
	case "grpc-message":
		h.message = f.Value
	}
}

// ack tops up the stream's and the connection's windows once half of them is used.
func (s *h2Stream) ack(n uint32) error {
	c := s.c
	s.unacked += n
	c.connUnacked += n
	flush := false
	if s.unacked >= h2StreamWindow/2 && !s.ended {
		if err := c.fr.WriteWindowUpdate(s.id, s.unacked); err != nil {
			return err
		}
		s.unacked, flush = 0, true
	}
	if c.connUnacked >= h2ConnWindow/2 {
		if err := c.fr.WriteWindowUpdate(0, c.connUnacked); err != nil {
			return err
		}
		c.connUnacked, flush = 0, true
	}
	if flush {
		return c.bw.Flush()
	}
	return nil
}

// readHead reads until the response headers came.
func (s *h2Stream) readHead() error {
	for !s.headDone {
		if s.reset != nil {
			return s.reset
		}
		if s.ended {
			return connect.NewError(connect.CodeInternal, errors.New("protocol error: the stream ended without headers"))
		}
		if err := s.readFrame(); err != nil {
			return s.connError(err)
		}
	}
	return nil
}

// message returns the next message, reading frames until it is whole; io.EOF at the stream's clean end.
func (s *h2Stream) message() ([]byte, error) {
	for {
		avail := s.data[s.off:]
		if len(avail) >= 5 {
			if avail[0] != 0 {
				return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: invalid envelope flags %d", avail[0]))
			}
			n := binary.BigEndian.Uint32(avail[1:5])
			if n > maxMessage {
				return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("message size %d is larger than configured max %d", n, maxMessage))
			}
			if len(avail) >= 5+int(n) {
				s.off += 5 + int(n)
				return avail[5 : 5+n], nil
			}
		}
		if s.off > 0 && s.off == len(s.data) { // all read: start the buffer over
			s.data, s.off = s.data[:0], 0
		}
		if s.reset != nil {
			return nil, s.reset
		}
		if s.ended {
			if len(avail) > 0 {
				return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: incomplete envelope: %w", io.ErrUnexpectedEOF))
			}
			return nil, io.EOF
		}
		if err := s.readFrame(); err != nil {
			return nil, s.connError(err)
		}
	}
}

// ready says whether message would return without waiting for the engine: the next message is in
// the stream's data, or whole with the next frame already in the connection's buffer (a DATA frame
// of this stream; its trailers end it). Any other frame there says nothing: a gRPC server's PING
// rides along with DATA, and reading past it would hold the chunks rendered so far until the next
// token.
func (s *h2Stream) ready() bool {
	if s.ended || s.reset != nil || s.whole(nil) {
		return true
	}
	br := s.c.br
	if br.Buffered() < 9 {
		return false
	}
	h, _ := br.Peek(9) // a frame's header: length (24 bits), type, flags, stream id
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	if binary.BigEndian.Uint32(h[5:9])&(1<<31-1) != s.id || br.Buffered() < 9+n {
		return false
	}
	switch http2.FrameType(h[3]) {
	case http2.FrameHeaders:
		return true
	case http2.FrameData:
		if http2.Flags(h[4]).Has(http2.FlagDataPadded) {
			return false
		}
		f, _ := br.Peek(9 + n)
		return s.whole(f[9:])
	}
	return false
}

// whole says whether the stream's unread data followed by more holds a whole message.
func (s *h2Stream) whole(more []byte) bool {
	avail := s.data[s.off:]
	if len(avail)+len(more) < 5 {
		return false
	}
	var prefix [5]byte
	copy(prefix[copy(prefix[:], avail):], more)
	return len(avail)+len(more) >= 5+int(binary.BigEndian.Uint32(prefix[1:]))
}

// connError is a failure reading or writing the connection, with connect's code for it.
func (s *h2Stream) connError(err error) error {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return err
	}
	if err := s.ctx.Err(); err != nil {
		return coded(s.ctx, err, connect.CodeCanceled)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: incomplete envelope: %w", io.ErrUnexpectedEOF))
	}
	return coded(s.ctx, err, connect.CodeInternal, "protocol error: incomplete envelope")
}

// rstError is an RST_STREAM's code as gRPC's HTTP/2 mapping reads it.
func rstError(ctx context.Context, code http2.ErrCode) error {
	c, ok := rstCode(ctx, fmt.Errorf("stream error: stream ID 0; %v; received from peer", code))
	if !ok {
		c = connect.CodeInternal
	}
	return connect.NewError(c, fmt.Errorf("the engine reset the stream (%v)", code))
}

// done ends the call: a connection whose stream ended cleanly and whose context's watch did not fire
// goes back to the pool; any other is closed (after an RST_STREAM when the stream is still open).
func (s *h2Stream) done() {
	if s.closed {
		return
	}
	s.closed = true
	if !s.stop() { // the context ended: its watch cut the connection
		s.c.close()
		return
	}
	if !s.ended && s.reset == nil {
		s.drain()
	}
	if s.ended && s.reset == nil && !s.c.goneAway {
		s.pool.put(s.c)
		return
	}
	if !s.ended {
		_ = s.c.fr.WriteRSTStream(s.id, http2.ErrCodeCancel)
		_ = s.c.bw.Flush()
	}
	s.c.close()
}

// h2DrainWait bounds how long a call that is done before its stream ended waits for the end, to keep
// its connection: after a Generate's last message the engine's trailers follow at once.
const h2DrainWait = 50 * time.Millisecond

// drain reads the rest of a stream whose caller is done with it (nothing more is kept), for at most
// h2DrainWait and 1 MiB.
func (s *h2Stream) drain() {
	_ = s.c.nc.SetReadDeadline(time.Now().Add(h2DrainWait))
	defer func() { _ = s.c.nc.SetReadDeadline(time.Time{}) }()
	read := 0
	for !s.ended && s.reset == nil && read < 1<<20 {
		s.data, s.off = s.data[:0], 0
		if err := s.readFrame(); err != nil {
			s.reset = err
			return
		}
		read += len(s.data)
	}
}

// abandon ends a call whose request could not be sent.
func (s *h2Stream) abandon() {
	s.stop()
	s.closed = true
	s.c.close()
}

// status reads the header's or trailer's grpc-status as genStreamRaw.status does.
func h2Status(fields *h2Fields) error {
	code, ok := fields.grpcStatus, fields.hasGRPCStatus
	switch {
	case !ok:
		c := connect.CodeUnknown
		if fields.n == 0 {
			c = connect.CodeInternal
		}
		return connect.NewError(c, errors.New("protocol error: no Grpc-Status trailer: unexpected EOF"))
	case code == "0":
		return nil
	}
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return connect.NewError(connect.CodeUnknown, fmt.Errorf("protocol error: invalid error code %q", code))
	}
	msg, err := percentDecode(fields.message)
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: invalid error message %q", fields.message))
	}
	return connect.NewWireError(connect.Code(n), errors.New(msg))
}

// percentDecode decodes grpc-message's percent-encoding.
func percentDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("truncated escape")
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", err
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}
