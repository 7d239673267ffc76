package sim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/gen/sluice/worker/v1/workerv1connect"
	"github.com/sluicegw/sluice/internal/jsonx"
)

const chatBody = `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":10}`

func setFaults(t *testing.T, c *http.Client, e *Engine, body string) {
	t.Helper()
	if status, resp := post(t, c, e.URL()+"/sim/faults", body); status != 200 {
		t.Fatalf("POST /sim/faults %s: %d %s", body, status, resp)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline, not synchronisation by sleeping
	}
}

func TestFaultErrorRate(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, GRPC: true})
	c := testClient(t)
	setFaults(t, c, e, `{"error_rate":1,"error_status":503}`)
	for i := 0; i < 5; i++ {
		status, body := post(t, c, e.URL()+"/v1/chat/completions", chatBody)
		if eb := decodeJSON[sglangErr](t, body); status != 503 || eb.Code != 503 || !strings.HasPrefix(eb.Message, "injected fault") {
			t.Fatalf("request %d: %d %s, want 503", i, status, body)
		}
	}
	_, err := workerv1connect.NewPrefillServiceClient(testClient(t), e.URL()).Prefill(t.Context(),
		&workerv1.PrefillRequest{Prompt: &workerv1.Prompt{Input: &workerv1.Prompt_Text{Text: "x"}}})
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("rpc err %v, want unavailable", err)
	}
	_, body := get(t, c, e.URL()+"/sim/faults")
	if f := decodeJSON[Faults](t, body); f.ErrorRate != 1 || f.ErrorStatus != 503 {
		t.Errorf("GET /sim/faults: %s", body)
	}
	setFaults(t, c, e, `{"error_rate":0}`)
	if status, body := post(t, c, e.URL()+"/v1/chat/completions", chatBody); status != 200 {
		t.Errorf("after clearing: %d %s", status, body)
	}
	if st := e.Stats(); st.Failed != 6 || st.Completed != 1 {
		t.Errorf("stats failed %d completed %d, want 6 and 1", st.Failed, st.Completed)
	}
	// Invalid faults are rejected.
	if status, _ := post(t, c, e.URL()+"/sim/faults", `{"error_rate":2}`); status != 400 {
		t.Errorf("error_rate 2 accepted: %d", status)
	}
}

func TestFaultScopes(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant})
	c := testClient(t)
	setFaults(t, c, e, `{"error_rate":1,"error_status":429,"roles":["decode"]}`)
	if status, body := post(t, c, e.URL()+"/v1/chat/completions", chatBody); status != 200 {
		t.Errorf("fault for decode engines hit a regular engine: %d %s", status, body)
	}
	setFaults(t, c, e, `{"roles":[],"paths":["/generate"]}`)
	if status, _ := post(t, c, e.URL()+"/v1/chat/completions", chatBody); status != 200 {
		t.Errorf("chat: %d, want 200 (fault scoped to /generate)", status)
	}
	if status, _ := post(t, c, e.URL()+"/generate", `{"text":"hi"}`); status != 429 {
		t.Errorf("generate: %d, want 429", status)
	}
}

func TestFaultHang(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant})
	c := testClient(t)
	setFaults(t, c, e, `{"hang":true}`)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+"/v1/chat/completions", strings.NewReader(chatBody))
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the request to be in flight", func() bool { return e.Stats().InFlight == 1 })
	select {
	case err := <-errc:
		t.Fatalf("hanging request answered: %v", err)
	default:
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", err)
	}
	waitFor(t, "the handler to end", func() bool { return e.Stats().InFlight == 0 })
	setFaults(t, c, e, `{"hang":false}`)
	if status, _ := post(t, c, e.URL()+"/v1/chat/completions", chatBody); status != 200 {
		t.Errorf("after hang off: %d", status)
	}
}

// TestFaultHold: requests that start while Hold is set wait, requests are not refused, and clearing
// Hold releases every held one.
func TestFaultHold(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant})
	c := testClient(t)
	setFaults(t, c, e, `{"hold":true}`)
	done := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := c.Post(e.URL()+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	waitFor(t, "both requests held", func() bool { return e.Stats().InFlight == 2 })
	select {
	case status := <-done:
		t.Fatalf("a held request answered %d before the hold was cleared", status)
	default:
	}
	setFaults(t, c, e, `{"hold":false}`)
	for range 2 {
		if status := <-done; status != 200 {
			t.Errorf("released request: status %d, want 200", status)
		}
	}
}

// TestFaultHoldSkip: with hold_skip 2, of three requests sent together two answer and the third
// waits until the hold is cleared.
func TestFaultHoldSkip(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant})
	c := testClient(t)
	setFaults(t, c, e, `{"hold":true,"hold_skip":2}`)
	done := make(chan int, 3)
	for range 3 {
		go func() {
			resp, err := c.Post(e.URL()+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range 2 {
		if status := <-done; status != 200 {
			t.Fatalf("a let-through request: status %d, want 200", status)
		}
	}
	waitFor(t, "the third request held", func() bool { return e.Stats().InFlight == 1 })
	select {
	case status := <-done:
		t.Fatalf("the held request answered %d before the hold was cleared", status)
	default:
	}
	setFaults(t, c, e, `{"hold":false}`)
	if status := <-done; status != 200 {
		t.Errorf("released request: status %d, want 200", status)
	}
}

func TestFaultHangEndsOnClose(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Mode: ModeInstant, Faults: Faults{Hang: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := testClient(t)
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL()+"/generate", strings.NewReader(`{"text":"x"}`))
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the request to be in flight", func() bool { return e.Stats().InFlight == 1 })
	e.Close() // must not wait for the client
	if err := <-errc; err == nil {
		t.Error("hanging request got a response after Close")
	}
}

func TestFaultDieAfterTokens(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 50})
	c := testClient(t)
	setFaults(t, c, e, `{"die_after_tokens":3}`)

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL()+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":10,"stream":true}`))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || err == nil {
		t.Fatalf("status %d, read err %v: want 200 and a truncated body", resp.StatusCode, err)
	}
	content := 0
	for _, ev := range sseEvents(t, body) {
		if ev == "[DONE]" {
			t.Error("stream completed")
		}
		if strings.Contains(ev, `"content":"`) && !strings.Contains(ev, `"content":""`) {
			content++
		}
	}
	if content != 3 {
		t.Errorf("saw %d tokens before the connection died, want 3", content)
	}

	// Non-streaming: the connection dies without a response.
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL()+"/v1/chat/completions", strings.NewReader(chatBody))
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("non-streaming got status %d, want a dropped connection", resp.StatusCode)
	}
	setFaults(t, c, e, `{"die_after_tokens":0}`)
	if status, _ := post(t, c, e.URL()+"/v1/chat/completions", chatBody); status != 200 {
		t.Errorf("after die off: %d", status)
	}
}

// TestFaultStallAfterTokens: a stream started under stall_after_tokens 3 gives three tokens and then
// nothing until the stall is cleared, when it ends whole; a stalled stream whose client goes away
// ends at once.
func TestFaultStallAfterTokens(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 50})
	c := testClient(t)
	setFaults(t, c, e, `{"stall_after_tokens":3}`)
	const stream = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":10,"stream":true}`

	open := func(ctx context.Context) (*bufio.Reader, func()) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+"/v1/chat/completions", strings.NewReader(stream))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return bufio.NewReader(resp.Body), func() { resp.Body.Close() }
	}
	// tokens reads events until n content tokens came, or the stream ended; it says how many came
	// and whether [DONE] did.
	tokens := func(r *bufio.Reader, n int) (got int, done bool) {
		for got < n {
			line, err := r.ReadString('\n')
			if err != nil {
				return got, false
			}
			ev, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			switch {
			case !ok:
			case ev == "[DONE]":
				return got, true
			case strings.Contains(ev, `"content":"`) && !strings.Contains(ev, `"content":""`):
				got++
			}
		}
		return got, false
	}

	r, closeBody := open(t.Context())
	defer closeBody()
	if got, _ := tokens(r, 3); got != 3 {
		t.Fatalf("%d tokens before the stall, want 3", got)
	}
	waitFor(t, "the stream to stall", func() bool { return e.Stats().Stalled == 1 })
	if st := e.Stats(); st.InFlight != 1 || st.Completed != 0 {
		t.Fatalf("after three tokens: in flight %d, completed %d; want the stream stalled (1, 0)", st.InFlight, st.Completed)
	}
	setFaults(t, c, e, `{"stall_after_tokens":0}`)
	if got, done := tokens(r, 100); got != 7 || !done {
		t.Errorf("after the stall: %d more tokens, [DONE] %v; want 7 and [DONE]", got, done)
	}

	// A client that leaves a stalled stream ends it.
	setFaults(t, c, e, `{"stall_after_tokens":2}`)
	ctx, cancel := context.WithCancel(t.Context())
	r, closeStalled := open(ctx)
	if got, _ := tokens(r, 2); got != 2 {
		t.Fatalf("%d tokens before the stall, want 2", got)
	}
	cancel()
	closeStalled()
	waitFor(t, "the abandoned stream to end", func() bool { st := e.Stats(); return st.InFlight == 0 && st.Stalled == 0 })
	if st := e.Stats(); st.Completed != 1 {
		t.Errorf("completed %d, want 1 (the abandoned stream is not an answer)", st.Completed)
	}
}

func TestFaultFailHealth(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant})
	c := testClient(t)
	setFaults(t, c, e, `{"fail_health":true}`)
	for _, path := range []string{"/health", "/health_generate"} {
		if status, _ := get(t, c, e.URL()+path); status != 503 {
			t.Errorf("%s: %d, want 503", path, status)
		}
	}
	setFaults(t, c, e, `{"fail_health":false}`)
	if status, _ := get(t, c, e.URL()+"/health"); status != 200 {
		t.Errorf("health after clearing: %d", status)
	}
}

func dialHealth(t *testing.T, url string) error {
	t.Helper()
	c := testClient(t) // fresh connections every time
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/health", nil)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func TestFaultRefuseConnections(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant})
	c := testClient(t)
	url := e.URL()
	setFaults(t, c, e, `{"refuse_connections":true}`)
	if err := dialHealth(t, url); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v, want connection refused", err)
	}
	if err := e.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	if err := dialHealth(t, url); err != nil || e.URL() != url {
		t.Fatalf("after toggling back: %v (url %s, was %s)", err, e.URL(), url)
	}
	// refuse_for_ms reopens by itself: the only way back for a separate process.
	setFaults(t, c, e, `{"refuse_for_ms":150}`)
	if err := dialHealth(t, url); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v", err)
	}
	waitFor(t, "the listener to reopen", func() bool { return dialHealth(t, url) == nil })
	if e.Faults().RefuseConnections {
		t.Error("refuse_connections still set after refuse_for_ms elapsed")
	}
}

func TestFaultLatencySynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, func(c *Config) { c.Mode = ModeInstant })
		h := e.routes()
		serve := func(method, path, body string) (*httptest.ResponseRecorder, time.Duration) {
			start := time.Now()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body)))
			return rec, time.Since(start)
		}
		if rec, _ := serve(http.MethodPost, "/sim/faults", `{"latency_ms":250}`); rec.Code != 200 {
			t.Fatalf("set faults: %d %s", rec.Code, rec.Body)
		}
		rec, took := serve(http.MethodPost, "/v1/chat/completions", chatBody)
		if rec.Code != 200 || took != 250*time.Millisecond {
			t.Errorf("with latency 250ms: status %d after %v", rec.Code, took)
		}
		serve(http.MethodPost, "/sim/faults", `{"latency_ms":0}`)
		if _, took := serve(http.MethodPost, "/v1/chat/completions", chatBody); took != 0 {
			t.Errorf("without latency: took %v", took)
		}
	})
}

func TestFaultSlownessSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, nil)
		h := e.routes()
		run := func() time.Duration {
			start := time.Now()
			rec := httptest.NewRecorder()
			// 800-token prompt (100 ms prefill) and one output token.
			body := `{"prompt":` + jsonString(words(800, "")) + `,"max_tokens":1}`
			h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/completions", strings.NewReader(body)))
			if rec.Code != 200 {
				t.Fatalf("status %d %s", rec.Code, rec.Body)
			}
			e.ranks[0].cache.flush()
			return time.Since(start)
		}
		base := run()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/sim/faults", bytes.NewReader([]byte(`{"slowness_factor":4}`))))
		if slow := run(); slow != 4*base || base == 0 {
			t.Errorf("slowness 4: %v, base %v", slow, base)
		}
	})
}

func jsonString(s string) string { return string(jsonx.AppendString(nil, s)) }

func TestFaultDieAfterTokensRPC(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, GRPC: true, Faults: Faults{DieAfterTokens: 2}})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	client := workerv1connect.NewDecodeServiceClient(&http.Client{Transport: tr}, e.URL(), connect.WithGRPC())
	stream, err := client.Decode(t.Context(), &workerv1.DecodeRequest{
		Prompt: &workerv1.Prompt{Input: &workerv1.Prompt_Text{Text: "die"}}, Sampling: &workerv1.SamplingParams{MaxTokens: 6}})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for stream.Receive() {
		got++
	}
	err = stream.Err()
	stream.Close()
	if got != 2 || err == nil {
		t.Errorf("received %d messages, err %v; want 2 and a broken stream", got, err)
	}
	if e.Stats().RecomputedPrompts != 1 {
		t.Errorf("a decode without handshake must recompute its prompt")
	}
}
