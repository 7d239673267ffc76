package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/tests/testenv"

	"connectrpc.com/connect"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/sim"
)

// Issue 18: the Rust gateway's (SMG's) command lines and routes, and the rest of the OpenAI surface,
// end to end against the simulator.

// do sends a request and returns the status, headers and body.
func do(t *testing.T, method, url, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the polling test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

var listeningRe = regexp.MustCompile(`msg="sluice listening" addr=(\S+)`)

// runSMGCommand runs `sluice <args>` in-process (cli.Main, as the binary does) until the test ends and
// returns the gateway's URL, read from its log.
func runSMGCommand(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- cli.Main(ctx, args, io.Discard, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("sluice exited %d:\n%s", code, stderr.String())
		}
	})
	var addr string
	waitFor(t, "sluice listening", 10*time.Second, func() bool {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("sluice exited %d before listening:\n%s", code, stderr.String())
		default:
		}
		if m := listeningRe.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	return "http://" + addr
}

// TestSMGReadmePDCommandLine is the first "done when": the PD command line of SMG's own help
// (model_gateway/src/main.rs, "PD disaggregated mode": `smg launch --pd-disaggregation --prefill
// http://127.0.0.1:30001 9001 --prefill http://127.0.0.2:30002 9002 --decode http://127.0.0.3:30003
// --decode http://127.0.0.4:30004 --policy cache_aware`) runs with `sluice` in place of `smg`, the
// engines' addresses and bootstrap ports being those of simulated SGLang engines, and --host/--port
// (and a log directory, to read the listening address from) added. It serves PD as SMG would: both
// legs on every request, the policy cache_aware.
func TestSMGReadmePDCommandLine(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 2, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	p, d := c.ByRole(sim.RolePrefill), c.ByRole(sim.RoleDecode)
	logDir := t.TempDir()
	url := runSMGCommand(t, "launch", "--pd-disaggregation",
		"--prefill", p[0].URL(), strconv.Itoa(p[0].BootstrapPort()),
		"--prefill", p[1].URL(), strconv.Itoa(p[1].BootstrapPort()),
		"--decode", d[0].URL(), "--decode", d[1].URL(),
		"--policy", "cache_aware",
		"--host", "127.0.0.1", "--port", "0", "--log-dir", logDir)
	waitFor(t, "workers ready", 10*time.Second, func() bool {
		st, _, _ := do(t, http.MethodGet, url+"/readiness", "")
		return st == http.StatusOK
	})
	client := sdk(url)
	for i := range 4 {
		r, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(4),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("question %d", i))}})
		if err != nil || len(r.Choices) != 1 || r.Choices[0].Message.Content == "" {
			t.Fatalf("chat %d: %v %+v", i, err, r)
		}
	}
	var prefills, decodes int64
	for _, e := range p {
		prefills += e.Stats().Completed
	}
	for _, e := range d {
		decodes += e.Stats().Completed
	}
	if prefills != 4 || decodes != 4 {
		t.Errorf("engines completed %d prefill and %d decode legs, want 4 and 4 (every request disaggregated)", prefills, decodes)
	}
	var workers struct {
		Total int `json:"total"`
		Stats struct {
			Prefill int `json:"prefill_count"`
			Decode  int `json:"decode_count"`
		} `json:"stats"`
	}
	_, _, b := do(t, http.MethodGet, url+"/workers", "")
	if err := json.Unmarshal(b, &workers); err != nil || workers.Total != 4 || workers.Stats.Prefill != 2 || workers.Stats.Decode != 2 {
		t.Errorf("GET /workers: %v %s", err, b)
	}
	files, _ := filepath.Glob(filepath.Join(logDir, "sluice.*"))
	if len(files) != 1 {
		t.Fatalf("log files %v, want one", files)
	}
	if lb, _ := os.ReadFile(files[0]); !strings.Contains(string(lb), "sluice listening") {
		t.Errorf("log file lacks the listening line:\n%s", lb)
	}
}

// TestSMGRefusedCommandLine: a refused flag stops `sluice` with one line per flag, naming it.
func TestSMGRefusedCommandLine(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := cli.Main(t.Context(), []string{"--worker-urls", "http://gpu1:8000", "--enable-mesh", "--mesh-peer-urls", "10.0.0.2:39527", "--history-backend", "postgres"}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "--enable-mesh is not supported") || !strings.Contains(lines[2], "--history-backend is not supported") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
}

// mixedFleet is a regular-mode gateway with one SGLang and one vLLM engine of model "sg" and two vLLM
// engines of model "vl".
func mixedFleet(t *testing.T, extra ...string) (*gateway, *sim.Cluster, *sim.Cluster) {
	t.Helper()
	sg := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolSGLang, Engine: sim.Config{Mode: sim.ModeInstant, Models: []string{"sg"}}})
	vl := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolVLLM, Engine: sim.Config{Mode: sim.ModeInstant, Models: []string{"vl"}}})
	var urls []string
	for _, e := range append(sg.Engines, vl.Engines...) {
		urls = append(urls, e.URL())
	}
	gw := startGateway(t, app.Options{}, append([]string{"--worker-urls", strings.Join(urls, ",")}, extra...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return len(readyWorkers(gw)) == 4 })
	return gw, sg, vl
}

func readyWorkers(gw *gateway) []string {
	var out []string
	for _, w := range gw.Registry.Snapshot().All() {
		if w.Routable(time.Now()) {
			out = append(out, w.URL())
		}
	}
	return out
}

// TestOpenAISurfaceRegularMode: every new route, on SGLang and vLLM engines (each answered by the
// engine's own path and shape), routed by model, with retries, metrics and trace propagation.
func TestOpenAISurfaceRegularMode(t *testing.T) {
	t.Parallel()
	gw, sg, vl := mixedFleet(t, "--policy", "round_robin") // retries below move to the other engine
	client := sdk(gw.URL)

	// The official OpenAI SDK's embeddings call (the second "done when").
	for _, model := range []string{"sg", "vl"} {
		emb, err := client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
			Model: model, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first text", "second text"}}})
		if err != nil {
			t.Fatalf("%s: embeddings: %v", model, err)
		}
		if len(emb.Data) != 2 || len(emb.Data[0].Embedding) != sim.EmbeddingDim || emb.Data[1].Index != 1 || emb.Usage.PromptTokens == 0 {
			t.Fatalf("%s: embeddings %+v", model, emb)
		}
		b64, err := client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: model, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("first text")}})
		if err != nil || len(b64.Data) != 1 {
			t.Fatalf("%s: base64 embeddings: %v", model, err)
		}
	}
	// Routed by model: the vLLM engines saw only "vl".
	var vlEmbeddings int64
	for _, e := range vl.Engines {
		vlEmbeddings += e.Stats().PerPath["/v1/embeddings"]
	}
	if vlEmbeddings != 2 {
		t.Errorf("vLLM engines served %d embeddings requests, want 2", vlEmbeddings)
	}

	// The typed RPC, over Connect and gRPC.
	h2 := h2cClient(t)
	for name, rpc := range map[string]openaiv1connect.OpenAIServiceClient{
		"connect": openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, gw.URL),
		"grpc":    openaiv1connect.NewOpenAIServiceClient(h2, gw.URL, connect.WithGRPC()),
	} {
		resp, err := rpc.CreateEmbedding(t.Context(), &openaiv1.CreateEmbeddingRequest{Model: "sg", Input: structpb.NewStringValue("typed")})
		if err != nil {
			t.Fatalf("%s CreateEmbedding: %v", name, err)
		}
		if len(resp.GetData()) != 1 || len(resp.GetData()[0].GetEmbedding()) != sim.EmbeddingDim || resp.GetObject() != "list" {
			t.Fatalf("%s CreateEmbedding: %v", name, resp)
		}
		_, err = rpc.CreateEmbedding(t.Context(), &openaiv1.CreateEmbeddingRequest{Model: "nope", Input: structpb.NewStringValue("x")})
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s CreateEmbedding of an unknown model: %v, want NotFound", name, err)
		}
	}

	// Each route on each engine, through the gateway's one path.
	routes := []struct {
		path, body string
		check      func(model string, b []byte) bool
	}{
		{"/v1/rerank", `{"model":"%s","query":"capital of france","documents":["bananas","the capital of france"]}`, func(m string, b []byte) bool {
			if m == "sg" { // SGLang: a bare list, best first
				var l []struct{ Index int }
				return json.Unmarshal(b, &l) == nil && len(l) == 2 && l[0].Index == 1
			}
			var r struct{ Results []struct{ Index int } }
			return json.Unmarshal(b, &r) == nil && len(r.Results) == 2 && r.Results[0].Index == 1
		}},
		{"/rerank", `{"model":"%s","query":"q","documents":["q"]}`, func(_ string, b []byte) bool { return len(b) > 2 }},
		{"/v1/classify", `{"model":"%s","input":"great"}`, func(_ string, b []byte) bool { return bytes.Contains(b, []byte(`"num_classes":2`)) }},
		{"/v1/tokenize", `{"model":"%s","prompt":"hello world"}`, func(_ string, b []byte) bool { return bytes.Contains(b, []byte(`"count":4`)) }},
		{"/v1/detokenize", `{"model":"%s","tokens":[1819043176,111]}`, func(m string, b []byte) bool {
			if m == "sg" {
				return bytes.Contains(b, []byte(`"text":"hell o"`))
			}
			return bytes.Contains(b, []byte(`"prompt":"hell o"`))
		}},
		{"/v1/responses", `{"model":"%s","input":"hi","max_output_tokens":2}`, func(_ string, b []byte) bool { return bytes.Contains(b, []byte(`"object":"response"`)) }},
		{"/v1/messages", `{"model":"%s","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, func(_ string, b []byte) bool { return bytes.Contains(b, []byte(`"type":"message"`)) }},
	}
	for _, rt := range routes {
		for _, model := range []string{"sg", "vl"} {
			st, hdr, b := do(t, http.MethodPost, gw.URL+rt.path, fmt.Sprintf(rt.body, model), "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
			if st != http.StatusOK || !rt.check(model, b) {
				t.Errorf("%s %s: %d %s", rt.path, model, st, b)
			}
			if hdr.Get("X-Sluice-Worker") == "" || hdr.Get("X-Request-Id") == "" {
				t.Errorf("%s %s: headers %v", rt.path, model, hdr)
			}
		}
	}
	// Score differs between engines: each gets its own request form.
	if st, _, b := do(t, http.MethodPost, gw.URL+"/v1/score", `{"model":"sg","query":"is it","items":["yes"],"label_token_ids":[1]}`); st != 200 || !bytes.Contains(b, []byte(`"object":"scoring"`)) {
		t.Errorf("score sg: %d %s", st, b)
	}
	if st, _, b := do(t, http.MethodPost, gw.URL+"/v1/score", `{"model":"vl","text_1":"a","text_2":["a"]}`); st != 200 || !bytes.Contains(b, []byte(`"object":"score"`)) {
		t.Errorf("score vl: %d %s", st, b)
	}
	// vLLM engines were asked at their own paths (tokenize, classify, score, rerank without /v1).
	var vlPaths = map[string]int64{}
	for _, e := range vl.Engines {
		for p, n := range e.Stats().PerPath {
			vlPaths[p] += n
		}
	}
	for _, p := range []string{"/tokenize", "/detokenize", "/classify", "/score", "/rerank"} {
		if vlPaths[p] == 0 {
			t.Errorf("no vLLM engine was asked at %s: %v", p, vlPaths)
		}
	}
	// The trace went upstream.
	traced := false
	for _, e := range append(sg.Engines, vl.Engines...) {
		if strings.Contains(e.Stats().LastTraceparent, "0af7651916cd43dd8448eb211c80319c") {
			traced = true
		}
	}
	if !traced {
		t.Error("no engine received the client's trace id")
	}

	// The Responses API with the official SDK, and a Responses stream relayed as the engine sent it.
	resp, err := client.Responses.New(t.Context(), responses.ResponseNewParams{Model: "vl", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("say hi")},
		MaxOutputTokens: openai.Int(3)})
	if err != nil || resp.OutputText() == "" || resp.Usage.OutputTokens != 3 {
		t.Fatalf("Responses.New: %v %+v", err, resp)
	}
	stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "sg", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("say hi")},
		MaxOutputTokens: openai.Int(3)})
	var deltas, completed int
	for stream.Next() {
		switch stream.Current().Type {
		case "response.output_text.delta":
			deltas++
		case "response.completed":
			completed++
		}
	}
	if err := stream.Err(); err != nil || deltas != 3 || completed != 1 {
		t.Fatalf("Responses stream: %v, %d deltas, %d completed", err, deltas, completed)
	}
	st, hdr, b := do(t, http.MethodPost, gw.URL+"/v1/messages", `{"model":"vl","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if st != 200 || hdr.Get("Content-Type") != "text/event-stream" || !bytes.HasSuffix(b, []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")) {
		t.Fatalf("messages stream: %d %v\n%s", st, hdr, b)
	}

	// Retries as for chat: one engine of "sg" fails embeddings with 503, every request still succeeds.
	if err := sg.Engines[0].SetFaults(sim.Faults{ErrorRate: 1, ErrorStatus: 503, Paths: []string{"/v1/embeddings"}}); err != nil {
		t.Fatal(err)
	}
	const sgEmbeddings = `sluice_requests_total{model="sg",route="/v1/embeddings",status="200"}`
	before, _ := strconv.Atoi(promValue(t, gw.URL, sgEmbeddings))
	for range 6 {
		if st, _, b := do(t, http.MethodPost, gw.URL+"/v1/embeddings", `{"model":"sg","input":"retry me"}`); st != 200 {
			t.Fatalf("embeddings with one failing engine: %d %s", st, b)
		}
	}
	if after := promValue(t, gw.URL, sgEmbeddings); after != strconv.Itoa(before+6) {
		t.Errorf("%s went from %d to %s over 6 requests: each request counts once", sgEmbeddings, before, after)
	}
	// A relayed event stream's first byte is its first token; a non-streamed Responses answer's usage
	// (input_tokens, output_tokens) counts its tokens.
	if promValue(t, gw.URL, `sluice_time_to_first_token_seconds_count{model="sg",route="/v1/responses"}`) == "" {
		t.Error("no TTFT observed for the Responses stream")
	}
	if promValue(t, gw.URL, `sluice_tokens_total{model="vl",route="/v1/responses",type="output"}`) == "" {
		t.Error("no output tokens counted for Responses")
	}
	_, _, metrics := do(t, http.MethodGet, gw.URL+"/metrics", "")
	for _, want := range []string{`sluice_requests_total{model="sg",route="/v1/embeddings",status="200"}`, `sluice_requests_total{model="vl",route="/v1/messages",status="200"}`,
		`sluice_upstream_responses_total{status="503",worker="` + sg.Engines[0].URL() + `"}`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if m := regexp.MustCompile(`(?m)^sluice_retries_total (\d+)`).FindSubmatch(metrics); m == nil || string(m[1]) == "0" {
		t.Error("no retry counted")
	}
	// Engine errors keep their status; a route that does not stream says so.
	if st, _, b := do(t, http.MethodPost, gw.URL+"/v1/rerank", `{"model":"vl","query":"q"}`); st != 400 || !bytes.Contains(b, []byte("documents is required")) {
		t.Errorf("rerank without documents: %d %s", st, b)
	}
	if st, _, _ := do(t, http.MethodGet, gw.URL+"/v1/embeddings", ""); st != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/embeddings: %d, want 405", st)
	}
}

// TestOpenAISurfacePDMode: the per-route decisions of PD mode (internal/dispatch/aux.go).
func TestOpenAISurfacePDMode(t *testing.T) {
	t.Parallel()
	for _, proto := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(string(proto), func(t *testing.T) {
			c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: proto, Engine: instantEngine()})
			gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation"}, pdArgs(c)...)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			for _, path := range []string{"/v1/embeddings", "/v1/rerank", "/v1/score", "/v1/classify"} {
				st, _, b := do(t, http.MethodPost, gw.URL+path, `{"model":"sim-model","input":"x","query":"q","documents":["d"]}`)
				if st != http.StatusNotImplemented || !bytes.Contains(b, []byte("is not served in PD mode")) {
					t.Errorf("%s: %d %s, want 501", path, st, b)
				}
			}
			// Tokenization: a decode worker answers.
			st, hdr, b := do(t, http.MethodPost, gw.URL+"/v1/tokenize", `{"model":"sim-model","prompt":"hello world"}`)
			if st != 200 || hdr.Get("X-Sluice-Worker") != c.ByRole(sim.RoleDecode)[0].URL() {
				t.Errorf("tokenize: %d %v %s", st, hdr, b)
			}
			// Responses and Messages: a vLLM decode worker alone (it computes the prompt); SGLang: 501.
			st, _, b = do(t, http.MethodPost, gw.URL+"/v1/responses", `{"model":"sim-model","input":"hi","max_output_tokens":2}`)
			if proto == sim.ProtocolVLLM && (st != 200 || c.ByRole(sim.RoleDecode)[0].Stats().RecomputedPrompts != 1) {
				t.Errorf("vLLM responses: %d %s", st, b)
			}
			if proto == sim.ProtocolSGLang && (st != http.StatusNotImplemented || !bytes.Contains(b, []byte("bootstrap"))) {
				t.Errorf("SGLang responses: %d %s, want 501", st, b)
			}
		})
	}
}

// TestSMGRoutes: the Rust gateway's management and engine routes, with its response shapes.
func TestSMGRoutes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	vl := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolVLLM, Engine: instantEngine()})
	probePort := testenv.FreePort(t)
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL(), "--drain-settle-secs", "0.2",
		"--prometheus-port", "0", "--health-check-port", strconv.Itoa(probePort))
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })

	// POST /workers with SMG's WorkerSpec: 202, Location, the worker registered.
	st, hdr, b := do(t, http.MethodPost, gw.URL+"/workers", `{"url":"`+c.Engines[1].URL()+`","worker_type":"regular","runtime_type":"sglang","priority":50,"cost":1.0,"labels":{"zone":"a"}}`)
	var created struct {
		Status, WorkerID, URL, Location string
	}
	if err := json.Unmarshal(b, &struct {
		Status   *string `json:"status"`
		WorkerID *string `json:"worker_id"`
		URL      *string `json:"url"`
		Location *string `json:"location"`
	}{&created.Status, &created.WorkerID, &created.URL, &created.Location}); err != nil || st != http.StatusAccepted || created.Status != "accepted" ||
		hdr.Get("Location") != "/workers/"+created.WorkerID || created.Location != hdr.Get("Location") {
		t.Fatalf("POST /workers: %d %v %s", st, hdr, b)
	}
	st, _, b = do(t, http.MethodPost, gw.URL+"/workers", `{"url":"`+c.Engines[1].URL()+`"}`)
	if st != http.StatusConflict || !bytes.Contains(b, []byte(`"code":"WORKER_ALREADY_EXISTS"`)) {
		t.Errorf("duplicate POST: %d %s", st, b)
	}
	if st, _, b = do(t, http.MethodPost, gw.URL+"/workers", `{"url":"http://x:1","priority":80}`); st != 400 || !bytes.Contains(b, []byte(`"code":"BAD_REQUEST"`)) {
		t.Errorf("priority 80: %d %s", st, b)
	}
	if st, _, b = do(t, http.MethodPost, gw.URL+"/workers", `{"url":"`+vl.Engines[0].URL()+`","models":[{"id":"sim-model"}]}`); st != http.StatusAccepted {
		t.Fatalf("POST vLLM worker: %d %s", st, b)
	}
	waitFor(t, "three workers ready", 10*time.Second, func() bool { return len(readyWorkers(gw)) == 3 })

	// GET /workers: SMG's list with its stats; GET /workers/{id}: one WorkerInfo.
	var list struct {
		Workers []map[string]any `json:"workers"`
		Total   int              `json:"total"`
		Stats   map[string]int   `json:"stats"`
	}
	_, _, b = do(t, http.MethodGet, gw.URL+"/workers?model=sim-model", "")
	if err := json.Unmarshal(b, &list); err != nil || list.Total != 3 || list.Stats["regular_count"] != 3 {
		t.Fatalf("GET /workers: %v %s", err, b)
	}
	for _, w := range list.Workers {
		for _, k := range []string{"id", "url", "worker_type", "connection_mode", "runtime_type", "is_healthy", "status", "load", "models", "model_id"} {
			if _, ok := w[k]; !ok {
				t.Errorf("worker lacks %q: %v", k, w)
			}
		}
	}
	st, _, b = do(t, http.MethodGet, gw.URL+"/workers/"+created.WorkerID, "")
	var info map[string]any
	if err := json.Unmarshal(b, &info); err != nil || st != 200 || info["is_healthy"] != true || info["status"] != "ready" || info["labels"].(map[string]any)["zone"] != "a" {
		t.Errorf("GET /workers/{id}: %d %s", st, b)
	}
	if st, _, b = do(t, http.MethodGet, gw.URL+"/workers/w999", ""); st != 404 || !bytes.Contains(b, []byte(`"code":"WORKER_NOT_FOUND"`)) {
		t.Errorf("unknown worker: %d %s", st, b)
	}

	// PATCH replaces labels; PUT re-registers with the same id and URL; a changed URL is refused.
	if st, _, b = do(t, http.MethodPatch, gw.URL+"/workers/"+created.WorkerID, `{"labels":{"zone":"b"}}`); st != http.StatusAccepted {
		t.Errorf("PATCH: %d %s", st, b)
	}
	if w, _ := gw.Registry.Get(created.WorkerID); w.Spec().Labels["zone"] != "b" {
		t.Errorf("labels after PATCH: %v", w.Spec().Labels)
	}
	if st, _, b = do(t, http.MethodPut, gw.URL+"/workers/"+created.WorkerID, `{"url":"http://elsewhere:1"}`); st != 400 || !bytes.Contains(b, []byte("URL mismatch")) {
		t.Errorf("PUT with another URL: %d %s", st, b)
	}
	if st, _, b = do(t, http.MethodPut, gw.URL+"/workers/"+created.WorkerID, `{"url":"`+c.Engines[1].URL()+`","labels":{"zone":"c"}}`); st != http.StatusAccepted {
		t.Errorf("PUT: %d %s", st, b)
	}
	if w, ok := gw.Registry.Get(created.WorkerID); !ok || w.Spec().Labels["zone"] != "c" || w.Spec().Source != "admin" {
		t.Errorf("after PUT: %v %v", ok, w.Spec())
	}

	// /get_loads: one entry per worker; /flush_cache: SGLang workers flushed, the vLLM one skipped.
	var loads struct {
		Workers []struct {
			Worker  string
			Load    int
			Details struct {
				Loads []map[string]any `json:"loads"`
			}
		}
	}
	_, _, b = do(t, http.MethodGet, gw.URL+"/get_loads", "")
	if err := json.Unmarshal(b, &loads); err != nil || len(loads.Workers) != 3 || loads.Workers[0].Load != 0 || len(loads.Workers[0].Details.Loads) != 1 {
		t.Errorf("GET /get_loads: %v %s", err, b)
	}
	st, _, b = do(t, http.MethodPost, gw.URL+"/flush_cache", "")
	if st != 200 || !bytes.Contains(b, []byte(`"workers_flushed":2`)) || !bytes.Contains(b, []byte(`"total_workers":3`)) {
		t.Errorf("POST /flush_cache: %d %s", st, b)
	}

	// Engine passthroughs and the merged engine metrics.
	if st, hdr, b = do(t, http.MethodGet, gw.URL+"/get_server_info", ""); st != 200 || !bytes.Contains(b, []byte(`"disaggregation_mode"`)) || hdr.Get("X-Sluice-Worker") == "" {
		t.Errorf("GET /get_server_info: %d %s", st, b)
	}
	if st, _, b = do(t, http.MethodGet, gw.URL+"/get_model_info", ""); st != 200 || !bytes.Contains(b, []byte(`"model_path"`)) {
		t.Errorf("GET /get_model_info: %d %s", st, b)
	}
	if st, _, b = do(t, http.MethodGet, gw.URL+"/health_generate", ""); st != 200 {
		t.Errorf("GET /health_generate: %d %s", st, b)
	}
	st, _, b = do(t, http.MethodGet, gw.URL+"/engine_metrics", "")
	for _, e := range append(c.Engines, vl.Engines...) {
		if st != 200 || !bytes.Contains(b, []byte(`worker_addr="`+e.URL()+`"`)) {
			t.Errorf("GET /engine_metrics lacks %s: %d", e.URL(), st)
		}
	}
	if !bytes.Contains(b, []byte("vllm:num_requests_running")) || !bytes.Contains(b, []byte("sglang:num_running_reqs")) {
		t.Errorf("engine metrics lack an engine's own series:\n%s", b)
	}

	// The separate listeners: /metrics on --prometheus-port, probes on --health-check-port.
	if st, _, b = do(t, http.MethodGet, "http://"+gw.MetricsAddr()+"/metrics", ""); st != 200 || !bytes.Contains(b, []byte("sluice_worker_healthy")) {
		t.Errorf("metrics listener: %d", st)
	}
	if st, _, _ = do(t, http.MethodGet, "http://"+gw.MetricsAddr()+"/v1/models", ""); st != 404 {
		t.Errorf("the metrics listener serves %d on /v1/models, want only /metrics", st)
	}
	for _, p := range []string{"/liveness", "/readiness", "/health"} {
		if st, _, b = do(t, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", probePort, p), ""); st != 200 {
			t.Errorf("probe listener %s: %d %s", p, st, b)
		}
	}
	if st, _, b = do(t, http.MethodGet, gw.URL+"/liveness", ""); st != 200 || string(b) != "OK" {
		t.Errorf("/liveness: %d %q", st, b)
	}

	// DELETE drains a ready worker for --drain-settle-secs, then removes it.
	if st, _, b = do(t, http.MethodDelete, gw.URL+"/workers/"+created.WorkerID, ""); st != http.StatusAccepted {
		t.Fatalf("DELETE: %d %s", st, b)
	}
	if w, ok := gw.Registry.Get(created.WorkerID); !ok || w.Health().String() != "draining" {
		t.Fatalf("right after DELETE the worker is %v, want draining", w)
	}
	waitFor(t, "drained worker removed", 5*time.Second, func() bool { _, ok := gw.Registry.Get(created.WorkerID); return !ok })
}

// TestSMGRoutesPD: the engine routes in PD mode ask prefill workers (and health_generate a pair).
func TestSMGRoutesPD(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	if st, hdr, b := do(t, http.MethodGet, gw.URL+"/get_server_info", ""); st != 200 || hdr.Get("X-Sluice-Worker") != c.ByRole(sim.RolePrefill)[0].URL() || !bytes.Contains(b, []byte(`"disaggregation_mode":"prefill"`)) {
		t.Errorf("PD get_server_info: %d %v %s", st, hdr, b)
	}
	if st, _, b := do(t, http.MethodGet, gw.URL+"/health_generate", ""); st != 200 || !bytes.Contains(b, []byte("prefill and decode")) {
		t.Errorf("PD health_generate: %d %s", st, b)
	}
	if err := c.ByRole(sim.RoleDecode)[0].SetFaults(sim.Faults{FailHealth: true}); err != nil {
		t.Fatal(err)
	}
	if st, _, b := do(t, http.MethodGet, gw.URL+"/health_generate", ""); st != 503 {
		t.Errorf("PD health_generate with a failing decode: %d %s", st, b)
	}
}

// TestSMGRoutesAuth: SMG guards its control plane with --api-key when no control-plane credential is
// configured; sluice's SMG routes do too. The engine passthroughs need an inference credential.
func TestSMGRoutesAuth(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL(), "--api-key", "sk-k")
	for _, p := range []string{"/workers", "/get_loads", "/get_server_info"} {
		if st, _, _ := do(t, http.MethodGet, gw.URL+p, ""); st != http.StatusUnauthorized {
			t.Errorf("%s without a key: %d, want 401", p, st)
		}
		if st, _, b := do(t, http.MethodGet, gw.URL+p, "", "Authorization", "Bearer sk-k"); st != 200 {
			t.Errorf("%s with the key: %d %s", p, st, b)
		}
	}
	for _, p := range []string{"/liveness", "/engine_metrics"} {
		if st, _, _ := do(t, http.MethodGet, gw.URL+p, ""); st != 200 {
			t.Errorf("%s is public in SMG: %d", p, st)
		}
	}
	admin := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL(), "--api-key", "sk-k", "--admin-api-key", "adm")
	if st, _, _ := do(t, http.MethodGet, admin.URL+"/workers", "", "Authorization", "Bearer sk-k"); st != http.StatusForbidden && st != http.StatusUnauthorized {
		t.Errorf("/workers with the inference key when an admin key is set: %d", st)
	}
	if st, _, _ := do(t, http.MethodGet, admin.URL+"/workers", "", "Authorization", "Bearer adm"); st != 200 {
		t.Errorf("/workers with the admin key: %d", st)
	}
}

// promValue is the value of the metric name on url's /metrics: summed over its series when it has
// labels; "" when it has none.
func promValue(t *testing.T, url, name string) string {
	t.Helper()
	_, _, b := do(t, http.MethodGet, url+"/metrics", "")
	sc := bufio.NewScanner(bytes.NewReader(b))
	sum, found := 0.0, false
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		if strings.HasPrefix(rest, "{") {
			if i := strings.Index(rest, "} "); i >= 0 {
				rest = rest[i+1:]
			}
		}
		v, ok := strings.CutPrefix(rest, " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		sum, found = sum+f, true
	}
	if !found {
		return ""
	}
	return strconv.FormatFloat(sum, 'g', -1, 64)
}

// TestGatewayConcurrencyLimit: --max-concurrent-requests with its queue answers as SMG does: a
// request over the limit waits; with the queue full the next gets 429 admission_queue_full; a wait
// past --queue-timeout-secs gets 408 admission_queue_timeout. Streaming requests hold their token to
// the end; the limit applies in PD mode and to the typed RPCs too.
func TestGatewayConcurrencyLimit(t *testing.T) {
	c := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL(),
		// The queued request must outlast the checks made while it waits (they failed with 0.5 s on a
		// loaded machine: it had timed out, so the next request queued instead of being refused).
		"--max-concurrent-requests", "1", "--queue-size", "1", "--queue-timeout-secs", "3")
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	// The one token is held by a request the engine keeps waiting.
	if err := c.Engines[0].SetFaults(sim.Faults{Hang: true, Paths: []string{"/v1/chat/completions"}}); err != nil {
		t.Fatal(err)
	}
	holdCtx, release := context.WithCancel(t.Context())
	held := make(chan error, 1)
	go func() {
		resp, err := post(holdCtx, gw.URL+"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hold"}]}`)
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	waitFor(t, "token held", 5*time.Second, func() bool { return promValue(t, gw.URL, "sluice_gateway_inflight_requests") == "1" })

	waiting := make(chan *http.Response, 1)
	go func() {
		resp, err := post(t.Context(), gw.URL+"/v1/embeddings", `{"model":"sim-model","input":"wait"}`)
		if err != nil {
			t.Error(err)
		}
		waiting <- resp
	}()
	waitFor(t, "one request queued", 5*time.Second, func() bool { return promValue(t, gw.URL, "sluice_gateway_queued_requests") == "1" })

	st, hdr, b := do(t, http.MethodPost, gw.URL+"/v1/tokenize", `{"model":"sim-model","prompt":"x"}`)
	if st != http.StatusTooManyRequests || !bytes.Contains(b, []byte(`"code":"admission_queue_full"`)) || hdr.Get("Content-Type") != "application/json" {
		t.Errorf("queue full: %d %s", st, b)
	}
	rpc := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, gw.URL)
	if _, err := rpc.CreateEmbedding(t.Context(), &openaiv1.CreateEmbeddingRequest{Model: "sim-model", Input: structpb.NewStringValue("x")}); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("typed RPC with the queue full: %v, want ResourceExhausted", err)
	}
	if _, err := rpc.ListModels(t.Context(), &openaiv1.ListModelsRequest{}); err != nil {
		t.Errorf("ListModels is not limited: %v", err)
	}
	if st, _, _ := do(t, http.MethodGet, gw.URL+"/v1/models", ""); st != 200 {
		t.Errorf("GET /v1/models is not limited: %d", st)
	}
	resp := <-waiting
	if resp.StatusCode != http.StatusRequestTimeout || !bytes.Contains(readAll(t, resp), []byte(`"code":"admission_queue_timeout"`)) {
		t.Errorf("queue timeout: %d", resp.StatusCode)
	}

	release()
	<-held
	waitFor(t, "token back", 5*time.Second, func() bool { return promValue(t, gw.URL, "sluice_gateway_inflight_requests") == "0" })
	if st, _, b := do(t, http.MethodPost, gw.URL+"/v1/tokenize", `{"model":"sim-model","prompt":"x"}`); st != 200 {
		t.Errorf("after the release: %d %s", st, b)
	}
	_, _, metrics := do(t, http.MethodGet, gw.URL+"/metrics", "")
	for _, want := range []string{`sluice_gateway_rejections_total{reason="queue_full"} 2`, `sluice_gateway_rejections_total{reason="queue_timeout"} 1`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGatewayLimitComposesWithPrefillAdmission: in PD mode a request waiting for a prefill slot holds
// its gateway token, so the gateway limit bounds everything inside sluice (docs/migrating-from-smg.md).
func TestGatewayLimitComposesWithPrefillAdmission(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "1",
		"--prefill-queue-size", "5", "--max-concurrent-requests", "2", "--queue-size", "0"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	if err := c.ByRole(sim.RolePrefill)[0].SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if resp, err := post(ctx, gw.URL+"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hold"}]}`); err == nil {
				resp.Body.Close()
			}
		})
	}
	// One holds the prefill slot, the other waits in prefill admission: both hold gateway tokens.
	waitFor(t, "one prefill queued", 5*time.Second, func() bool {
		return promValue(t, gw.URL, "sluice_pd_prefill_admission_queued") == "1" && promValue(t, gw.URL, "sluice_gateway_inflight_requests") == "2"
	})
	st, _, b := do(t, http.MethodPost, gw.URL+"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"third"}]}`)
	if st != http.StatusTooManyRequests || !bytes.Contains(b, []byte(`"code":"admission_queue_full"`)) {
		t.Errorf("third request: %d %s, want the gateway's 429 (not prefill admission's)", st, b)
	}
	cancel()
	wg.Wait()
}

// TestManualPolicyAndHeaders: --policy manual pins a routing key to a worker; --routing-key-headers
// and --request-id-headers name the headers.
func TestManualPolicyAndHeaders(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 3, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	var urls []string
	for _, e := range c.Engines {
		urls = append(urls, e.URL())
	}
	gw := startGateway(t, app.Options{}, "--worker-urls", strings.Join(urls, ","), "--policy", "manual", "--assignment-mode", "min_group",
		"--routing-key-headers", "x-session", "--request-id-headers", "x-trace-id",
		"--health-check-interval-secs", "0.05", "--health-failure-threshold", "1", "--health-success-threshold", "1")
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return len(readyWorkers(gw)) == 3 })
	chat := `{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"%s"}]}`
	pinned := map[string]string{}
	for round := range 3 {
		for k := range 6 {
			key := fmt.Sprintf("session-%d", k)
			st, hdr, b := do(t, http.MethodPost, gw.URL+"/v1/chat/completions", fmt.Sprintf(chat, fmt.Sprint(round, k)),
				"x-session", key, "x-trace-id", "trace-"+key)
			if st != 200 {
				t.Fatalf("%d %s", st, b)
			}
			if hdr.Get("X-Request-Id") != "trace-"+key {
				t.Errorf("X-Request-Id = %q, want the x-trace-id header's value", hdr.Get("X-Request-Id"))
			}
			w := hdr.Get("X-Sluice-Worker")
			if prev, ok := pinned[key]; ok && prev != w {
				t.Fatalf("key %s moved from %s to %s", key, prev, w)
			}
			pinned[key] = w
		}
	}
	spread := map[string]int{}
	for _, w := range pinned {
		spread[w]++
	}
	if len(spread) != 3 || spread[urls[0]] != 2 {
		t.Errorf("min_group spread 6 keys as %v, want 2 per worker", spread)
	}
	// A pinned worker that turns unhealthy: its key moves, and stays on its new worker; when the first
	// recovers the key goes back to it (SMG remembers two workers per key, oldest first).
	victim := pinned["session-0"]
	var victimEngine *sim.Engine
	for _, e := range c.Engines {
		if e.URL() == victim {
			victimEngine = e
		}
	}
	routable := func(url string) bool {
		w, ok := gw.Registry.Snapshot().ByURL(url)
		return ok && w.Routable(time.Now())
	}
	ask := func() string {
		st, hdr, b := do(t, http.MethodPost, gw.URL+"/v1/chat/completions", fmt.Sprintf(chat, "again"), "x-session", "session-0")
		if st != 200 {
			t.Fatalf("%d %s", st, b)
		}
		return hdr.Get("X-Sluice-Worker")
	}
	if err := victimEngine.SetFaults(sim.Faults{FailHealth: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "victim unhealthy", 5*time.Second, func() bool { return !routable(victim) })
	moved := ask()
	if moved == victim || ask() != moved {
		t.Fatalf("after its worker failed the key went to %s (victim %s)", moved, victim)
	}
	if err := victimEngine.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "victim healthy again", 5*time.Second, func() bool { return routable(victim) })
	if back := ask(); back != victim {
		t.Errorf("after recovery the key went to %s, want its first worker %s", back, victim)
	}
}
