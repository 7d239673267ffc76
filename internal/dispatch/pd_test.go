package dispatch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// Unit tests of the PD flows around scripted engines: what each leg carries, how answers are merged,
// and that every slot and load guard is given back on every path. The bodies the engines must
// receive are pinned, with their upstream sources, in tests/conformance.

// leg is one request an engine received.
type leg struct {
	role, path, requestID, host string
	traceparent                 string
	body                        map[string]any
}

// engine is a scripted engine: answer decides each reply; every request is recorded.
type engine struct {
	srv    *httptest.Server
	role   string
	mu     sync.Mutex
	legs   []leg
	answer func(w http.ResponseWriter, l leg)
}

func newEngine(t *testing.T, role string, answer func(w http.ResponseWriter, l leg)) *engine {
	t.Helper()
	e := &engine{role: role, answer: answer}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		l := leg{role: role, path: r.URL.Path, requestID: r.Header.Get("X-Request-Id"), host: r.Host, traceparent: r.Header.Get("Traceparent")}
		if err := json.Unmarshal(b, &l.body); err != nil {
			http.Error(w, "bad json", 400)
			return
		}
		e.mu.Lock()
		e.legs = append(e.legs, l)
		e.mu.Unlock()
		e.answer(w, l)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) recorded() []leg {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]leg(nil), e.legs...)
}

// rendezvous makes a scripted decode wait for the prefill of its room, as SGLang's decode waits for
// its KV: without it the fake decode could answer before the prefill leg was even sent.
type rendezvous struct {
	mu    sync.Mutex
	rooms map[string]chan struct{}
}

func (r *rendezvous) ch(room any) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rooms == nil {
		r.rooms = map[string]chan struct{}{}
	}
	k := fmt.Sprint(room)
	c, ok := r.rooms[k]
	if !ok {
		c = make(chan struct{})
		r.rooms[k] = c
	}
	return c
}

// prefill wraps a prefill answer: it marks the room as arrived.
func (r *rendezvous) prefill(answer func(http.ResponseWriter, leg)) func(http.ResponseWriter, leg) {
	return func(w http.ResponseWriter, l leg) {
		close(r.ch(l.body["bootstrap_room"]))
		answer(w, l)
	}
}

// decode wraps a decode answer: it waits for the room's prefill first.
func (r *rendezvous) decode(answer func(http.ResponseWriter, leg)) func(http.ResponseWriter, leg) {
	return func(w http.ResponseWriter, l leg) {
		<-r.ch(l.body["bootstrap_room"])
		answer(w, l)
	}
}

func writeJSON(w http.ResponseWriter, status int, v string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, v)
}

// chatAnswer is an OpenAI chat.completion whose content names the room the request carried.
func chatAnswer(w http.ResponseWriter, l leg) {
	writeJSON(w, 200, fmt.Sprintf(`{"id":"chatcmpl-%v","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"room %v"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`,
		l.body["bootstrap_room"], l.body["bootstrap_room"]))
}

type pdWorker struct {
	url      string
	role     worker.Role
	protocol worker.Protocol
}

// newPDDispatcher builds a PD dispatcher over Ready workers serving model "m", with admission on
// (limit per prefill worker 1, queue 8).
func newPDDispatcher(t *testing.T, cfg Config, ws ...pdWorker) (*Dispatcher, *fakeMetrics) {
	t.Helper()
	specs := make([]worker.Spec, len(ws))
	for i, w := range ws {
		specs[i] = worker.Spec{URL: w.url, Role: w.role, Protocol: w.protocol}
	}
	return newPDDispatcherSpecs(t, cfg, specs...)
}

// newPDDispatcherSpecs is newPDDispatcher over full worker specs (their models set to "m").
func newPDDispatcherSpecs(t *testing.T, cfg Config, specs ...worker.Spec) (*Dispatcher, *fakeMetrics) {
	t.Helper()
	cfg.PD = true
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	for _, s := range specs {
		s.Models = []string{"m"}
		if _, err := reg.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	pols, err := placement.NewSet(placement.Config{Settings: placement.Settings{Policy: placement.PolicyRoundRobin}})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admission.New(admission.Settings{MaxInflightPerWorker: 1, QueueSize: 8, QueueTimeout: 5 * time.Second}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	m := &fakeMetrics{}
	d, err := New(cfg, Deps{Registry: reg, Policies: pols, Admission: adm, HTTP: &http.Client{Transport: tr}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return d, m
}

// assertReleased checks that no admission slot and no load is left anywhere.
func assertReleased(t *testing.T, d *Dispatcher) {
	t.Helper()
	for url, n := range d.d.Admission.Status().Inflight {
		if n != 0 {
			t.Errorf("admission slots still held on %s: %d", url, n)
		}
	}
	for _, w := range d.d.Registry.Snapshot().All() {
		if l := w.Load(); l != 0 {
			t.Errorf("load of %s = %d, want 0", w.URL(), l)
		}
	}
}

func do(t *testing.T, d *Dispatcher, route Route, body string, h http.Header) (*Response, []byte, error) {
	t.Helper()
	if h == nil {
		h = http.Header{}
	}
	resp, err := d.Do(t.Context(), &Request{Route: route, Body: []byte(body), Header: h})
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return resp, b, nil
}

// SGLang gives all n samples of a prompt one room, so n > 1 is split into n single-sample requests,
// each with its own room, all under one admission slot, and merged.
func TestSGLangSplitsNIntoSingleSamples(t *testing.T) {
	var dp atomic.Pointer[Dispatcher] // set after the engines start; sockets are no happens-before edge
	var inflightSeen []int
	var mu sync.Mutex
	var rv rendezvous
	// While a sample's prefill leg is in flight its guard holds the slot: the worker must show one.
	p := newEngine(t, "prefill", rv.prefill(func(w http.ResponseWriter, l leg) {
		held := 0
		for _, n := range dp.Load().d.Admission.Status().Inflight {
			held += n
		}
		mu.Lock()
		inflightSeen = append(inflightSeen, held)
		mu.Unlock()
		chatAnswer(w, l)
	}))
	dec := newEngine(t, "decode", rv.decode(chatAnswer))
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	dp.Store(d)

	resp, body, err := do(t, d, RouteChat, `{"model":"m","n":3,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Choices []struct {
			Index   int `json:"index"`
			Message struct{ Content string }
		}
		Usage struct{ PromptTokens, CompletionTokens, TotalTokens int } `json:"usage"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("merged answer %s: %v", body, err)
	}
	if len(got.Choices) != 3 {
		t.Fatalf("merged answer has %d choices, want 3: %s", len(got.Choices), body)
	}
	rooms := map[string]bool{}
	for i, c := range got.Choices {
		if c.Index != i {
			t.Errorf("choice %d has index %d", i, c.Index)
		}
		rooms[c.Message.Content] = true
	}
	if len(rooms) != 3 {
		t.Errorf("samples did not have distinct rooms: %v", rooms)
	}
	if body := string(body); !strings.Contains(body, `"prompt_tokens":5,"completion_tokens":6,"total_tokens":11`) {
		t.Errorf("usage not merged (prompt once, completions summed): %s", body)
	}
	pl, dl := p.recorded(), dec.recorded()
	if len(pl) != 3 || len(dl) != 3 {
		t.Fatalf("legs: %d prefill, %d decode; want 3 each", len(pl), len(dl))
	}
	for _, l := range append(pl, dl...) {
		if l.body["n"] != float64(1) {
			t.Errorf("%s leg carries n=%v, want 1", l.role, l.body["n"])
		}
		if _, list := l.body["bootstrap_room"].([]any); list {
			t.Errorf("%s leg carries a room list for one prompt", l.role)
		}
		if !strings.HasPrefix(l.requestID, resp.RequestID+"-") {
			t.Errorf("%s leg request id %q does not derive from %q", l.role, l.requestID, resp.RequestID)
		}
	}
	mu.Lock() // the handler appends under mu; a socket is no happens-before edge for the race detector
	seen := slices.Clone(inflightSeen)
	mu.Unlock()
	if len(seen) != 3 {
		t.Errorf("prefill saw %d legs", len(seen))
	}
	for _, n := range seen {
		if n != 1 {
			t.Errorf("admission slots held during the samples = %d, want 1 (one per client request)", n)
		}
	}
	assertReleased(t, d)
}

func TestSGLangSplitStreamMerged(t *testing.T) {
	sse := func(w http.ResponseWriter, l leg) {
		w.Header().Set("Content-Type", "text/event-stream")
		room := l.body["bootstrap_room"]
		fmt.Fprintf(w, "data: {\"id\":\"c-%v\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"r%v\"}}]}\n\n", room, room)
		fmt.Fprintf(w, "data: {\"id\":\"c-%v\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", room)
		fmt.Fprintf(w, "data: {\"id\":\"c-%v\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1,\"total_tokens\":5}}\n\n", room)
		io.WriteString(w, "data: [DONE]\n\n")
	}
	p := newEngine(t, "prefill", sse)
	dec := newEngine(t, "decode", sse)
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	resp, body, err := do(t, d, RouteChat,
		`{"model":"m","n":2,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Stream {
		t.Error("merged stream not marked as SSE")
	}
	frames := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	if last := frames[len(frames)-1]; last != "data: [DONE]" || strings.Count(string(body), "[DONE]") != 1 {
		t.Fatalf("merged stream must end with exactly one [DONE]:\n%s", body)
	}
	ids := map[string]bool{}
	indexes := map[float64]int{}
	usages := 0
	for _, f := range frames[:len(frames)-1] {
		var c struct {
			ID      string
			Choices []struct{ Index float64 }
			Usage   *struct{ PromptTokens, CompletionTokens int } `json:"usage"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &c); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		ids[c.ID] = true
		for _, ch := range c.Choices {
			indexes[ch.Index]++
		}
		if c.Usage != nil {
			usages++
			if !strings.Contains(f, `"prompt_tokens":4,"completion_tokens":2,"total_tokens":6`) {
				t.Errorf("merged usage %s", f)
			}
		}
	}
	if len(ids) != 1 {
		t.Errorf("frames carry %d ids, want one: %v", len(ids), ids)
	}
	if indexes[0] != 2 || indexes[1] != 2 {
		t.Errorf("choice indexes seen %v, want two frames each of 0 and 1", indexes)
	}
	if usages != 1 {
		t.Errorf("%d usage chunks, want 1", usages)
	}
	assertReleased(t, d)
}

func TestSGLangSampleFailureFailsTheRequest(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	p := newEngine(t, "prefill", chatAnswer)
	dec := newEngine(t, "decode", func(w http.ResponseWriter, l leg) {
		mu.Lock()
		calls++
		fail := calls == 2
		mu.Unlock()
		if fail {
			writeJSON(w, 500, `{"error":{"message":"KV transfer failed"}}`)
			return
		}
		chatAnswer(w, l)
	})
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	_, _, err := do(t, d, RouteChat, `{"model":"m","n":3,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if e := apierror.From(err); err == nil || e.Status != 500 || !strings.Contains(e.Message, "KV transfer failed") {
		t.Fatalf("Do() error = %v, want the failing sample's 500", err)
	}
	assertReleased(t, d)
}

func TestSGLangBatchWithNRefused(t *testing.T) {
	p := newEngine(t, "prefill", chatAnswer)
	dec := newEngine(t, "decode", chatAnswer)
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	_, _, err := do(t, d, RouteCompletions, `{"model":"m","n":2,"prompt":["a","b"]}`, nil)
	if e := apierror.From(err); err == nil || e.Status != 400 || e.Param != "n" {
		t.Fatalf("Do() error = %v, want a 400 naming n", err)
	}
	if n := len(p.recorded()) + len(dec.recorded()); n != 0 {
		t.Errorf("%d legs sent for a refused request", n)
	}
	assertReleased(t, d)
}

// An engine's client error (SGLang's OpenAI server shape) keeps its status and message, is not
// retried, and does not count against the worker's breaker.
func TestEngineClientErrorRelayed(t *testing.T) {
	const tooLong = `{"object":"error","message":"The input (40000 tokens) is longer than the model's context length (32768 tokens).","type":"BadRequestError","param":null,"code":400}`
	bad := func(w http.ResponseWriter, _ leg) { writeJSON(w, 400, tooLong) }
	p := newEngine(t, "prefill", bad)
	dec := newEngine(t, "decode", bad)
	d, _ := newPDDispatcher(t, Config{Retry: RetryConfig{MaxAttempts: 3, Backoff: tinyBackoff}},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	_, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"long"}]}`, nil)
	e := apierror.From(err)
	if e.Status != 400 || e.Type != "invalid_request_error" || !strings.Contains(e.Message, "longer than the model's context length") {
		t.Fatalf("Do() error = %d %s %q, want 400 with the engine's message", e.Status, e.Type, e.Message)
	}
	// One attempt sends at most one leg to each engine (the other may be cancelled before it is
	// sent); a retry would send more.
	if np, nd := len(p.recorded()), len(dec.recorded()); np > 1 || nd > 1 || np+nd == 0 {
		t.Errorf("legs sent: %d prefill, %d decode; want one attempt (a client error is not retried)", np, nd)
	}
	for _, w := range d.d.Registry.Snapshot().All() {
		if s := w.Breaker().State(time.Now()); s != worker.BreakerClosed {
			t.Errorf("breaker of %s is %v after a client error", w.URL(), s)
		}
	}
	assertReleased(t, d)
}

func TestEngineMessageScrubbed(t *testing.T) {
	p := newEngine(t, "prefill", func(w http.ResponseWriter, l leg) {
		writeJSON(w, 400, `{"error":{"message":"bad request to http://`+l.host+` (host `+l.host+`)"}}`)
	})
	dec := newEngine(t, "decode", chatAnswer)
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolVLLM},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolVLLM})
	_, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	e := apierror.From(err)
	if e.Status != 400 || strings.Contains(e.Message, "127.0.0.1") || !strings.Contains(e.Message, "<worker>") {
		t.Errorf("Do() error = %d %q, want 400 with the worker's address removed", e.Status, e.Message)
	}
	if n := len(dec.recorded()); n != 0 {
		t.Errorf("decode called after the prefill refused the request")
	}
	assertReleased(t, d)
}

// vLLM's NIXL connector returns no kv_transfer_params when the one token was EOS or a stop string:
// the decode then goes without them and recomputes, as toy_proxy_server.py does.
func TestVLLMPrefillWithoutKVParams(t *testing.T) {
	p := newEngine(t, "prefill", func(w http.ResponseWriter, _ leg) {
		writeJSON(w, 200, `{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"."},"finish_reason":"stop"}],"kv_transfer_params":null}`)
	})
	dec := newEngine(t, "decode", chatAnswer)
	d, m := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolVLLM},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolVLLM})
	resp, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":20}`, nil)
	if err != nil {
		t.Fatalf("Do() = %v, want 200 (decode recomputes)", err)
	}
	dl := dec.recorded()
	if len(dl) != 1 {
		t.Fatalf("%d decode legs", len(dl))
	}
	if _, ok := dl[0].body["kv_transfer_params"]; ok {
		t.Errorf("decode got kv_transfer_params %v, want none", dl[0].body["kv_transfer_params"])
	}
	if pl := p.recorded(); pl[0].requestID != resp.RequestID || dl[0].requestID != resp.RequestID {
		t.Errorf("request ids: prefill %q decode %q response %q; want one id on both legs", pl[0].requestID, dl[0].requestID, resp.RequestID)
	}
	if !strings.Contains(strings.Join(m.upstream, ","), "kv_fallback vllm_nixl") {
		t.Errorf("fallback not counted: %v", m.upstream)
	}
	assertReleased(t, d)
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestRequestIDGeneratedOnBothLegs(t *testing.T) {
	var rv rendezvous
	p := newEngine(t, "prefill", rv.prefill(chatAnswer))
	dec := newEngine(t, "decode", rv.decode(chatAnswer))
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	resp, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !uuidV4.MatchString(resp.RequestID) || resp.Header.Get(HeaderRequestID) != resp.RequestID {
		t.Fatalf("request id %q (header %q), want a UUID v4 in both", resp.RequestID, resp.Header.Get(HeaderRequestID))
	}
	if a, b := p.recorded()[0].requestID, dec.recorded()[0].requestID; a != resp.RequestID || b != resp.RequestID {
		t.Errorf("legs carried %q and %q, want %q", a, b, resp.RequestID)
	}
	resp2, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp2.RequestID == resp.RequestID {
		t.Error("two requests got the same generated id")
	}
}

// A mixed fleet only pairs workers whose KV handoffs match.
func TestMixedFleetPairsByHandoff(t *testing.T) {
	type pair struct{ prefill, decode string }
	var mu sync.Mutex
	var pairs []pair
	record := func(w http.ResponseWriter, l leg) { chatAnswer(w, l) }
	sp := newEngine(t, "prefill", record)
	vp := newEngine(t, "prefill", func(w http.ResponseWriter, _ leg) {
		writeJSON(w, 200, `{"choices":[],"kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":1,"do_remote_prefill":true}}`)
	})
	sd := newEngine(t, "decode", record)
	vd := newEngine(t, "decode", record)
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{sp.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{vp.srv.URL, worker.RolePrefill, worker.ProtocolVLLM},
		pdWorker{sd.srv.URL, worker.RoleDecode, worker.ProtocolSGLang},
		pdWorker{vd.srv.URL, worker.RoleDecode, worker.ProtocolVLLM})
	for range 8 {
		resp, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		pairs = append(pairs, pair{resp.PrefillWorker, resp.Worker})
		mu.Unlock()
	}
	seen := map[pair]int{}
	for _, p := range pairs {
		seen[p]++
	}
	want := map[pair]bool{{sp.srv.URL, sd.srv.URL}: true, {vp.srv.URL, vd.srv.URL}: true}
	for p, n := range seen {
		if !want[p] {
			t.Errorf("pair %v formed %d times across handoffs", p, n)
		}
	}
	if len(seen) != 2 {
		t.Errorf("pairs used %v, want both same-protocol pairs", seen)
	}
	for _, l := range sd.recorded() {
		if _, ok := l.body["bootstrap_room"]; !ok {
			t.Error("SGLang decode leg without bootstrap fields")
		}
	}
	for _, l := range vd.recorded() {
		if _, ok := l.body["bootstrap_room"]; ok {
			t.Error("vLLM decode leg with SGLang bootstrap fields")
		}
	}
	// SGLang's native /generate only goes to the SGLang pair.
	if _, _, err := do(t, d, RouteGenerate, `{"text":"x","sampling_params":{"max_new_tokens":2}}`, nil); err != nil {
		t.Fatalf("/generate in a mixed fleet: %v", err)
	}
	if n := len(vp.recorded()); n != 4 {
		t.Errorf("vLLM prefill served %d requests, want the 4 chat ones only", n)
	}
	assertReleased(t, d)
}

func TestNoCompatiblePair(t *testing.T) {
	sp := newEngine(t, "prefill", chatAnswer)
	vd := newEngine(t, "decode", chatAnswer)
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{sp.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{vd.srv.URL, worker.RoleDecode, worker.ProtocolVLLM})
	_, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	if e := apierror.From(err); e.Status != 503 || e.Code != apierror.CodeNoAvailableWorkers || !strings.Contains(e.Message, "KV handoff") {
		t.Fatalf("Do() = %v, want 503 explaining no compatible pair", err)
	}
	if n := len(sp.recorded()) + len(vd.recorded()); n != 0 {
		t.Errorf("%d legs sent to an incompatible pair", n)
	}
	assertReleased(t, d)

	vp := newEngine(t, "prefill", chatAnswer)
	d2, _ := newPDDispatcher(t, Config{},
		pdWorker{vp.srv.URL, worker.RolePrefill, worker.ProtocolVLLM},
		pdWorker{vd.srv.URL, worker.RoleDecode, worker.ProtocolVLLM})
	_, _, err = do(t, d2, RouteGenerate, `{"text":"x"}`, nil)
	if e := apierror.From(err); e.Status != 400 {
		t.Fatalf("/generate on vLLM workers: %v, want 400", err)
	}
}

// SGLang computes input logprobs on the prefill leg: mini_lb prepends them to every decode frame.
func TestGenerateStreamMergesInputLogprobs(t *testing.T) {
	p := newEngine(t, "prefill", func(w http.ResponseWriter, _ leg) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"text\":\"\",\"meta_info\":{\"input_token_logprobs\":[[-1.5,7,null]]}}\n\ndata: [DONE]\n\n")
	})
	dec := newEngine(t, "decode", func(w http.ResponseWriter, _ leg) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[]}}\n\n")
		io.WriteString(w, "data: {\"text\":\"ab\",\"meta_info\":{\"input_token_logprobs\":[]}}\n\ndata: [DONE]\n\n")
	})
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	_, body, err := do(t, d, RouteGenerate, `{"text":"x","stream":true,"return_logprob":true}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[[-1.5,7,null]]}}\n\n" +
		"data: {\"text\":\"ab\",\"meta_info\":{\"input_token_logprobs\":[[-1.5,7,null]]}}\n\ndata: [DONE]\n\n"
	if !bytes.Equal(body, []byte(want)) {
		t.Errorf("stream =\n%s\nwant\n%s", body, want)
	}
	assertReleased(t, d)
}

// n > 1 on vLLM goes to a decode worker alone (the KV handoff has one consumer).
func TestVLLMNGreaterThanOneIsDecodeOnly(t *testing.T) {
	p := newEngine(t, "prefill", chatAnswer)
	dec := newEngine(t, "decode", chatAnswer)
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolVLLM},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolVLLM})
	if _, _, err := do(t, d, RouteChat, `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, nil); err != nil {
		t.Fatal(err)
	}
	if len(p.recorded()) != 0 || len(dec.recorded()) != 1 || dec.recorded()[0].body["n"] != float64(2) {
		t.Errorf("legs: prefill %v decode %v; want one decode leg with n=2", p.recorded(), dec.recorded())
	}
	assertReleased(t, d)
}
