package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/benchcpu"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/internal/worker"
)

// usageEngine answers a streamed chat request the way an engine of the given style does: the same
// three content chunks and [DONE] whatever the request, a trailing usage-only chunk when the request
// set stream_options.include_usage, and — OpenAI style only — "usage":null on every other chunk then.
// It records the bodies it received.
type usageEngine struct {
	openAIStyle bool
	bodies      chan string
}

func (e *usageEngine) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	e.bodies <- string(b)
	include := strings.Contains(string(b), `"include_usage":true`)
	w.Header().Set("Content-Type", "text/event-stream")
	for i, tok := range []string{"Hel", "lo", "!"} {
		chunk := fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]`, tok)
		if i == 2 {
			chunk = strings.Replace(chunk, `"finish_reason":null`, `"finish_reason":"stop"`, 1)
		}
		if include && e.openAIStyle {
			chunk += `,"usage":null`
		}
		fmt.Fprintf(w, "data: %s}\n\n", chunk)
		w.(http.Flusher).Flush()
	}
	if include {
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":3,"total_tokens":14}}`+"\n\n")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// readFrames relays resp the way the surfaces do and returns what a client would receive.
func readFrames(t *testing.T, resp *Response) string {
	t.Helper()
	var out []byte
	f := resp.Frames()
	for {
		data, err := f.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
		out = body.AppendSSE(out, data)
	}
	return string(out)
}

// TestStreamUsageAskedAndStripped: for a client that did not ask for usage, the engine is asked
// for it, the usage is recorded, and the client receives exactly the bytes the engine sends for a
// request without include_usage — with a vLLM/SGLang-style engine and an OpenAI-style one. A client
// that asked gets the usage chunk, and its request is sent as it was.
func TestStreamUsageAskedAndStripped(t *testing.T) {
	const noUsage = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	const withUsage = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	for _, style := range []struct {
		name   string
		openAI bool
	}{{"engine style", false}, {"OpenAI style", true}} {
		t.Run(style.name, func(t *testing.T) {
			e := &usageEngine{openAIStyle: style.openAI, bodies: make(chan string, 8)}
			srv := httptest.NewServer(http.HandlerFunc(e.serve))
			defer srv.Close()
			// What the engine sends a request without include_usage, straight.
			direct, err := http.Post(srv.URL, "application/json", strings.NewReader(noUsage))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := io.ReadAll(direct.Body)
			direct.Body.Close()
			<-e.bodies

			d, _ := newTestDispatcher(t, Config{}, srv.URL)
			m := &fakeMetrics{}
			d.d.Metrics = m
			for _, tc := range []struct {
				name, body string
				strip      bool
			}{{"not asked", noUsage, true}, {"asked", withUsage, false}} {
				resp, err := d.Do(t.Context(), &Request{Route: RouteChat, Body: []byte(tc.body), Header: http.Header{}})
				if err != nil {
					t.Fatal(err)
				}
				got := readFrames(t, resp)
				resp.Body.Close()
				sent := <-e.bodies
				if !strings.Contains(sent, `"stream_options":{"include_usage":true}`) {
					t.Errorf("%s: the engine was not asked for usage: %s", tc.name, sent)
				}
				if tc.strip && got != string(want) {
					t.Errorf("%s: the client got\n%s\nwant the engine's own answer\n%s", tc.name, got, want)
				}
				if !tc.strip && (sent != tc.body || !strings.Contains(got, `"usage":{"prompt_tokens":11`)) {
					t.Errorf("%s: request sent %s, answer %s; want the request as is and the usage chunk", tc.name, sent, got)
				}
			}
			st := m.stats()
			if len(st) != 2 {
				t.Fatalf("%d requests recorded, want 2", len(st))
			}
			for _, s := range st {
				if !s.HasUsage || s.Usage != (body.Usage{Prompt: 11, Completion: 3}) || !s.Stream || s.Status != 200 ||
					s.Route != "/v1/chat/completions" || s.Model != "m" || s.Worker != srv.URL {
					t.Errorf("recorded %+v", s)
				}
				if s.TTFT <= 0 || s.ITL <= 0 || s.Duration < s.TTFT {
					t.Errorf("stream timings not measured: ttft %v itl %v duration %v", s.TTFT, s.ITL, s.Duration)
				}
			}
		})
	}
}

// TestUnaryUsageRecorded: a non-streamed answer's usage is read from the body the client got, which
// is unchanged; failures before an answer are recorded with their status (an unreadable request
// has no model).
func TestUnaryUsageRecorded(t *testing.T) {
	const answer = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"content":"ok"}}],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "stream_options") {
			http.Error(w, "a non-streamed request got stream_options", 400)
			return
		}
		writeJSON(w, 200, answer)
	}))
	defer srv.Close()
	d, _ := newTestDispatcher(t, Config{}, srv.URL)
	m := &fakeMetrics{}
	d.d.Metrics = m
	_, got, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	if err != nil || string(got) != answer {
		t.Fatalf("answer %s, %v", got, err)
	}
	if _, _, err := do(t, d, RouteChat, `{"model":"m"}`, nil); err == nil {
		t.Fatal("a request without messages was accepted")
	}
	st := m.stats()
	if len(st) != 2 {
		t.Fatalf("%d requests recorded, want 2", len(st))
	}
	if s := st[0]; !s.HasUsage || s.Usage != (body.Usage{Prompt: 4, Completion: 2}) || s.Stream || s.TTFT != 0 || s.Status != 200 {
		t.Errorf("answered request recorded as %+v", s)
	}
	if s := st[1]; s.Status != http.StatusBadRequest || s.Model != "" || s.HasUsage || s.Worker != "" {
		t.Errorf("refused request recorded as %+v", s)
	}
}

// TestPDTimingRecorded: a streamed SGLang PD request records its handoff, the prefill leg's
// duration and the decode's time to first token; a split n > 1 request is counted.
func TestPDTimingRecorded(t *testing.T) {
	var rv rendezvous
	var dp atomic.Pointer[Dispatcher] // set after the engines start
	// The decode answers only once the gateway has read the prefill's answer (its slot is free):
	// otherwise the decode could end first and the request's end would cancel the prefill leg.
	prefillRead := func() {
		if !poll.Wait(10*time.Second, func() bool {
			held := 0
			for _, n := range dp.Load().d.Admission.Status().Inflight {
				held += n
			}
			return held == 0
		}) {
			t.Error("the prefill leg was never read")
		}
	}
	streamAnswer := func(w http.ResponseWriter, l leg) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		fmt.Fprint(w, `data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`+"\n\ndata: [DONE]\n\n")
	}
	p := newEngine(t, "prefill", rv.prefill(chatAnswer))
	dec := newEngine(t, "decode", rv.decode(func(w http.ResponseWriter, l leg) {
		prefillRead()
		if l.body["stream"] == true {
			streamAnswer(w, l)
			return
		}
		chatAnswer(w, l)
	}))
	d, m := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	dp.Store(d)
	resp, err := d.Do(t.Context(), &Request{Route: RouteChat, Header: http.Header{},
		Body: []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFrames(t, resp); strings.Contains(got, "usage") {
		t.Errorf("the client got the usage chunk it did not ask for: %s", got)
	}
	resp.Body.Close()
	if _, _, err := do(t, d, RouteChat, `{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`, nil); err != nil {
		t.Fatal(err)
	}
	st := m.stats()
	if len(st) != 2 {
		t.Fatalf("%d requests recorded, want 2", len(st))
	}
	s := st[0]
	if s.Handoff != worker.HandoffBootstrap.String() || s.PrefillDuration <= 0 || s.DecodeTTFT <= 0 || s.Worker != dec.srv.URL ||
		s.Usage != (body.Usage{Prompt: 5, Completion: 1}) {
		t.Errorf("streamed PD request recorded as %+v", s)
	}
	if s.KVWait() != max(s.DecodeTTFT-s.PrefillDuration, 0) {
		t.Errorf("KV wait %v, want decode TTFT %v less prefill %v", s.KVWait(), s.DecodeTTFT, s.PrefillDuration)
	}
	if s := st[1]; s.Handoff != worker.HandoffBootstrap.String() || s.DecodeTTFT != 0 || !s.HasUsage {
		t.Errorf("split unary PD request recorded as %+v", s)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[string]int{"prefill sglang_bootstrap": 3, "split sglang_bootstrap 2": 1}
	got := map[string]int{}
	for _, e := range m.events {
		got[e]++
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("event %q seen %d times, want %d (all: %v)", k, got[k], n, m.events)
		}
	}
}

// TestStreamBrokenCountsAgainstTheWorker: a stream that breaks off mid-way is the worker's stream
// error; the client's own cancellation is not.
func TestStreamBrokenCountsAgainstTheWorker(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"cho")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the engine dies mid-event
	}))
	defer srv.Close()
	// With a request timeout, Close cancels the request's context before the request is recorded:
	// the failure must have been judged when it happened.
	d, _ := newTestDispatcher(t, Config{RequestTimeout: time.Minute}, srv.URL)
	m := &fakeMetrics{}
	d.d.Metrics = m
	resp, err := d.Do(t.Context(), &Request{Route: RouteChat, Header: http.Header{},
		Body: []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	f := resp.Frames()
	var ferr error
	for ferr == nil {
		_, ferr = f.Next()
	}
	resp.Body.Close()
	if errors.Is(ferr, io.EOF) {
		t.Fatal("the broken stream ended cleanly")
	}
	m.mu.Lock()
	if len(m.errors) != 1 || m.errors[0] != srv.URL+" "+ClassStream {
		t.Errorf("worker errors %v, want one stream error on %s", m.errors, srv.URL)
	}
	m.errors = nil
	m.mu.Unlock()

	// The client leaves mid-stream: the stream fails, the worker is not blamed.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer slow.Close()
	d2, _ := newTestDispatcher(t, Config{RequestTimeout: time.Minute}, slow.URL)
	d2.d.Metrics = m
	ctx, cancel := context.WithCancel(t.Context())
	resp, err = d2.Do(ctx, &Request{Route: RouteChat, Header: http.Header{},
		Body: []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	f = resp.Frames()
	if _, err := f.Next(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := f.Next(); err == nil {
		t.Fatal("the stream went on after the client left")
	}
	resp.Body.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errors) != 0 {
		t.Errorf("worker errors %v after the client left, want none", m.errors)
	}
}

// loopReader replays a stream forever without allocating.
type loopReader struct {
	data []byte
	off  int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	return n, nil
}

func (r *loopReader) Close() error { return nil }

// BenchmarkFrames is the per-frame cost of relaying a stream through Response.Frames (ns/op = ns per
// frame), against the bare SSE reader: the difference is what observing the stream adds. The chunk
// is the one of backend's BenchmarkSSEReader; "usage_null" is an OpenAI-style chunk whose
// "usage":null the meter cuts.
func BenchmarkFrames(b *testing.B) {
	const chunk = `{"id":"chatcmpl-8a1f0c2e9b7d4e6f","object":"chat.completion.chunk","created":1735689600,` +
		`"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" the"},` +
		`"logprobs":null,"finish_reason":null}]`
	for _, tc := range []struct {
		name, payload string
		meter         bool
	}{
		{"bare_reader", chunk + "}", false},
		{"metered", chunk + "}", true},
		{"metered_usage_null", chunk + `,"usage":null}`, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			frame := "data: " + tc.payload + "\n\n"
			resp := &Response{Body: &loopReader{data: []byte(strings.Repeat(frame, 64))}, Stream: true}
			if tc.meter {
				resp.meter = &meter{route: body.RouteChat, stream: true, strip: true, streams: 1}
			}
			f := resp.Frames()
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			defer benchcpu.Start(b)()
			for b.Loop() {
				if _, err := f.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
