package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingEngine is an engine that records every generation leg it receives (path, headers, JSON
// body) and answers the way the engine of its kind does, just enough for the gateway to finish the
// request: the discovery routes of engine-protocols.md §3, SGLang's bootstrap rendezvous (a decode
// waits until the prefill of its room has arrived, as the decode engine waits for its KV) and vLLM's
// kv_transfer_params (only when the one-token prefill ended on its length cap:
// vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py request_finished).
type recordingEngine struct {
	kind, role    string // "sglang" | "vllm"; "prefill" | "decode"
	bootstrapPort int    // SGLang prefill: disaggregation_bootstrap_port in server info (0 = null)
	dpSize        int    // SGLang: dp_size in server info (0 means 1)
	omitKV        bool   // vLLM prefill: return no kv_transfer_params, like a stop on the first token
	mooncake      bool   // vLLM prefill: run a Mooncake bootstrap server (GET /query) on bootstrapPort
	rooms         *rooms
	auxPaths      map[string]bool // non-generation POST routes it serves (aux_test.go), recorded as legs
	serverInfo    string          // SGLang: more server info members, e.g. `"max_running_requests":8`
	metrics       string          // vLLM: its GET /metrics exposition (404 when empty)
	held          chan struct{}   // when set, each generation leg sends here, then waits for release
	release       chan struct{}   // closed to let held legs answer
	srv           *httptest.Server

	mu   sync.Mutex
	legs []recordedLeg
}

type recordedLeg struct {
	Path   string
	Header http.Header
	Body   map[string]any
}

// kvParams is what the recording vLLM prefill returns, and so what the decode must receive.
const kvParams = `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],"remote_engine_id":"rec-engine","remote_request_id":"r-1","remote_host":"10.9.8.7","remote_port":5600,"tp_size":1}`

// mooncakeEngineIDs are what the recording Mooncake prefill's bootstrap server lists, by rank.
var mooncakeEngineIDs = []string{"engine-rank-0", "engine-rank-1"}

// startBootstrap runs a Mooncake bootstrap server: GET /query lists the engine id of each data-parallel
// rank (mooncake_connector_proxy.py get_prefiller_info). It returns its port.
func startBootstrap(t *testing.T) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/query" {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, 200, `{"0":{"engine_id":"`+mooncakeEngineIDs[0]+`"},"1":{"engine_id":"`+mooncakeEngineIDs[1]+`"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

func startEngine(t *testing.T, e *recordingEngine, listen string) *recordingEngine {
	t.Helper()
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			t.Skipf("cannot listen on %s: %v", listen, err)
		}
		e.srv.Listener = ln
	}
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e
}

func (e *recordingEngine) recorded() []recordedLeg {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]recordedLeg(nil), e.legs...)
}

func (e *recordingEngine) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/health":
		w.WriteHeader(200)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		writeJSON(w, 200, `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"`+e.kind+`"}]}`)
	case r.Method == http.MethodGet && e.kind == "sglang" && (r.URL.Path == "/get_server_info" || r.URL.Path == "/server_info"):
		port := "null"
		if e.bootstrapPort > 0 {
			port = fmt.Sprint(e.bootstrapPort)
		}
		extra := ""
		if e.serverInfo != "" {
			extra = "," + e.serverInfo
		}
		writeJSON(w, 200, `{"model_path":"m","tp_size":1,"dp_size":`+fmt.Sprint(max(e.dpSize, 1))+`,"disaggregation_mode":"`+e.role+`","disaggregation_bootstrap_port":`+port+extra+`}`)
	case r.Method == http.MethodGet && e.kind == "vllm" && r.URL.Path == "/metrics" && e.metrics != "":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, e.metrics)
	case r.Method == http.MethodGet && e.kind == "vllm" && r.URL.Path == "/version":
		writeJSON(w, 200, `{"version":"0.11.0"}`)
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions" || r.URL.Path == "/generate"):
		e.generate(w, r)
	case r.Method == http.MethodPost && e.auxPaths[r.URL.Path]:
		e.aux(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (e *recordingEngine) generate(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // rooms are 63-bit integers: a float64 would round them
	if err := dec.Decode(&body); err != nil {
		writeJSON(w, 400, `{"error":{"message":"bad json"}}`)
		return
	}
	e.mu.Lock()
	e.legs = append(e.legs, recordedLeg{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	e.mu.Unlock()
	if e.held != nil {
		select {
		case e.held <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		select {
		case <-e.release:
		case <-r.Context().Done():
			return
		}
	}

	if e.kind == "sglang" {
		for _, room := range roomsOf(body["bootstrap_room"]) {
			if e.role == "prefill" {
				e.rooms.arrive(room)
			} else if !e.rooms.wait(r, room) {
				writeJSON(w, 500, `{"error":{"message":"KV cache of bootstrap room did not arrive"}}`)
				return
			}
		}
	}
	if e.kind == "vllm" {
		// Mooncake: the decode fetches the KV the prefill keeps under the transfer id, so it waits for
		// that prefill (as the connector's decode does).
		if kv, ok := body["kv_transfer_params"].(map[string]any); ok {
			if id, ok := kv["transfer_id"].(string); ok {
				if e.role == "prefill" {
					e.rooms.arrive(id)
				} else if !e.rooms.wait(r, id) {
					writeJSON(w, 500, `{"error":{"message":"KV of the transfer did not arrive"}}`)
					return
				}
			}
		}
	}
	finish := "stop"
	extra := ""
	if e.kind == "vllm" && e.role == "prefill" && !e.mooncake {
		if mt, _ := body["max_tokens"].(json.Number); mt == "1" && !e.omitKV {
			finish, extra = "length", `,"kv_transfer_params":`+kvParams
		}
	}
	stream, _ := body["stream"].(bool)
	prompts := 1
	switch p := body["prompt"].(type) {
	case []any:
		if len(p) > 0 {
			if _, tok := p[0].(float64); !tok {
				prompts = len(p)
			}
		}
	}
	switch r.URL.Path {
	case "/v1/chat/completions":
		if stream {
			sse(w, `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"}}]}`,
				`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"`+finish+`"}]}`)
			return
		}
		writeJSON(w, 200, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"`+finish+`"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`+extra+`}`)
	case "/v1/completions":
		var choices []string
		for i := range prompts {
			choices = append(choices, fmt.Sprintf(`{"index":%d,"text":"ok","finish_reason":"%s"}`, i, finish))
		}
		if stream {
			sse(w, `{"id":"c","object":"text_completion","choices":[`+strings.Join(choices, ",")+`]}`)
			return
		}
		writeJSON(w, 200, `{"id":"c","object":"text_completion","choices":[`+strings.Join(choices, ",")+`],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`+extra+`}`)
	case "/generate":
		one := `{"text":"ok","meta_info":{"id":"g","prompt_tokens":3,"completion_tokens":1,"finish_reason":{"type":"` + finish + `"},"input_token_logprobs":[[-0.5,1,null]]}}`
		if stream {
			sse(w, one)
			return
		}
		if n := batchOf(body); n > 0 {
			writeJSON(w, 200, "["+strings.TrimSuffix(strings.Repeat(one+",", n), ",")+"]")
			return
		}
		writeJSON(w, 200, one)
	}
}

func batchOf(body map[string]any) int {
	if t, ok := body["text"].([]any); ok {
		return len(t)
	}
	if ids, ok := body["input_ids"].([]any); ok && len(ids) > 0 {
		if _, nested := ids[0].([]any); nested {
			return len(ids)
		}
	}
	return 0
}

func roomsOf(v any) []string {
	switch r := v.(type) {
	case nil:
		return nil
	case []any:
		out := make([]string, len(r))
		for i, x := range r {
			out[i] = fmt.Sprint(x)
		}
		return out
	}
	return []string{fmt.Sprint(v)}
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func sse(w http.ResponseWriter, frames ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, f := range frames {
		_, _ = io.WriteString(w, "data: "+f+"\n\n")
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// rooms is the bootstrap rendezvous of the recording SGLang engines.
type rooms struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (r *rooms) get(room string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = map[string]chan struct{}{}
	}
	c, ok := r.ch[room]
	if !ok {
		c = make(chan struct{})
		r.ch[room] = c
	}
	return c
}

func (r *rooms) arrive(room string) {
	c := r.get(room)
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-c: // two prefills on one room: the collision SGLang has with n > 1
	default:
		close(c)
	}
}

func (r *rooms) wait(req *http.Request, room string) bool {
	t := time.NewTimer(10 * time.Second) // an engine's bootstrap timeout, much shortened
	defer t.Stop()
	select {
	case <-r.get(room):
		return true
	case <-req.Context().Done():
	case <-t.C:
	}
	return false
}

// aux records a non-generation request and answers an empty JSON object.
func (e *recordingEngine) aux(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	e.mu.Lock()
	e.legs = append(e.legs, recordedLeg{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	e.mu.Unlock()
	writeJSON(w, 200, `{}`)
}
