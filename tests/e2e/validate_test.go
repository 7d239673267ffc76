package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/protobuf/types/known/structpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// legRecorder is a recording engine: a reverse proxy in front of a simulated engine that records every
// POST (a leg: generation or any other forwarded route) before passing it on.
type legRecorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	legs []string
}

func recordInFront(t *testing.T, engineURL string) *legRecorder {
	t.Helper()
	u, err := url.Parse(engineURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	r := &legRecorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			r.mu.Lock()
			r.legs = append(r.legs, req.URL.Path)
			r.mu.Unlock()
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *legRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.legs)
}

// recordedPD starts an SGLang PD pair of simulated engines behind recorders and a gateway in front of
// the recorders, with admission on (limit 1, queue 1).
func recordedPD(t *testing.T, extra ...string) (gw *gateway, c *sim.Cluster, p, d *legRecorder) {
	t.Helper()
	c = startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{Mode: sim.ModeInstant, BootstrapTimeout: time.Minute}})
	pe, de := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
	p, d = recordInFront(t, pe.URL()), recordInFront(t, de.URL())
	args := append([]string{"--pd-disaggregation", "--disable-retries", "--prefill-max-inflight-requests-per-worker", "1",
		"--prefill-queue-size", "1", "--prefill", p.srv.URL, strconv.Itoa(pe.BootstrapPort()), "--decode", d.srv.URL}, extra...)
	gw = startGateway(t, app.Options{}, args...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	return gw, c, p, d
}

// openAIError is OpenAI's error body, param included (null when the error names no field).
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

const chatMsgs = `"model":"sim-model","messages":[{"role":"user","content":"hi"}]`

// badInputs: each is refused by the gateway with a 400 naming the field, before any engine sees it.
var badInputs = []struct {
	name, path, body  string
	wantParam, wantIn string
}{
	{"temperature a string", "/v1/chat/completions", `{` + chatMsgs + `,"temperature":"hot"}`, "temperature", "temperature must be a number, got a string"},
	{"temperature negative", "/v1/chat/completions", `{` + chatMsgs + `,"temperature":-1}`, "temperature", "temperature must be at least 0"},
	{"top_p zero", "/v1/chat/completions", `{` + chatMsgs + `,"top_p":0}`, "top_p", "top_p must be in (0, 1]"},
	{"max_tokens negative", "/v1/chat/completions", `{` + chatMsgs + `,"max_tokens":-5}`, "max_tokens", "max_tokens must be at least 1, got -5"},
	{"max_tokens a string", "/v1/chat/completions", `{` + chatMsgs + `,"max_tokens":"10"}`, "max_tokens", "must be an integer, got a string"},
	{"max_completion_tokens zero", "/v1/chat/completions", `{` + chatMsgs + `,"max_completion_tokens":0}`, "max_completion_tokens", "at least 1"},
	{"min_tokens above max_tokens", "/v1/chat/completions", `{` + chatMsgs + `,"max_tokens":2,"min_tokens":3}`, "min_tokens", "at most max_tokens (2)"},
	{"n too large", "/v1/chat/completions", `{` + chatMsgs + `,"n":200}`, "n", "between 1 and 128"},
	{"presence_penalty out of range", "/v1/chat/completions", `{` + chatMsgs + `,"presence_penalty":9}`, "presence_penalty", "in [-2, 2]"},
	{"stop a number", "/v1/chat/completions", `{` + chatMsgs + `,"stop":5}`, "stop", "a string or an array of strings"},
	{"logit_bias word keys", "/v1/chat/completions", `{` + chatMsgs + `,"logit_bias":{"hello":1}}`, "logit_bias", "token ids"},
	{"seed fractional", "/v1/chat/completions", `{` + chatMsgs + `,"seed":1.5}`, "seed", "seed must be an integer"},
	{"stream a string", "/v1/chat/completions", `{` + chatMsgs + `,"stream":"yes"}`, "stream", "stream must be a boolean"},
	{"stream_options a bool", "/v1/chat/completions", `{` + chatMsgs + `,"stream":true,"stream_options":true}`, "stream_options", "must be an object"},
	{"response_format a string", "/v1/chat/completions", `{` + chatMsgs + `,"response_format":"json"}`, "response_format", "must be an object"},
	{"tools a string", "/v1/chat/completions", `{` + chatMsgs + `,"tools":"search"}`, "tools", "tools must be an array"},
	{"tool without a name", "/v1/chat/completions", `{` + chatMsgs + `,"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name", "is required"},
	{"message without a role", "/v1/chat/completions", `{"model":"sim-model","messages":[{"content":"hi"}]}`, "messages[0].role", "is required"},
	{"message content a number", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":7}]}`, "messages[0].content", "got a number"},
	{"completions logprobs a bool", "/v1/completions", `{"model":"sim-model","prompt":"hi","logprobs":true}`, "logprobs", "must be an integer, got a boolean"},
	{"completions prompt a number", "/v1/completions", `{"model":"sim-model","prompt":5}`, "prompt", "prompt must be a string or an array"},
	{"completions echo a string", "/v1/completions", `{"model":"sim-model","prompt":"hi","echo":"no"}`, "echo", "echo must be a boolean"},
	{"embeddings without a model", "/v1/embeddings", `{"input":"hi"}`, "model", "model is required"},
	{"responses temperature negative", "/v1/responses", `{"model":"sim-model","input":"hi","temperature":-1}`, "temperature", "at least 0"},
	{"generate max_new_tokens negative", "/generate", `{"text":"hi","sampling_params":{"max_new_tokens":-5}}`, "sampling_params.max_new_tokens", "at least 0, got -5"},
}

// postBad sends each bad input over raw HTTP and checks the 400: OpenAI's shape, the field in param, the
// message in the client's terms (no Go type names).
func postBad(t *testing.T, gwURL string) {
	t.Helper()
	for _, tt := range badInputs {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := post(context.Background(), gwURL+tt.path, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, b)
			}
			if resp.Header.Get("Retry-After") != "" {
				t.Errorf("a request that can never succeed got Retry-After %q", resp.Header.Get("Retry-After"))
			}
			var e openAIError
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("not OpenAI-shaped: %v: %s", err, b)
			}
			if e.Error.Type != "invalid_request_error" || e.Error.Code != "invalid_request" {
				t.Errorf("type %q code %q, want invalid_request_error invalid_request", e.Error.Type, e.Error.Code)
			}
			if e.Error.Param == nil || *e.Error.Param != tt.wantParam {
				t.Errorf("param %v, want %q (%s)", e.Error.Param, tt.wantParam, b)
			}
			if !strings.Contains(e.Error.Message, tt.wantIn) {
				t.Errorf("message %q does not say %q", e.Error.Message, tt.wantIn)
			}
			for _, internal := range []string{"Go struct", "float64", "apiRequest", "unmarshal"} {
				if strings.Contains(e.Error.Message, internal) {
					t.Errorf("message %q leaks %q", e.Error.Message, internal)
				}
			}
			if tt.path != "/generate" && strings.Contains(e.Error.Message, "max_new_tokens") {
				t.Errorf("message %q names an engine field the client never sent", e.Error.Message)
			}
		})
	}
}

// TestBadInputRefusedBeforeAnyLeg: every bad input of the table gets its 400 from the gateway through raw
// HTTP, the OpenAI SDK and the typed RPC, and no engine receives a leg; unknown fields and edge values
// pass, and what only the engine can judge (the context length) keeps the engine's answer.
func TestBadInputRefusedBeforeAnyLeg(t *testing.T) {
	t.Parallel()
	gw, _, p, d := recordedPD(t)
	chat := gw.URL + "/v1/chat/completions"

	t.Run("raw HTTP", func(t *testing.T) { postBad(t, gw.URL) })

	cl := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-unused"), option.WithMaxRetries(0))
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
	t.Run("openai-go", func(t *testing.T) {
		tests := []struct {
			name      string
			params    openai.ChatCompletionNewParams
			opts      []option.RequestOption
			wantParam string
		}{
			{"temperature negative", openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, Temperature: openai.Float(-0.5)}, nil, "temperature"},
			{"top_p above one", openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, TopP: openai.Float(1.5)}, nil, "top_p"},
			{"max_tokens zero", openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, MaxTokens: openai.Int(0)}, nil, "max_tokens"},
			{"frequency_penalty out of range", openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, FrequencyPenalty: openai.Float(-3)}, nil, "frequency_penalty"},
			{"logit_bias word keys", openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, LogitBias: map[string]int64{"hello": 1}}, nil, "logit_bias"},
			{"n zero", openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, N: openai.Int(0)}, nil, "n"},
			{"temperature a string (extra JSON)", openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs},
				[]option.RequestOption{option.WithJSONSet("temperature", "hot")}, "temperature"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := cl.Chat.Completions.New(context.Background(), tt.params, tt.opts...)
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) {
					t.Fatalf("err = %v, want an API error", err)
				}
				if apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != tt.wantParam || apiErr.Type != "invalid_request_error" {
					t.Errorf("got %d param %q type %q (%s), want 400 param %q", apiErr.StatusCode, apiErr.Param, apiErr.Type, apiErr.Message, tt.wantParam)
				}
			})
		}
	})

	t.Run("typed RPC", func(t *testing.T) {
		rpc := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, gw.URL)
		_, err := rpc.CreateChatCompletion(context.Background(), &openaiv1.CreateChatCompletionRequest{Model: "sim-model",
			Messages: []*openaiv1.ChatMessage{{Role: "user", Content: structpb.NewStringValue("hi")}}, Temperature: ptr(-1.0)})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "temperature must be at least 0") {
			t.Errorf("err = %v, want invalid_argument naming temperature", err)
		}
		_, err = rpc.CreateChatCompletion(context.Background(), &openaiv1.CreateChatCompletionRequest{Model: "sim-model",
			Messages: []*openaiv1.ChatMessage{{Role: "user", Content: structpb.NewStringValue("hi")}}, TopP: ptr(0.0)})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "top_p") {
			t.Errorf("err = %v, want invalid_argument naming top_p", err)
		}
	})

	if n := p.count() + d.count(); n != 0 {
		t.Fatalf("engines received %d legs for requests the gateway must refuse: prefill %v, decode %v", n, p.legs, d.legs)
	}

	t.Run("accepted", func(t *testing.T) {
		for _, body := range []string{
			// Unknown fields pass untouched: engines take many extras.
			`{` + chatMsgs + `,"max_tokens":2,"chat_template_kwargs":{"enable_thinking":false},"my_extra":[1,"x"],"separate_reasoning":true}`,
			// Edges, and values one engine accepts (SGLang takes temperature 2.5, vLLM top_k 0).
			`{` + chatMsgs + `,"max_tokens":1,"min_tokens":1,"temperature":2.5,"top_p":1,"presence_penalty":-2,"frequency_penalty":2,"top_k":-1,"seed":-7,"stop":["x"],"logit_bias":{"11":5},"stream":false}`,
		} {
			before := d.count()
			resp, err := post(context.Background(), chat, body)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: status %d: %s", body, resp.StatusCode, b)
			}
			if d.count() == before {
				t.Errorf("%s: answered without a decode leg", body)
			}
		}
	})

	t.Run("the engine still judges the context length", func(t *testing.T) {
		before := p.count() + d.count()
		resp, err := post(context.Background(), chat, `{`+chatMsgs+`,"max_tokens":100000000}`)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want the engine's 400", resp.StatusCode)
		}
		if e := decodeError(t, resp); !strings.Contains(e.Error.Message, "context length") {
			t.Errorf("message %q, want the engine's context-length message", e.Error.Message)
		}
		if p.count()+d.count() == before {
			t.Error("the gateway judged the context length itself: no leg reached an engine")
		}
	})
}

// TestBadInputWhileQueueFull: with the only slot held and the queue full, a valid request gets 429 but
// every bad input still gets its 400 (never a 429 telling the client to retry what can never work), and
// no leg reaches an engine.
func TestBadInputWhileQueueFull(t *testing.T) {
	t.Parallel()
	gw, c, p, d := recordedPD(t)
	chat := gw.URL + "/v1/chat/completions"
	pe := c.ByRole(sim.RolePrefill)[0]
	short := `{` + chatMsgs + `,"max_tokens":2}`
	if err := pe.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	a := goPost(ctxA, chat, short)
	waitFor(t, "A holds the slot", 10*time.Second, func() bool { return gw.Admission.Status().Inflight[p.srv.URL] == 1 })
	// A's two legs leave after its slot is taken: count them in before the snapshot below.
	waitFor(t, "A's legs reached the engines", 10*time.Second, func() bool { return p.count() == 1 && d.count() == 1 })
	b := goPost(context.Background(), chat, short)
	waitFor(t, "B queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })

	resp, err := post(context.Background(), chat, short)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("valid overflow: status %d, want 429: the queue is not full", resp.StatusCode)
	}
	resp.Body.Close()
	legs := p.count() + d.count()

	postBad(t, gw.URL)

	if got := p.count() + d.count(); got != legs {
		t.Errorf("bad inputs sent %d legs while the queue was full", got-legs)
	}
	if st := gw.Admission.Status(); st.QueuedTotal != 1 {
		t.Errorf("queued %d after the bad inputs, want B alone", st.QueuedTotal)
	}

	// Let A go (cancelled) and B through.
	if err := pe.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	cancelA()
	if r := <-a; r.err == nil {
		r.resp.Body.Close()
	}
	rb := <-b
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	rb.resp.Body.Close()
	if rb.resp.StatusCode != http.StatusOK {
		t.Errorf("B: status %d, want 200", rb.resp.StatusCode)
	}
}

// keyedEngine is a simulated engine that, like SGLang or vLLM started with --api-key, refuses every
// POST without "Authorization: Bearer <key>" with status (401, or 403).
func keyedEngine(t *testing.T, engineURL, key string, status int) *httptest.Server {
	t.Helper()
	u, err := url.Parse(engineURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Authorization") != "Bearer "+key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"error":"Unauthorized"}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestEngineAuthPassThrough is the Rust gateway's test_router_api_key_enforcement (smg-project/smg's
// integration suite: a mock worker started with --require-api-key, the gateway forwarding the client's
// Authorization): no key and a wrong key get the engine's 401, the right key a 200. With a worker key of
// the gateway's own configured, the engine's refusal is the gateway's problem: 502.
func TestEngineAuthPassThrough(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	const engineKey = "correct_api_key"
	e401 := keyedEngine(t, c.Engines[0].URL(), engineKey, http.StatusUnauthorized)
	e403 := keyedEngine(t, c.Engines[1].URL(), engineKey, http.StatusForbidden)
	body := `{"model":"sim-model","prompt":"x","max_tokens":1,"stream":false}`

	send := func(t *testing.T, gwURL, auth string) (int, openAIError) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, gwURL+"/v1/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e openAIError
		if resp.StatusCode != http.StatusOK {
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("status %d without an OpenAI error body: %s", resp.StatusCode, b)
			}
		}
		return resp.StatusCode, e
	}

	t.Run("client credentials forwarded", func(t *testing.T) {
		for _, tc := range []struct {
			engine   *httptest.Server
			status   int
			wantType string
			wantCode string
		}{
			{e401, 401, "authentication_error", "invalid_api_key"},
			{e403, 403, "permission_error", "permission_denied"},
		} {
			gw := startGateway(t, app.Options{}, "--worker-urls", tc.engine.URL, "--disable-retries")
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			for _, auth := range []string{"", "Bearer wrong"} {
				st, e := send(t, gw.URL, auth)
				if st != tc.status || e.Error.Type != tc.wantType || e.Error.Code != tc.wantCode {
					t.Errorf("auth %q: %d %s %s (%s), want %d %s %s", auth, st, e.Error.Type, e.Error.Code, e.Error.Message, tc.status, tc.wantType, tc.wantCode)
				}
			}
			if st, e := send(t, gw.URL, "Bearer "+engineKey); st != http.StatusOK {
				t.Errorf("right key: %d %s, want 200", st, e.Error.Message)
			}
		}
	})

	t.Run("the gateway's own worker key", func(t *testing.T) {
		gw := startGateway(t, app.Options{}, "--disable-retries")
		admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL)
		if _, err := admin.AddWorker(context.Background(), &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{
			Url: e401.URL, Role: "regular", ApiKey: "stale-worker-key"}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "worker ready", 10*time.Second, func() bool { return gw.Ready() == nil })
		// Whatever the client sends, the engine judged the gateway's key.
		for _, auth := range []string{"", "Bearer " + engineKey} {
			if st, e := send(t, gw.URL, auth); st != http.StatusBadGateway || e.Error.Code != "upstream_error" {
				t.Errorf("auth %q: %d %s (%s), want 502 upstream_error", auth, st, e.Error.Code, e.Error.Message)
			}
		}
	})
}
