package enginerpc

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/internal/testkit/poll"
)

// rawEngine serves h over h2c: an engine that answers Generate however a test needs. own picks the
// transport's own HTTP/2 client, else net/http's (for grpcs://).
func rawEngine(t *testing.T, own bool, h http.HandlerFunc) genCaller {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	hc := newH2CClient()
	g := newGenCaller(hc, srv.URL, "/sglang.grpc.scheduler.SglangScheduler/Generate", sglangLayout)
	if !own {
		g.h2 = nil
	}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		if g.h2 != nil {
			g.h2.closeIdle(true)
		}
		srv.Close()
	})
	return g
}

// bothClients runs f with each Generate client.
func bothClients(t *testing.T, f func(t *testing.T, own bool)) {
	for _, own := range []bool{true, false} {
		name := "own"
		if !own {
			name = "net-http"
		}
		t.Run(name, func(t *testing.T) { f(t, own) })
	}
}

// envelope frames a message as gRPC does.
func envelope(flags byte, msg []byte) []byte {
	b := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// chunkMsg is an SGLang GenerateResponse carrying a chunk of ids.
func chunkMsg(ids ...uint32) []byte {
	var ch []byte
	for _, id := range ids {
		ch = protowire.AppendTag(ch, 1, protowire.VarintType)
		ch = protowire.AppendVarint(ch, uint64(id))
	}
	b := protowire.AppendTag(nil, 2, protowire.BytesType)
	return protowire.AppendBytes(b, ch)
}

// drain reads a stream to its end and returns its events' ids and its error.
func drain(st genStream) ([][]uint32, error) {
	defer st.Close()
	var ids [][]uint32
	for st.Receive() {
		ids = append(ids, slices.Clone(st.event().ids)) // valid until the next Receive
	}
	return ids, st.Err()
}

// TestGenCallerRequest: the request is gRPC's (headers, one envelope of the marshalled message).
func TestGenCallerRequest(t *testing.T) { bothClients(t, testGenCallerRequest) }

func testGenCallerRequest(t *testing.T, own bool) {
	got := make(chan *http.Request, 1)
	body := make(chan []byte, 1)
	g := rawEngine(t, own, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		body <- b
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		_, _ = w.Write(envelope(0, chunkMsg(7, 8)))
		w.Header().Set("Grpc-Status", "0")
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := g.call(ctx, &sglangpb.GenerateRequest{RequestId: "r1", Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := drain(st)
	if err != nil || len(ids) != 1 || len(ids[0]) != 2 || ids[0][1] != 8 {
		t.Fatalf("got %v, %v; want one chunk [7 8] and a clean end", ids, err)
	}
	r, b := <-got, <-body
	if r.Method != http.MethodPost || r.ProtoMajor != 2 || r.Header.Get("Content-Type") != "application/grpc" ||
		r.Header.Get("Te") != "trailers" || r.Header.Get("Grpc-Timeout") == "" || len(r.Header.Get("Grpc-Timeout")) > 9 {
		t.Errorf("request %s HTTP/%d headers %v", r.Method, r.ProtoMajor, r.Header)
	}
	if len(b) < 5 || b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
		t.Fatalf("body %x is not one envelope", b)
	}
}

// TestGenCallerErrors: every way a Generate can fail gets connect's code for it; only an engine's own
// grpc-status is a wire error.
func TestGenCallerErrors(t *testing.T) {
	ok := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/grpc")
	}
	for _, c := range []struct {
		name string
		h    http.HandlerFunc
		code connect.Code
		wire bool
		msgs int
	}{
		{"status in the trailers", func(w http.ResponseWriter, _ *http.Request) {
			ok(w)
			w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
			_, _ = w.Write(envelope(0, chunkMsg(1)))
			w.Header().Set("Grpc-Status", "8")
			w.Header().Set("Grpc-Message", "queue%20full")
		}, connect.CodeResourceExhausted, true, 1},
		{"trailers only", func(w http.ResponseWriter, _ *http.Request) {
			ok(w)
			w.Header().Set("Grpc-Status", "3")
			w.Header().Set("Grpc-Message", "bad")
			w.WriteHeader(http.StatusOK)
		}, connect.CodeInvalidArgument, true, 0},
		{"no status", func(w http.ResponseWriter, _ *http.Request) {
			ok(w)
			_, _ = w.Write(envelope(0, chunkMsg(1)))
		}, connect.CodeInternal, false, 1},
		{"HTTP 404", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
		}, connect.CodeUnimplemented, false, 0},
		{"HTTP 503", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}, connect.CodeUnavailable, false, 0},
		{"not gRPC", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
		}, connect.CodeUnknown, false, 0},
		{"compressed", func(w http.ResponseWriter, _ *http.Request) {
			ok(w)
			_, _ = w.Write(envelope(1, chunkMsg(1)))
		}, connect.CodeInternal, false, 0},
		{"cut inside a message", func(w http.ResponseWriter, _ *http.Request) {
			ok(w)
			_, _ = w.Write(envelope(0, chunkMsg(1, 2, 3))[:8])
		}, connect.CodeInternal, false, 0},
		{"not a GenerateResponse", func(w http.ResponseWriter, _ *http.Request) {
			ok(w)
			_, _ = w.Write(envelope(0, []byte{0x12, 0x05, 0x08}))
		}, connect.CodeInvalidArgument, false, 0},
		{"stream reset", func(w http.ResponseWriter, _ *http.Request) {
			ok(w)
			_, _ = w.Write(envelope(0, chunkMsg(1)))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // net/http resets the stream (INTERNAL_ERROR)
		}, connect.CodeInternal, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			bothClients(t, func(t *testing.T, own bool) {
				g := rawEngine(t, own, c.h)
				var err error
				var n int
				st, err := g.call(context.Background(), &sglangpb.GenerateRequest{RequestId: "r"})
				if err == nil {
					var ids [][]uint32
					ids, err = drain(st)
					n = len(ids)
				}
				if connect.CodeOf(err) != c.code || connect.IsWireError(err) != c.wire || n != c.msgs {
					t.Fatalf("got %d messages and %v (code %v, wire %v); want %d, %v, wire %v",
						n, err, connect.CodeOf(err), connect.IsWireError(err), c.msgs, c.code, c.wire)
				}
				if c.name == "status in the trailers" && err.(*connect.Error).Message() != "queue full" {
					t.Errorf("message %q, want the percent-decoded %q", err.(*connect.Error).Message(), "queue full")
				}
			})
		})
	}
}

// TestGenCallerUnreachable: an engine that does not answer is Unavailable, a cancelled call Canceled;
// neither is the engine's word.
func TestGenCallerUnreachable(t *testing.T) { bothClients(t, testGenCallerUnreachable) }

func testGenCallerUnreachable(t *testing.T, own bool) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	hc := newH2CClient()
	g := newGenCaller(hc, "http://"+addr, "/x", sglangLayout)
	if !own {
		g.h2 = nil
	}
	_, err = g.call(context.Background(), &sglangpb.GenerateRequest{})
	if connect.CodeOf(err) != connect.CodeUnavailable || connect.IsWireError(err) {
		t.Errorf("refused: %v, want Unavailable, not a wire error", err)
	}

	release := make(chan struct{})
	g = rawEngine(t, own, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := g.call(ctx, &sglangpb.GenerateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = drain(st)
	if connect.CodeOf(err) != connect.CodeCanceled || connect.IsWireError(err) {
		t.Errorf("cancelled: %v, want Canceled", err)
	}
	if migrationReason(err) != ReasonReset {
		t.Errorf("a cancelled stream's reason %q", migrationReason(err))
	}
}

func TestGRPCTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0n", 5 * time.Nanosecond: "5n", 30 * time.Second: "30000000u",
		2 * time.Minute: "120000m", 1000 * time.Hour: "3600000S", 1 << 62: "76861433M",
	} {
		if got := grpcTimeout(d); got != want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestH2ClientConnections: the client of our own keeps a connection for the next call once a stream
// ended cleanly (also when the caller is done at its last message, before the trailers), replaces one
// whose stream was cut, sends a request larger than the engine's first flow-control window, and reads
// an answer larger than its own stream window (so it must top the window up).
func TestH2ClientConnections(t *testing.T) {
	var conns atomic.Int32
	big := make([]byte, 2000)
	g := rawEngine(t, true, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		n := 1
		if len(b) > 100000 { // the large request asks for a large answer
			n = 9000 // 18 MB: past the 16 MB stream window, so the client must top it up
		}
		for range n {
			_, _ = w.Write(envelope(0, append(chunkMsg(1), protowire.AppendBytes(protowire.AppendTag(nil, 15, protowire.BytesType), big)...)))
		}
		w.Header().Set("Grpc-Status", "0")
	})
	g.h2.dialer.ControlContext = func(context.Context, string, string, syscall.RawConn) error {
		conns.Add(1)
		return nil
	}
	call := func(req *sglangpb.GenerateRequest, readAll bool) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a window never topped up would stall
		defer cancel()
		st, err := g.call(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		n := 0
		for st.Receive() {
			n++
			if !readAll {
				break
			}
		}
		if readAll && st.Err() != nil {
			t.Fatal(st.Err())
		}
		return n
	}
	for range 3 {
		call(&sglangpb.GenerateRequest{RequestId: "r"}, true)
	}
	if got := conns.Load(); got != 1 {
		t.Fatalf("3 calls one after the other dialed %d connections, want 1", got)
	}
	call(&sglangpb.GenerateRequest{RequestId: "r"}, false) // done at its last message: trailers drained
	if got := conns.Load(); got != 1 {
		t.Fatalf("a call done before its trailers cost its connection: %d dialed", got)
	}
	ids := make([]uint32, 40000) // ~120 kB: past the engine's 64 kB windows
	for i := range ids {
		ids[i] = uint32(100000 + i)
	}
	if n := call(&sglangpb.GenerateRequest{RequestId: "big", Tokenized: &sglangpb.TokenizedInput{InputIds: ids}}, true); n != 9000 {
		t.Fatalf("large exchange: %d messages, want 9000", n)
	}
	// Cut after the first of many messages: the stream is reset and its connection not kept.
	before := conns.Load()
	if n := call(&sglangpb.GenerateRequest{RequestId: "big", Tokenized: &sglangpb.TokenizedInput{InputIds: ids}}, false); n != 1 {
		t.Fatalf("cut exchange: %d messages", n)
	}
	call(&sglangpb.GenerateRequest{RequestId: "r"}, true)
	if got := conns.Load(); got != before+1 {
		t.Fatalf("after a cut stream %d connections dialed, want one more than %d", got, before)
	}
}

// TestH2PoolRetiresOldConnections: a connection near the end of its stream ids, or handed back after
// its engine is gone, is closed rather than kept.
func TestH2PoolRetiresOldConnections(t *testing.T) {
	p := newH2Pool("127.0.0.1:1")
	a, b := net.Pipe()
	defer b.Close()
	c := newH2Conn(a)
	p.put(c)
	if len(p.idle) != 1 {
		t.Fatalf("a fresh connection was not kept: %d idle", len(p.idle))
	}
	p.closeIdle(false)
	old := newH2Conn(a)
	old.nextID = h2MaxStreamID + 1
	p.put(old)
	if len(p.idle) != 0 {
		t.Error("a connection past its stream-id bound was kept")
	}
	p.closeIdle(true)
	p.put(newH2Conn(a))
	if len(p.idle) != 0 {
		t.Error("a connection was kept by a pool whose engine is gone")
	}
}

// TestH2ClientAnswersIdlePings: an engine that pings an idle connection (gRPC C-core servers do) is
// answered when the connection is next taken, and the connection is kept rather than replaced.
func TestH2ClientAnswersIdlePings(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		_, _ = w.Write(envelope(0, chunkMsg(1)))
		w.Header().Set("Grpc-Status", "0")
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Config.HTTP2 = &http.HTTP2Config{SendPingTimeout: 20 * time.Millisecond, PingTimeout: 10 * time.Second}
	srv.Start()
	defer srv.Close()
	g := newGenCaller(nil, srv.URL, "/sglang.grpc.scheduler.SglangScheduler/Generate", sglangLayout)
	defer g.h2.closeIdle(true)
	g.h2.dialer.ControlContext = func(context.Context, string, string, syscall.RawConn) error {
		conns.Add(1)
		return nil
	}
	call := func() {
		t.Helper()
		st, err := g.call(context.Background(), &sglangpb.GenerateRequest{RequestId: "r"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := drain(st); err != nil {
			t.Fatal(err)
		}
	}
	call()
	g.h2.mu.Lock()
	idle := g.h2.idle[0]
	g.h2.mu.Unlock()
	poll.Until(t, "the server's ping on the idle connection", 10*time.Second, func() bool {
		_, pending := peekConn(idle.nc)
		return pending
	})
	call()
	if got := conns.Load(); got != 1 {
		t.Fatalf("%d connections dialed: the pinged connection was replaced", got)
	}
}

// TestGenCallerLongHeaderBlocks: a header block and a trailer block longer than a frame come in
// HEADERS and CONTINUATION frames; the call reads both, and the engine's status in the trailers.
func TestGenCallerLongHeaderBlocks(t *testing.T) { bothClients(t, testGenCallerLongHeaderBlocks) }

func testGenCallerLongHeaderBlocks(t *testing.T, own bool) {
	long := strings.Repeat("x", 40000) // past a 16 kB frame: the block goes on in CONTINUATION frames
	g := rawEngine(t, own, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("X-Long", long)
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message, X-Long-Trailer")
		_, _ = w.Write(envelope(0, chunkMsg(5)))
		w.Header().Set("X-Long-Trailer", long)
		w.Header().Set("Grpc-Status", "8")
		w.Header().Set("Grpc-Message", "busy")
	})
	for range 2 { // the second call on the same connection: the HPACK tables stayed in step
		st, err := g.call(context.Background(), &sglangpb.GenerateRequest{RequestId: "r"})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := drain(st)
		if len(ids) != 1 || connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "busy") {
			t.Fatalf("got %v, %v; want one chunk and the trailers' RESOURCE_EXHAUSTED", ids, err)
		}
	}
}
