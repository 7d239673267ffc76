package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testkit/poll"
)

func newTestH1() *Transport {
	return New(Options{DialTimeout: 5 * time.Second, KeepAlive: 30 * time.Second, MaxIdlePerHost: 1024, IdleTimeout: 90 * time.Second})
}

// rawServer accepts connections on loopback and runs handle on each; it is stopped, and its
// goroutines waited for, when the test ends.
func rawServer(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// readRequest reads one request (head and Content-Length body) from a raw connection.
func readRawRequest(br *bufio.Reader) (head string, body []byte, err error) {
	var sb strings.Builder
	n := 0
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return "", nil, err
		}
		sb.WriteString(l)
		if l == "\r\n" {
			break
		}
		if v, ok := strings.CutPrefix(strings.ToLower(l), "content-length: "); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	body = make([]byte, n)
	_, err = io.ReadFull(br, body)
	return sb.String(), body, err
}

func h1Post(ctx context.Context, t *testing.T, tr http.RoundTripper, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "r1")
	return tr.RoundTrip(req)
}

func within(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for " + what)
	}
}

// TestH1RequestOnTheWire: the request line, Host, Content-Length, the caller's headers and the body,
// in one well-formed request; a header value with a line break is refused before anything is sent.
func TestH1RequestOnTheWire(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	url := rawServer(t, func(c net.Conn) {
		head, body, err := readRawRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		got <- head + string(body)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	resp, err := h1Post(t.Context(), t, tr, url+"/v1/chat/completions?x=1", `{"a":1}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" || resp.StatusCode != 200 || resp.ContentLength != 2 {
		t.Fatalf("response %d %q (length %d)", resp.StatusCode, b, resp.ContentLength)
	}
	wire := <-got
	for _, want := range []string{"POST /v1/chat/completions?x=1 HTTP/1.1\r\n", "Host: " + strings.TrimPrefix(url, "http://") + "\r\n",
		"Content-Length: 7\r\n", "Content-Type: application/json\r\n", "X-Request-Id: r1\r\n", "\r\n\r\n{\"a\":1}"} {
		if !strings.Contains(wire, want) {
			t.Errorf("request %q lacks %q", wire, want)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/x", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer k\r\nX-Evil: 1")
	if _, err := tr.RoundTrip(req); !errors.Is(err, errH1InvalidHeader) {
		t.Errorf("header with a line break: %v", err)
	}
}

// TestH1Responses: the framings an engine may answer with, and which leave the connection reusable.
func TestH1Responses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, answer, method string
		wantBody             string
		wantStatus           int
		reused               bool
		wantErr              bool
	}{
		{name: "content length", answer: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", wantBody: "hello", wantStatus: 200, reused: true},
		{name: "chunked with trailer", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 1\r\n\r\n", wantBody: "hello", wantStatus: 200, reused: true},
		{name: "1xx skipped", answer: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", wantBody: "ok", wantStatus: 200, reused: true},
		{name: "no content", answer: "HTTP/1.1 204 No Content\r\n\r\n", wantStatus: 204, reused: true},
		{name: "connection close", answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", wantBody: "ok", wantStatus: 200},
		{name: "http/1.0", answer: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", wantBody: "ok", wantStatus: 200},
		{name: "until close", answer: "HTTP/1.1 200 OK\r\n\r\nto the end", wantBody: "to the end", wantStatus: 200},
		{name: "error status", answer: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nRetry-After: 3\r\n\r\nbusy", wantBody: "busy", wantStatus: 503, reused: true},
		{name: "head", method: http.MethodHead, answer: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", wantStatus: 200, reused: true},
		{name: "garbage", answer: "SSH-2.0-OpenSSH\r\n\r\n", wantErr: true},
		{name: "bad length", answer: "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", wantErr: true},
		{name: "truncated", answer: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", wantBody: "short", wantStatus: 200, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var conns atomic.Int64
			url := rawServer(t, func(c net.Conn) {
				conns.Add(1)
				br := bufio.NewReader(c)
				for {
					if _, _, err := readRawRequest(br); err != nil {
						return
					}
					if _, err := io.WriteString(c, tt.answer); err != nil {
						return
					}
					if !tt.reused {
						return // closes the connection: "until close" and "truncated" need it
					}
				}
			})
			tr := newTestH1()
			defer tr.CloseIdleConnections()
			for range 2 {
				method := tt.method
				if method == "" {
					method = http.MethodPost
				}
				req, _ := http.NewRequest(method, url+"/x", strings.NewReader("{}"))
				resp, err := tr.RoundTrip(req)
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != tt.wantStatus || string(body) != tt.wantBody {
						t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tt.wantStatus, tt.wantBody)
					}
				}
				if (err != nil) != tt.wantErr {
					t.Fatalf("error %v, want error %v", err, tt.wantErr)
				}
				if tt.wantErr {
					return
				}
			}
			if want := map[bool]int64{true: 1, false: 2}[tt.reused]; conns.Load() != want {
				t.Errorf("%d connections for two requests, want %d", conns.Load(), want)
			}
		})
	}
}

// TestH1Streaming: a streamed body gives each frame as the engine flushes it, before the engine
// writes the next; the connection is reused afterwards.
func TestH1Streaming(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, f := range []string{"data: 1\n\n", "data: 2\n\n"} {
			_, _ = io.WriteString(w, f)
			w.(http.Flusher).Flush()
			<-next // the client must have read this frame before the next is written
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	for range 2 {
		resp, err := h1Post(t.Context(), t, tr, srv.URL, "{}")
		if err != nil {
			t.Fatal(err)
		}
		// Frames read as they come: h1 sits below the SSE reader (backend/body), so the test reads lines.
		rd := bufio.NewReader(resp.Body)
		for _, want := range []string{"data: 1\n", "\n", "data: 2\n", "\n"} {
			line, err := rd.ReadString('\n')
			if err != nil || line != want {
				t.Fatalf("line %q, %v; want %q", line, err, want)
			}
			if line == "\n" {
				next <- struct{}{}
			}
		}
		if _, err := rd.ReadString('\n'); !errors.Is(err, io.EOF) {
			t.Fatalf("end of stream: %v", err)
		}
		resp.Body.Close()
	}
	if conns.Load() != 1 {
		t.Errorf("%d connections for two streams, want 1", conns.Load())
	}
}

// TestH1Cancellation: a context that ends while the request waits for its answer, or while its body
// streams, ends the call with the context's error at once, and the engine sees its connection go.
func TestH1Cancellation(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"waiting for the head", "reading the body"} {
		t.Run(stage, func(t *testing.T) {
			arrived := make(chan struct{})
			gone := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if stage == "reading the body" {
					_, _ = io.WriteString(w, "data: 1\n\n")
					w.(http.Flusher).Flush()
				}
				close(arrived)
				<-r.Context().Done()
				close(gone)
			}))
			defer srv.Close()
			tr := newTestH1()
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type result struct {
				resp *http.Response
				err  error
			}
			res := make(chan result, 1)
			go func() {
				resp, err := h1Post(ctx, t, tr, srv.URL, "{}")
				res <- result{resp, err}
			}()
			within(t, arrived, "the request")
			if stage == "waiting for the head" {
				cancel()
				select {
				case r := <-res:
					if !errors.Is(r.err, context.Canceled) {
						t.Fatalf("error %v, want context.Canceled", r.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a cancelled request kept waiting for its answer")
				}
			} else {
				r := <-res
				if r.err != nil {
					t.Fatal(r.err)
				}
				buf := make([]byte, 64)
				if n, err := r.resp.Body.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "data: 1") {
					t.Fatalf("first frame %q, %v", buf[:n], err)
				}
				cancel()
				if _, err := io.ReadAll(r.resp.Body); !errors.Is(err, context.Canceled) {
					t.Fatalf("body read after cancel: %v, want context.Canceled", err)
				}
				r.resp.Body.Close()
			}
			within(t, gone, "the engine to see the connection close")
		})
	}
}

// TestH1NoDuplicate: an engine that reads a request and dies without answering gets it once: the
// call fails, it is not sent again, on a new connection or a pooled one.
func TestH1NoDuplicate(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	url := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			if _, _, err := readRawRequest(br); err != nil {
				return
			}
			if requests.Add(1)%2 == 0 {
				return // every second request: read, then die without an answer
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	resp, err := h1Post(t.Context(), t, tr, url, "{}") // served; its connection is pooled
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if _, err := h1Post(t.Context(), t, tr, url, "{}"); err == nil { // on the pooled connection: read, no answer
		t.Fatal("no error from an engine that died after reading the request")
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("engine received %d requests, want 2: the unanswered one must not be sent again", n)
	}
}

// answerOnceThenClose is an engine that answers one request with keep-alive, then closes the idle
// connection (an engine's keep-alive timeout, or an engine that stops).
func answerOnceThenClose(requests, conns *atomic.Int64) func(net.Conn) {
	return func(c net.Conn) {
		conns.Add(1)
		if _, _, err := readRawRequest(bufio.NewReader(c)); err != nil {
			return
		}
		requests.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
}

// enginesKeepAlive is how long the engines keep an idle HTTP connection open before closing it, and
// so how long a pooled connection may have been idle when its engine's close is there to be found.
// SGLang: uvicorn.run(..., timeout_keep_alive=5) in launch_server (sgl-project/sglang
// python/sglang/srt/entrypoints/http_server.py). vLLM: timeout_keep_alive=envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE
// in vllm-project/vllm vllm/entrypoints/openai/api_server.py, "5" by default in vllm/envs.py.
const enginesKeepAlive = 5 * time.Second

// TestH1ClosedIdleConnectionNotUsed: a pooled connection the engine has closed after its keep-alive
// timeout is checked and dropped (the transport's own checkAfterIdle, which must be shorter than the
// engines' timeout): the next request goes over a new connection and is received once.
func TestH1ClosedIdleConnectionNotUsed(t *testing.T) {
	t.Parallel()
	var requests, conns atomic.Int64
	url := rawServer(t, answerOnceThenClose(&requests, &conns))
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	resp, err := h1Post(t.Context(), t, tr, url, "{}")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	// The engine closes the connection at once; an engine's keep-alive timeout closes it after
	// enginesKeepAlive idle, which the pooled connection is made to have been.
	tr.mu.Lock()
	var pooled []*h1Conn
	for _, l := range tr.idle {
		pooled = append(pooled, l...)
	}
	for _, pc := range pooled {
		pc.idleAt = pc.idleAt.Add(-enginesKeepAlive)
	}
	tr.mu.Unlock()
	if len(pooled) != 1 {
		t.Fatalf("%d pooled connections, want 1", len(pooled))
	}
	// A peer's close is seen only by probing the socket.
	poll.Until(t, "the engine's close to reach the pooled connection", 10*time.Second, func() bool { return !connAlive(pooled[0].c) })
	resp, err = h1Post(t.Context(), t, tr, url, "{}")
	if err != nil {
		t.Fatalf("request after the engine closed the idle connection: %v", err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if requests.Load() != 2 || conns.Load() != 2 {
		t.Errorf("engine got %d requests over %d connections, want 2 over 2", requests.Load(), conns.Load())
	}
}

// TestH1RecentConnectionClosedByEngine: a connection used within checkAfterIdle is not checked, so a
// request written into one its engine has just closed fails (once, not sent again); the host's other
// pooled connections, closed by the same stop, are dropped, and the next request goes over a new one.
func TestH1RecentConnectionClosedByEngine(t *testing.T) {
	t.Parallel()
	var requests, conns atomic.Int64
	url := rawServer(t, answerOnceThenClose(&requests, &conns))
	tr := newTestH1()
	tr.checkAfter = time.Hour // every pooled connection is recent
	defer tr.CloseIdleConnections()
	// Two requests at once: two connections, both pooled, both then closed by the engine.
	var wg sync.WaitGroup
	var started sync.WaitGroup
	started.Add(2)
	hold := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			resp, err := h1Post(t.Context(), t, tr, url, "{}")
			started.Done()
			if err != nil {
				t.Error(err)
				return
			}
			<-hold // both answers in hand before either connection goes back to the pool
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		})
	}
	started.Wait()
	close(hold)
	wg.Wait()
	if n := tr.IdleConns(); n != 2 {
		t.Fatalf("%d pooled connections, want 2", n)
	}
	tr.mu.Lock()
	pooled := slices.Concat(slices.Collect(maps.Values(tr.idle))...)
	tr.mu.Unlock()
	for _, pc := range pooled {
		poll.Until(t, "the engine's close to reach a pooled connection", 10*time.Second, func() bool { return !connAlive(pc.c) })
	}
	_, err := h1Post(t.Context(), t, tr, url, "{}")
	if !closedByEngine(err) {
		t.Fatalf("request on a recent connection the engine closed: err %v, want the close's error", err)
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d pooled connections after one was found closed, want 0: the engine closed them all", n)
	}
	resp, err := h1Post(t.Context(), t, tr, url, "{}")
	if err != nil {
		t.Fatalf("request after the closed connections were dropped: %v", err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if requests.Load() != 3 || conns.Load() != 3 {
		t.Errorf("engine got %d requests over %d connections, want 3 over 3 (the failed one never reached it)",
			requests.Load(), conns.Load())
	}
}

// closedByPeer is a TCP connection whose other end has closed, once the close has reached it.
func closedByPeer(t *testing.T) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	peer.Close()
	poll.Until(t, "the peer's close to reach the connection", 10*time.Second, func() bool { return !connAlive(c) })
	return c
}

// failingConn is a pooled connection whose first write fails before sending anything.
type failingConn struct{ net.Conn }

func (failingConn) Write([]byte) (int, error) { return 0, syscall.EPIPE }

// TestH1NothingWrittenIsSentOnce: when nothing of a request could be written on a pooled
// connection, it is sent once more on a checked one (a recent pooled connection the engine closed is
// dropped, not written into), and the engine receives it once.
func TestH1NothingWrittenIsSentOnce(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	url := rawServer(t, func(c net.Conn) {
		if _, _, err := readRawRequest(bufio.NewReader(c)); err != nil {
			return
		}
		requests.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	tr := newTestH1()
	tr.checkAfter = time.Hour // every pooled connection is recent
	defer tr.CloseIdleConnections()
	key := strings.TrimPrefix(url, "http://")
	closed := closedByPeer(t)
	tr.putIdle(&h1Conn{t: tr, key: key, c: closed, br: bufio.NewReader(closed)})
	a, b := net.Pipe()
	defer b.Close()
	tr.putIdle(&h1Conn{t: tr, key: key, c: failingConn{a}, br: bufio.NewReader(a)})
	resp, err := h1Post(t.Context(), t, tr, url, "{}")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" || requests.Load() != 1 {
		t.Errorf("body %q, engine got %d requests; want ok, 1", body, requests.Load())
	}
}

// FuzzH1Response: any bytes an engine answers with end the call with a response or an error, and a
// body read ends; nothing panics or hangs.
func FuzzH1Response(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 204 No Content\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), 512)
		resp, err := readResponseHead(br)
		if err != nil {
			return
		}
		if resp.StatusCode < 100 || resp.StatusCode > 999 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if len(resp.TransferEncoding) > 0 {
			_, _ = io.Copy(io.Discard, io.LimitReader(httputil.NewChunkedReader(br), 1<<20))
		}
	})
}

// TestH1IdleConnectionExpires: a pooled connection that no request takes is closed once it has been
// idle for the idle timeout, with no later request to notice it (an engine that went away leaves no
// open connection behind); one taken by a request before then stays open for it.
func TestH1IdleConnectionExpires(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	url := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			if _, _, err := readRawRequest(br); err != nil {
				close(closed) // the gateway closed its pooled connection
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTestH1()
	tr.idleTimeout = 50 * time.Millisecond
	defer tr.CloseIdleConnections()
	for range 3 { // reused from the pool each time: the timer runs on, and expire finds it used since
		resp, err := h1Post(t.Context(), t, tr, url, "{}")
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
			t.Fatalf("body %q", b)
		}
		resp.Body.Close()
	}
	within(t, closed, "the idle connection to be closed")
	tr.mu.Lock()
	n := len(tr.idle)
	tr.mu.Unlock()
	if n != 0 {
		t.Errorf("%d hosts still pooled after expiry", n)
	}
}

// TestH1IdleTimerOutlivesUse: a connection's idle timer is not moved at each use. When it fires,
// a pooled connection used since is kept and the timer set for the rest of its idle timeout; one idle
// for the whole timeout is closed; one a request holds is left open, and pooling it sets the timer
// again. The firings are expire's calls here, so no test waits on a clock.
func TestH1IdleTimerOutlivesUse(t *testing.T) {
	t.Parallel()
	tr := newTestH1()
	tr.idleTimeout = time.Hour // the real timer never fires during the test
	defer tr.CloseIdleConnections()
	c, peer := net.Pipe()
	defer peer.Close()
	pc := &h1Conn{t: tr, key: "engine:80", c: c}
	pooled := func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return slices.Contains(tr.idle[pc.key], pc)
	}
	armed := func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return pc.armed
	}

	tr.putIdle(pc)
	tr.expire(pc) // fires while the connection is fresh (used a moment ago)
	if !pooled() || !armed() {
		t.Fatalf("a connection idle for less than the timeout: pooled %v, timer set %v; want both", pooled(), armed())
	}

	tr.mu.Lock() // a request takes it
	tr.idle[pc.key] = slices.DeleteFunc(tr.idle[pc.key], func(x *h1Conn) bool { return x == pc })
	tr.mu.Unlock()
	tr.expire(pc)
	if armed() {
		t.Fatal("the timer of a connection a request holds is still set")
	}
	tr.putIdle(pc) // the request is over
	if !pooled() || !armed() {
		t.Fatalf("a connection pooled again: pooled %v, timer set %v; want both", pooled(), armed())
	}

	tr.mu.Lock()
	pc.idleAt = time.Now().Add(-2 * tr.idleTimeout)
	tr.mu.Unlock()
	tr.expire(pc) // fires after a whole idle timeout unused
	if pooled() {
		t.Fatal("a connection idle for the whole timeout is still pooled")
	}
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the expired connection reads %v on the engine's side, want EOF (closed)", err)
	}
}

// engineHead is a typical engine answer's head (SGLang's uvicorn, a streamed chat).
const engineHead = "HTTP/1.1 200 OK\r\ndate: Sat, 05 Dec 2026 20:47:21 GMT\r\nserver: uvicorn\r\n" +
	"content-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\nx-request-id: 5b8e1c\r\n" +
	"x-sglang-worker: prefill-0\r\nTransfer-Encoding: chunked\r\n\r\n"

// TestReadResponseHeadMatchesNetHTTP: the head's status, header values (repeated keys in order,
// uncommon keys canonicalised) and framing are net/http's.
func TestReadResponseHeadMatchesNetHTTP(t *testing.T) {
	for _, head := range []string{
		engineHead,
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: a=1\r\nx-custom:  spaced value \r\nSet-Cookie: b=2\r\nvary: x\r\nVary: y\r\n\r\n",
		"HTTP/1.0 404 Not Found\r\nContent-Type: application/json\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		manyHeaders(20), // past the 16 lines kept on the stack, a repeated key on both sides
	} {
		got, err := readResponseHead(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		want, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head)), nil)
		if err != nil {
			t.Fatal(err)
		}
		// (net/http also gives a 204 or 304 a length of 0; readResponse frames those bodies itself.)
		if got.StatusCode != want.StatusCode || got.Status != want.Status ||
			(want.Header.Get("Content-Length") != "" && got.ContentLength != want.ContentLength) {
			t.Errorf("%q: status %q/%d, length %d; want %q/%d, %d", head, got.Status, got.StatusCode, got.ContentLength,
				want.Status, want.StatusCode, want.ContentLength)
		}
		if !reflect.DeepEqual(got.TransferEncoding, want.TransferEncoding) {
			t.Errorf("%q: transfer encoding %q, want %q", head, got.TransferEncoding, want.TransferEncoding)
		}
		delete(got.Header, "Transfer-Encoding") // h1 keeps it in the map too; net/http moves it out
		if !reflect.DeepEqual(got.Header, want.Header) {
			t.Errorf("%q: header %v, want %v", head, got.Header, want.Header)
		}
		// A value appended to by a caller must not overwrite another key's value.
		for k := range got.Header {
			got.Header[k] = append(got.Header[k], "added")
		}
		for k, vs := range want.Header {
			if g := got.Header[k]; !reflect.DeepEqual(g[:len(g)-1], vs) {
				t.Errorf("%q: after appending to every key, %s is %q, want %q + added", head, k, g, vs)
			}
		}
	}
}

// manyHeaders is a head of n header lines, every third one a repeat of X-Repeat.
func manyHeaders(n int) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n")
	for i := range n {
		if i%3 == 0 {
			fmt.Fprintf(&b, "x-repeat: r%d\r\n", i)
		} else {
			fmt.Fprintf(&b, "X-Field-%d: v%d\r\n", i, i)
		}
	}
	return b.String() + "\r\n"
}

// BenchmarkReadResponseHead: parsing a typical engine answer's head (two per PD request).
func BenchmarkReadResponseHead(b *testing.B) {
	r := strings.NewReader(engineHead)
	br := bufio.NewReader(r)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(engineHead)
		br.Reset(r)
		if _, err := readResponseHead(br); err != nil {
			b.Fatal(err)
		}
	}
}
