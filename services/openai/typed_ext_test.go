package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/services/openai"
)

// outcome is what a client got, whatever the surface: each choice's text by index, and the usage
// (prompt, completion, total; nil when none came).
type outcome struct {
	Text  map[int]string
	Usage []int
}

// typedCase is one request, as JSON for REST and as a message for the typed clients.
type typedCase struct {
	name   string
	stream bool
	rest   string // the REST body (path by chat/completion)
	chat   *openaiv1.CreateChatCompletionRequest
	comp   *openaiv1.CreateCompletionRequest
}

func ptr[T any](v T) *T { return &v }

func typedCases() []typedCase {
	msgs := []*openaiv1.ChatMessage{{Role: "system", Content: structpb.NewStringValue("be brief")},
		{Role: "user", Content: structpb.NewStringValue("typed please")}}
	restMsgs := `"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"typed please"}]`
	usage := &openaiv1.StreamOptions{IncludeUsage: true}
	prompts, _ := structpb.NewList([]any{"first prompt", "second prompt"})
	return []typedCase{
		{name: "chat", rest: `{"model":"sim-model",` + restMsgs + `,"max_tokens":8,"seed":7}`,
			chat: &openaiv1.CreateChatCompletionRequest{Model: "sim-model", Messages: msgs, MaxTokens: ptr[int32](8), Seed: ptr[int32](7)}},
		{name: "chat n=2", rest: `{"model":"sim-model",` + restMsgs + `,"max_tokens":5,"seed":3,"n":2}`,
			chat: &openaiv1.CreateChatCompletionRequest{Model: "sim-model", Messages: msgs, MaxTokens: ptr[int32](5), Seed: ptr[int32](3), N: ptr[int32](2)}},
		{name: "chat stream", stream: true, rest: `{"model":"sim-model",` + restMsgs + `,"max_tokens":8,"seed":7,"stream":true,"stream_options":{"include_usage":true}}`,
			chat: &openaiv1.CreateChatCompletionRequest{Model: "sim-model", Messages: msgs, MaxTokens: ptr[int32](8), Seed: ptr[int32](7), StreamOptions: usage}},
		{name: "chat stream no usage", stream: true, rest: `{"model":"sim-model",` + restMsgs + `,"max_tokens":6,"seed":5,"stream":true}`,
			chat: &openaiv1.CreateChatCompletionRequest{Model: "sim-model", Messages: msgs, MaxTokens: ptr[int32](6), Seed: ptr[int32](5)}},
		{name: "completion", rest: `{"model":"sim-model","prompt":"Once upon a time","max_tokens":6,"seed":11}`,
			comp: &openaiv1.CreateCompletionRequest{Model: "sim-model", Prompt: structpb.NewStringValue("Once upon a time"), MaxTokens: ptr[int32](6), Seed: ptr[int32](11)}},
		{name: "completion batch", rest: `{"model":"sim-model","prompt":["first prompt","second prompt"],"max_tokens":4,"seed":2}`,
			comp: &openaiv1.CreateCompletionRequest{Model: "sim-model", Prompt: structpb.NewListValue(prompts), MaxTokens: ptr[int32](4), Seed: ptr[int32](2)}},
		{name: "completion stream", stream: true, rest: `{"model":"sim-model","prompt":"Once upon a time","max_tokens":6,"seed":11,"stream":true,"stream_options":{"include_usage":true}}`,
			comp: &openaiv1.CreateCompletionRequest{Model: "sim-model", Prompt: structpb.NewStringValue("Once upon a time"), MaxTokens: ptr[int32](6), Seed: ptr[int32](11), StreamOptions: usage}},
	}
}

// TestTypedPathThroughEverySurface sends the same requests through REST, Connect, gRPC and gRPC-Web
// to simulated engines and compares content and usage. With engines speaking the worker protocol
// (PD and regular), no typed request may be rendered as JSON and no whole answer read from JSON
// (streamed answers still are: SSE chunks); with HTTP engines both must happen (which shows the hooks
// see the JSON path when it is taken).
func TestTypedPathThroughEverySurface(t *testing.T) {
	grpcURL := func(e *sim.Engine) string { return strings.Replace(e.URL(), "http://", "grpc://", 1) }
	for _, tp := range []struct {
		name     string
		cluster  sim.ClusterConfig
		args     func(*sim.Cluster) []string
		wantJSON bool
	}{
		{"pd-worker-rpc", sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: sim.Config{GRPC: true}},
			func(c *sim.Cluster) []string {
				p, d := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
				return []string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "4",
					"--prefill", grpcURL(p), strconv.Itoa(p.BootstrapPort()), "--decode", grpcURL(d)}
			}, false},
		{"regular-worker-rpc", sim.ClusterConfig{Regular: 1, Engine: sim.Config{GRPC: true}},
			func(c *sim.Cluster) []string { return []string{"--worker-urls", grpcURL(c.Engines[0])} }, false},
		{"pd-sglang-http", sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang},
			func(c *sim.Cluster) []string {
				p, d := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
				return []string{"--pd-disaggregation", "--prefill", p.URL(), strconv.Itoa(p.BootstrapPort()), "--decode", d.URL()}
			}, true},
	} {
		t.Run(tp.name, func(t *testing.T) {
			cc := tp.cluster
			cc.Mode = sim.ModeInstant
			c, err := sim.StartCluster(t.Context(), cc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			a := startGateway(t, append(tp.args(c), "--model-id", "sim-model")...)
			var rendered, read atomic.Int64
			typedURL, grpcAddr := serveTyped(t, openai.NewWithJSONHooks(a.Dispatcher,
				func(dispatch.Route) { rendered.Add(1) }, func(dispatch.Route) { read.Add(1) }))
			restURL := "http://" + a.Addr()
			clients := map[string]openaiv1.OpenAIServiceClient{
				"connect":  connectClient{openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, typedURL)},
				"grpc-web": connectClient{openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, typedURL, connect.WithGRPCWeb())},
				"grpc":     openaiv1.NewOpenAIServiceClient(grpcConn(t, grpcAddr)),
			}
			for _, tc := range typedCases() {
				want := restOutcome(t, restURL, tc)
				if len(want.Text) == 0 || want.Text[0] == "" {
					t.Fatalf("%s: REST got no content: %+v", tc.name, want)
				}
				for name, cl := range clients {
					got := typedOutcome(t, cl, tc)
					if d := cmp.Diff(want, got); d != "" {
						t.Errorf("%s over %s (-REST +typed):\n%s", tc.name, name, d)
					}
				}
			}
			if n := rendered.Load(); tp.wantJSON != (n > 0) {
				t.Errorf("typed requests rendered as JSON %d times; want JSON %v", n, tp.wantJSON)
			}
			if n := read.Load(); tp.wantJSON != (n > 0) {
				t.Errorf("whole answers read from JSON %d times; want JSON %v", n, tp.wantJSON)
			}
		})
	}
}

func startGateway(t *testing.T, args ...string) *app.App {
	t.Helper()
	cfg, err := config.Parse(append([]string{"--host", "127.0.0.1", "--port", "0", "--disable-health-check"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(t.Context(), cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	return a
}

// serveTyped serves svc (Connect, gRPC, gRPC-Web) on loopback, h2c and HTTP/1.1.
func serveTyped(t *testing.T, svc *openai.Service) (url, addr string) {
	mux := http.NewServeMux()
	mux.Handle(openaiv1connect.NewOpenAIServiceHandler(svc))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, srv.Listener.Addr().String()
}

func grpcConn(t *testing.T, addr string) *grpc.ClientConn {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// connectClient gives a Connect client the grpc-go client's interface, so one loop drives both.
type connectClient struct {
	c openaiv1connect.OpenAIServiceClient
}

func (c connectClient) CreateChatCompletion(ctx context.Context, in *openaiv1.CreateChatCompletionRequest, _ ...grpc.CallOption) (*openaiv1.ChatCompletion, error) {
	return c.c.CreateChatCompletion(ctx, in)
}

func (c connectClient) StreamChatCompletion(ctx context.Context, in *openaiv1.CreateChatCompletionRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[openaiv1.ChatCompletionChunk], error) {
	st, err := c.c.StreamChatCompletion(ctx, in)
	if err != nil {
		return nil, err
	}
	return &connectStream[openaiv1.ChatCompletionChunk]{st: st}, nil
}

func (c connectClient) CreateCompletion(ctx context.Context, in *openaiv1.CreateCompletionRequest, _ ...grpc.CallOption) (*openaiv1.Completion, error) {
	return c.c.CreateCompletion(ctx, in)
}

func (c connectClient) StreamCompletion(ctx context.Context, in *openaiv1.CreateCompletionRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[openaiv1.Completion], error) {
	st, err := c.c.StreamCompletion(ctx, in)
	if err != nil {
		return nil, err
	}
	return &connectStream[openaiv1.Completion]{st: st}, nil
}

func (c connectClient) ListModels(ctx context.Context, in *openaiv1.ListModelsRequest, _ ...grpc.CallOption) (*openaiv1.ListModelsResponse, error) {
	return c.c.ListModels(ctx, in)
}

func (c connectClient) CreateEmbedding(ctx context.Context, in *openaiv1.CreateEmbeddingRequest, _ ...grpc.CallOption) (*openaiv1.CreateEmbeddingResponse, error) {
	return c.c.CreateEmbedding(ctx, in)
}

func (c connectClient) Tokenize(ctx context.Context, in *openaiv1.TokenizeRequest, _ ...grpc.CallOption) (*openaiv1.TokenizeResponse, error) {
	return c.c.Tokenize(ctx, in)
}

func (c connectClient) Detokenize(ctx context.Context, in *openaiv1.DetokenizeRequest, _ ...grpc.CallOption) (*openaiv1.DetokenizeResponse, error) {
	return c.c.Detokenize(ctx, in)
}

// connectStream reads a Connect server stream as grpc-go's: Recv until io.EOF.
type connectStream[T any] struct {
	grpc.ServerStreamingClient[T]
	st *connect.ServerStreamForClient[T]
}

func (s *connectStream[T]) Recv() (*T, error) {
	if s.st.Receive() {
		return s.st.Msg(), nil
	}
	err := s.st.Err()
	s.st.Close()
	if err == nil {
		return nil, io.EOF
	}
	return nil, err
}

func usageOf(u *openaiv1.Usage) []int {
	if u == nil {
		return nil
	}
	return []int{int(u.GetPromptTokens()), int(u.GetCompletionTokens()), int(u.GetTotalTokens())}
}

func typedOutcome(t *testing.T, cl openaiv1.OpenAIServiceClient, tc typedCase) outcome {
	t.Helper()
	ctx := t.Context()
	out := outcome{Text: map[int]string{}}
	switch {
	case tc.chat != nil && !tc.stream:
		r, err := cl.CreateChatCompletion(ctx, tc.chat)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, ch := range r.GetChoices() {
			out.Text[int(ch.GetIndex())] += ch.GetMessage().GetContent().GetStringValue()
		}
		out.Usage = usageOf(r.GetUsage())
	case tc.chat != nil:
		st, err := cl.StreamChatCompletion(ctx, tc.chat)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			for _, ch := range m.GetChoices() {
				out.Text[int(ch.GetIndex())] += ch.GetDelta().GetContent()
			}
			if u := usageOf(m.GetUsage()); u != nil {
				out.Usage = u
			}
		}
	case !tc.stream:
		r, err := cl.CreateCompletion(ctx, tc.comp)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, ch := range r.GetChoices() {
			out.Text[int(ch.GetIndex())] += ch.GetText()
		}
		out.Usage = usageOf(r.GetUsage())
	default:
		st, err := cl.StreamCompletion(ctx, tc.comp)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			for _, ch := range m.GetChoices() {
				out.Text[int(ch.GetIndex())] += ch.GetText()
			}
			if u := usageOf(m.GetUsage()); u != nil {
				out.Usage = u
			}
		}
	}
	return out
}

// restChunk is the part of an OpenAI answer or stream chunk the comparison reads.
type restChunk struct {
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
		Total      int `json:"total_tokens"`
	} `json:"usage"`
}

func (c *restChunk) addTo(out *outcome) {
	for _, ch := range c.Choices {
		out.Text[ch.Index] += ch.Text + ch.Message.Content + ch.Delta.Content
	}
	if c.Usage != nil {
		out.Usage = []int{c.Usage.Prompt, c.Usage.Completion, c.Usage.Total}
	}
}

func restOutcome(t *testing.T, base string, tc typedCase) outcome {
	t.Helper()
	path := "/v1/chat/completions"
	if tc.comp != nil {
		path = "/v1/completions"
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(tc.rest))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: REST %d %v: %s", tc.name, resp.StatusCode, err, b)
	}
	out := outcome{Text: map[int]string{}}
	if !tc.stream {
		var c restChunk
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v: %s", tc.name, err, b)
		}
		c.addTo(&out)
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c restChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("%s: %v: %s", tc.name, err, data)
		}
		c.addTo(&out)
	}
	return out
}

// TestTypedStreamBrokenOff: a worker-protocol engine that dies mid-stream (a transport failure after
// the head) ends the typed stream with an error, for Connect and gRPC alike, after the chunks it did
// send, and without falling back to SSE.
func TestTypedStreamBrokenOff(t *testing.T) {
	c, err := sim.StartCluster(t.Context(), sim.ClusterConfig{Regular: 1, Mode: sim.ModeInstant,
		Engine: sim.Config{GRPC: true, Faults: sim.Faults{DieAfterTokens: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	a := startGateway(t, "--worker-urls", strings.Replace(c.Engines[0].URL(), "http://", "grpc://", 1), "--model-id", "sim-model")
	var read atomic.Int64
	typedURL, grpcAddr := serveTyped(t, openai.NewWithJSONHooks(a.Dispatcher, nil, func(dispatch.Route) { read.Add(1) }))
	clients := map[string]openaiv1.OpenAIServiceClient{
		"connect": connectClient{openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, typedURL)},
		"grpc":    openaiv1.NewOpenAIServiceClient(grpcConn(t, grpcAddr)),
	}
	msgs := []*openaiv1.ChatMessage{{Role: "user", Content: structpb.NewStringValue("tell me a long story")}}
	for name, cl := range clients {
		st, err := cl.StreamChatCompletion(t.Context(), &openaiv1.CreateChatCompletionRequest{Model: "sim-model", Messages: msgs, MaxTokens: ptr[int32](32)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		chunks := 0
		for {
			_, err = st.Recv()
			if err != nil {
				break
			}
			chunks++
		}
		if errors.Is(err, io.EOF) || chunks == 0 || chunks > 3 {
			t.Errorf("%s: %d chunks, then %v; want the chunks sent, then an error", name, chunks, err)
		}
	}
	if n := read.Load(); n != 0 {
		t.Errorf("%d streams read from SSE", n)
	}
}
