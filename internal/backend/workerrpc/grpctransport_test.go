package workerrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/gen/sluice/worker/v1/workerv1connect"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// fakeWorker is an in-test worker-protocol server whose behaviour each test sets.
type fakeWorker struct {
	prefill func(ctx context.Context, r *workerv1.PrefillRequest) (*workerv1.PrefillResponse, error)
	decode  func(ctx context.Context, r *workerv1.DecodeRequest, s *connect.ServerStream[workerv1.DecodeResponse]) error
	load    func(ctx context.Context) (*workerv1.GetLoadResponse, error)

	mu       sync.Mutex
	prefills []*workerv1.PrefillRequest
	decodes  []*workerv1.DecodeRequest
}

func (f *fakeWorker) Prefill(ctx context.Context, r *workerv1.PrefillRequest) (*workerv1.PrefillResponse, error) {
	f.mu.Lock()
	f.prefills = append(f.prefills, r)
	f.mu.Unlock()
	if f.prefill == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	return f.prefill(ctx, r)
}

func (f *fakeWorker) Decode(ctx context.Context, r *workerv1.DecodeRequest, s *connect.ServerStream[workerv1.DecodeResponse]) error {
	f.mu.Lock()
	f.decodes = append(f.decodes, r)
	f.mu.Unlock()
	if f.decode == nil {
		return connect.NewError(connect.CodeUnimplemented, nil)
	}
	return f.decode(ctx, r, s)
}

func (f *fakeWorker) GetLoad(ctx context.Context, _ *workerv1.GetLoadRequest) (*workerv1.GetLoadResponse, error) {
	if f.load == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	return f.load(ctx)
}

func (f *fakeWorker) decodeRequests() []*workerv1.DecodeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*workerv1.DecodeRequest(nil), f.decodes...)
}

func (f *fakeWorker) prefillRequests() []*workerv1.PrefillRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*workerv1.PrefillRequest(nil), f.prefills...)
}

// startH2C serves handler over h2c and HTTP/1.1 on loopback; it returns "host:port".
func startH2C(t testing.TB, handler http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func startWorker(t testing.TB, f *fakeWorker, extra ...func(*http.ServeMux)) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(workerv1connect.NewPrefillServiceHandler(f))
	mux.Handle(workerv1connect.NewDecodeServiceHandler(f))
	mux.Handle(workerv1connect.NewLoadServiceHandler(f))
	for _, e := range extra {
		e(mux)
	}
	return startH2C(t, mux)
}

var testClock = func() time.Time { return time.Unix(1700000000, 0) }

func newTestTransport(t testing.TB, role string) *GRPCTransport {
	t.Helper()
	h2c := newH2CClient()
	t.Cleanup(h2c.CloseIdleConnections)
	return NewGRPCTransport(role, h2c, WithClock(testClock), WithIDSource(func() string { return "gen" }))
}

// newH2CClient is what backend.NewH2CClient builds (a floor up): HTTP/2 without TLS, as gRPC needs.
func newH2CClient() *http.Client {
	tr := &http.Transport{DisableCompression: true}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.Protocols.SetHTTP2(true)
	return &http.Client{Transport: tr}
}

func post(t *testing.T, rt http.RoundTripper, ctx context.Context, addr, path, body string, header http.Header) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "grpc://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return rt.RoundTrip(req)
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// readAll reads every SSE frame of r (body's sse_test.go has the same helper for its own tests).
func readAll(t *testing.T, r io.Reader) ([]string, error) {
	t.Helper()
	sr := body.NewSSEReader(r)
	var got []string
	for {
		p, err := sr.Next()
		if err != nil {
			if _, again := sr.Next(); !errors.Is(again, err) {
				t.Errorf("error not sticky: %v then %v", err, again)
			}
			return got, err
		}
		got = append(got, string(p))
	}
}

// tokens streams the given chunks, the last one with finish reason and usage.
func tokens(chunks ...string) func(context.Context, *workerv1.DecodeRequest, *connect.ServerStream[workerv1.DecodeResponse]) error {
	return func(_ context.Context, _ *workerv1.DecodeRequest, s *connect.ServerStream[workerv1.DecodeResponse]) error {
		for i, c := range chunks {
			m := &workerv1.DecodeResponse{Text: c, TokenIds: []uint32{uint32(100 + i)}, CompletionTokens: uint32(i + 1)}
			if i == len(chunks)-1 {
				m.FinishReason, m.PromptTokens, m.CachedTokens = "length", 7, 3
			}
			if err := s.Send(m); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestGRPCPrefillConversion(t *testing.T) {
	t.Parallel()
	f := &fakeWorker{prefill: func(_ context.Context, r *workerv1.PrefillRequest) (*workerv1.PrefillResponse, error) {
		return &workerv1.PrefillResponse{PromptTokens: 12, CachedTokens: 4}, nil
	}}
	addr := startWorker(t, f)
	rt := newTestTransport(t, RolePrefill)
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"there"}]}],` +
		`"max_completion_tokens":64,"max_tokens":9,"temperature":0.5,"top_p":0.9,"top_k":40,"stop":"END","seed":7,"min_tokens":2,"ignore_eos":true,` +
		`"frequency_penalty":0.25,"custom":{"a":[1,"b"]},"stream":true,"stream_options":{"include_usage":true},` +
		`"bootstrap_host":"10.0.0.5","bootstrap_port":8998,"bootstrap_room":42}`
	resp, err := post(t, rt, context.Background(), addr, "/v1/chat/completions", body, http.Header{"X-Request-Id": {"req-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); resp.StatusCode != 200 || got != `{"prompt_tokens":12,"cached_tokens":4}` {
		t.Fatalf("response %d %s", resp.StatusCode, got)
	}
	extra, _ := structpb.NewStruct(map[string]any{"frequency_penalty": 0.25, "custom": map[string]any{"a": []any{1.0, "b"}}})
	want := &workerv1.PrefillRequest{
		RequestId: "req-1",
		Model:     "m",
		Prompt:    textPrompt("system: be brief\nuser: hi\nthere\n"),
		Sampling: &workerv1.SamplingParams{
			MaxTokens: 64, Temperature: new(0.5), TopP: new(0.9), TopK: 40, Stop: []string{"END"},
			Seed: new(int64(7)), MinTokens: 2, IgnoreEos: true, Extra: extra,
		},
		Handshake: &workerv1.PrefillRequest_Bootstrap{Bootstrap: &workerv1.Bootstrap{Host: "10.0.0.5", Port: 8998, Room: 42}},
	}
	got := f.prefillRequests()
	if len(got) != 1 {
		t.Fatalf("%d prefill calls", len(got))
	}
	if diff := cmp.Diff(want, got[0], protocmp.Transform()); diff != "" {
		t.Errorf("PrefillRequest (-want +got):\n%s", diff)
	}
}

// vLLM-style PD through the worker protocol: the prefill's kv_transfer_params come back in vLLM's
// JSON, survive ExtractKVTransferParams + VLLMDecodeBody, and reach Decode intact.
func TestGRPCVLLMRoundTrip(t *testing.T) {
	t.Parallel()
	kv := &workerv1.KVTransferParams{DoRemotePrefill: true, RemoteEngineId: "e1", RemoteBlockIds: []uint32{3, 4}, RemoteHost: "10.0.0.9", RemotePort: 5600}
	f := &fakeWorker{
		prefill: func(_ context.Context, r *workerv1.PrefillRequest) (*workerv1.PrefillResponse, error) {
			return &workerv1.PrefillResponse{PromptTokens: 3, KvTransfer: kv, InputLogprobs: []float64{-0.5}}, nil
		},
		decode: tokens("ok"),
	}
	addr := startWorker(t, f)
	orig := []byte(`{"model":"m","prompt":"p","max_tokens":20,"stream":false}`)
	pbody, err := body.VLLMPrefillBody(orig)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := post(t, newTestTransport(t, RolePrefill), context.Background(), addr, "/v1/completions", string(pbody), nil)
	if err != nil {
		t.Fatal(err)
	}
	presp := readBody(t, resp)
	pr := f.prefillRequests()[0]
	wantKV := &workerv1.KVTransferParams{DoRemoteDecode: true}
	if diff := cmp.Diff(wantKV, pr.GetKvTransfer(), protocmp.Transform()); diff != "" {
		t.Errorf("prefill handshake (-want +got):\n%s", diff)
	}
	if pr.GetSampling().GetMaxTokens() != 1 {
		t.Errorf("prefill max_tokens = %d, want 1", pr.GetSampling().GetMaxTokens())
	}
	params, err := body.ExtractKVTransferParams([]byte(presp))
	if err != nil {
		t.Fatalf("ExtractKVTransferParams(%s): %v", presp, err)
	}
	dbody, err := body.VLLMDecodeBody(orig, params)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = post(t, newTestTransport(t, RoleDecode), context.Background(), addr, "/v1/completions", string(dbody), nil)
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	if diff := cmp.Diff(kv, f.decodeRequests()[0].GetKvTransfer(), protocmp.Transform()); diff != "" {
		t.Errorf("decode handshake (-want +got):\n%s", diff)
	}
}

func TestGRPCDecodeUnary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		path  string
		body  string
		want  string
		calls int
	}{
		{
			name: "chat",
			path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"q"}],"bootstrap_host":"h","bootstrap_port":null,"bootstrap_room":5}`,
			want: `{"id":"chatcmpl-gen","object":"chat.completion","created":1700000000,"model":"m","choices":[` +
				`{"index":0,"message":{"role":"assistant","content":"Hel\"lo\n"},"logprobs":null,"finish_reason":"length"}],` +
				`"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":3}}}`,
			calls: 1,
		},
		{
			name: "completions batch x n",
			path: "/v1/completions",
			body: `{"model":"m","prompt":["a","b"],"n":2,"bootstrap_host":["h","h","h","h"],"bootstrap_port":[1,1,1,1],"bootstrap_room":[1,2,3,4]}`,
			want: `{"id":"cmpl-gen","object":"text_completion","created":1700000000,"model":"m","choices":[` +
				`{"index":0,"text":"Hel\"lo\n","logprobs":null,"finish_reason":"length"},` +
				`{"index":1,"text":"Hel\"lo\n","logprobs":null,"finish_reason":"length"},` +
				`{"index":2,"text":"Hel\"lo\n","logprobs":null,"finish_reason":"length"},` +
				`{"index":3,"text":"Hel\"lo\n","logprobs":null,"finish_reason":"length"}],` +
				`"usage":{"prompt_tokens":14,"completion_tokens":8,"total_tokens":22,"prompt_tokens_details":{"cached_tokens":6}}}`,
			calls: 4,
		},
		{
			name: "generate",
			path: "/generate",
			body: `{"text":"t","rid":"r9","sampling_params":{"max_new_tokens":2},"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":5}`,
			want: `{"text":"Hel\"lo\n","output_ids":[100,101],"meta_info":{"id":"r9","finish_reason":{"type":"length"},` +
				`"prompt_tokens":7,"completion_tokens":2,"cached_tokens":3}}`,
			calls: 1,
		},
		{
			name: "generate batch",
			path: "/generate",
			body: `{"input_ids":[[1,2],[3]],"rid":"r","bootstrap_host":["h","h"],"bootstrap_port":[1,1],"bootstrap_room":[5,6]}`,
			want: `[{"text":"Hel\"lo\n","output_ids":[100,101],"meta_info":{"id":"r-0","finish_reason":{"type":"length"},"prompt_tokens":7,"completion_tokens":2,"cached_tokens":3},"index":0},` +
				`{"text":"Hel\"lo\n","output_ids":[100,101],"meta_info":{"id":"r-1","finish_reason":{"type":"length"},"prompt_tokens":7,"completion_tokens":2,"cached_tokens":3},"index":1}]`,
			calls: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeWorker{decode: tokens("Hel", "\"lo\n")}
			addr := startWorker(t, f)
			resp, err := post(t, newTestTransport(t, RoleDecode), context.Background(), addr, tt.path, tt.body, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := readBody(t, resp); resp.StatusCode != 200 || got != tt.want {
				t.Errorf("response %d\n%s\nwant\n%s", resp.StatusCode, got, tt.want)
			}
			if !json.Valid([]byte(tt.want)) {
				t.Error("test expectation is not JSON")
			}
			reqs := f.decodeRequests()
			if len(reqs) != tt.calls {
				t.Fatalf("%d Decode calls, want %d", len(reqs), tt.calls)
			}
			rooms := map[uint64]bool{}
			for _, r := range reqs {
				if r.GetBootstrap() == nil {
					t.Fatalf("Decode without bootstrap: %v", r)
				}
				rooms[r.GetBootstrap().GetRoom()] = true
			}
			if len(rooms) != tt.calls {
				t.Errorf("rooms %v: each sub-request needs its own", rooms)
			}
		})
	}
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestGRPCDecodeStreamChatN2(t *testing.T) {
	t.Parallel()
	f := &fakeWorker{decode: tokens("a", "b", "c")}
	addr := startWorker(t, f)
	in := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":2,"messages":[{"role":"user","content":"q"}],` +
		`"bootstrap_host":["h","h"],"bootstrap_port":[1,1],"bootstrap_room":[11,12]}`
	resp, err := post(t, newTestTransport(t, RoleDecode), context.Background(), addr, "/v1/chat/completions", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sr := body.NewSSEReader(resp.Body)
	content := map[int]string{}
	roles := map[int]int{}
	finish := map[int]string{}
	var usage *chunk
	var frames []string
	for {
		p, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, string(p))
		if body.IsDone(p) {
			continue
		}
		var c chunk
		if err := json.Unmarshal(p, &c); err != nil {
			t.Fatalf("chunk %s: %v", p, err)
		}
		if c.Object != "chat.completion.chunk" || c.ID != "chatcmpl-gen" {
			t.Errorf("chunk head %s", p)
		}
		if len(c.Choices) == 0 {
			usage = &c
			continue
		}
		ch := c.Choices[0]
		if _, seen := finish[ch.Index]; seen {
			t.Errorf("chunk after finish for choice %d: %s", ch.Index, p)
		}
		if ch.Delta.Role != nil {
			roles[ch.Index]++
			if content[ch.Index] != "" {
				t.Errorf("role after content: %s", p)
			}
		}
		if ch.Delta.Content != nil {
			content[ch.Index] += *ch.Delta.Content
		}
		if ch.FinishReason != nil {
			finish[ch.Index] = *ch.FinishReason
		}
	}
	if diff := cmp.Diff(map[int]string{0: "abc", 1: "abc"}, content); diff != "" {
		t.Errorf("content (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int]int{0: 1, 1: 1}, roles); diff != "" {
		t.Errorf("role chunks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int]string{0: "length", 1: "length"}, finish); diff != "" {
		t.Errorf("finish (-want +got):\n%s", diff)
	}
	if usage == nil || usage.Usage == nil || usage.Usage.PromptTokens != 7 || usage.Usage.CompletionTokens != 6 || usage.Usage.TotalTokens != 13 {
		t.Errorf("usage chunk %+v", usage)
	}
	if n := len(frames); n < 2 || frames[n-1] != "[DONE]" || !strings.Contains(frames[n-2], `"choices":[]`) {
		t.Errorf("stream must end with the usage chunk then [DONE]: %q", frames)
	}
	rooms := []uint64{}
	for _, r := range f.decodeRequests() {
		rooms = append(rooms, r.GetBootstrap().GetRoom())
	}
	if len(rooms) != 2 || rooms[0] == rooms[1] {
		t.Errorf("rooms %v", rooms)
	}
}

func TestGRPCDecodeStreamGenerateAndCompletions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		path string
		body string
		want []string
	}{
		{
			name: "generate cumulative",
			path: "/generate",
			body: `{"text":"t","rid":"r","stream":true}`,
			want: []string{
				`{"text":"x","output_ids":[100],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":0,"completion_tokens":1,"cached_tokens":0}}`,
				`{"text":"xy","output_ids":[100,101],"meta_info":{"id":"r","finish_reason":{"type":"length"},"prompt_tokens":7,"completion_tokens":2,"cached_tokens":3}}`,
				`[DONE]`,
			},
		},
		{
			name: "completions",
			path: "/v1/completions",
			body: `{"model":"m","prompt":"p","stream":true}`,
			want: []string{
				`{"id":"cmpl-gen","object":"text_completion","created":1700000000,"model":"m","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":null}]}`,
				`{"id":"cmpl-gen","object":"text_completion","created":1700000000,"model":"m","choices":[{"index":0,"text":"y","logprobs":null,"finish_reason":"length"}]}`,
				`[DONE]`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeWorker{decode: tokens("x", "y")}
			addr := startWorker(t, f)
			// A regular worker: Decode without a handshake.
			resp, err := post(t, newTestTransport(t, RoleRegular), context.Background(), addr, tt.path, tt.body, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := readAll(t, resp.Body)
			resp.Body.Close()
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("frames (-want +got):\n%s", diff)
			}
			if r := f.decodeRequests()[0]; r.GetHandshake() != nil {
				t.Errorf("regular worker got a handshake: %v", r)
			}
		})
	}
}

func TestGRPCErrorMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code       connect.Code
		wantStatus int
	}{
		{connect.CodeUnavailable, 503},
		{connect.CodeResourceExhausted, 429},
		{connect.CodeDeadlineExceeded, 504},
		{connect.CodeInvalidArgument, 400},
		{connect.CodeNotFound, 404},
		{connect.CodeInternal, 500},
		{connect.CodeUnknown, 500},
	}
	for _, tt := range tests {
		fail := connect.NewError(tt.code, errors.New("engine says no"))
		f := &fakeWorker{
			prefill: func(context.Context, *workerv1.PrefillRequest) (*workerv1.PrefillResponse, error) { return nil, fail },
			decode: func(context.Context, *workerv1.DecodeRequest, *connect.ServerStream[workerv1.DecodeResponse]) error {
				return fail
			},
		}
		addr := startWorker(t, f)
		cases := []struct {
			role, body string
		}{
			{RolePrefill, `{"model":"m","prompt":"p"}`},
			{RoleDecode, `{"model":"m","prompt":"p"}`},
			{RoleDecode, `{"model":"m","prompt":"p","stream":true}`},
			{RoleDecode, `{"model":"m","prompt":"p","n":3}`},
		}
		for _, c := range cases {
			t.Run(tt.code.String()+"/"+c.role+"/"+c.body, func(t *testing.T) {
				resp, err := post(t, newTestTransport(t, c.role), context.Background(), addr, "/v1/completions", c.body, nil)
				if err != nil {
					t.Fatalf("worker error returned as transport error: %v", err)
				}
				got := readBody(t, resp)
				if resp.StatusCode != tt.wantStatus {
					t.Errorf("status %d, want %d", resp.StatusCode, tt.wantStatus)
				}
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				if err := json.Unmarshal([]byte(got), &e); err != nil || e.Error.Message != "engine says no" || e.Error.Code != tt.code.String() || e.Error.Type == "" {
					t.Errorf("error body %s (%v)", got, err)
				}
			})
		}
	}
}

func TestGRPCBadRequestsAndRoles(t *testing.T) {
	t.Parallel()
	f := &fakeWorker{decode: tokens("x")}
	addr := startWorker(t, f)
	tests := []struct {
		name       string
		role       string
		header     http.Header
		path, body string
		wantStatus int // 0: a RoundTrip error
	}{
		{name: "no role", path: "/generate", body: `{"text":"t"}`},
		{name: "unknown role", role: "", header: http.Header{RoleHeader: {"boss"}}, path: "/generate", body: `{"text":"t"}`},
		{name: "role from header", header: http.Header{RoleHeader: {"regular"}}, path: "/generate", body: `{"text":"t"}`, wantStatus: 200},
		{name: "malformed", role: RoleDecode, path: "/generate", body: `{"text":`, wantStatus: 400},
		{name: "one room for n=2", role: RoleDecode, path: "/v1/completions", body: `{"model":"m","prompt":"p","n":2,"bootstrap_room":1}`, wantStatus: 400},
		{name: "too few rooms", role: RoleDecode, path: "/v1/completions", body: `{"model":"m","prompt":"p","n":3,"bootstrap_room":[1,2]}`, wantStatus: 400},
		{name: "negative max_tokens", role: RoleDecode, path: "/v1/completions", body: `{"model":"m","prompt":"p","max_tokens":-1}`, wantStatus: 400},
		{name: "missing messages", role: RoleDecode, path: "/v1/chat/completions", body: `{"model":"m"}`, wantStatus: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newTestTransport(t, tt.role)
			resp, err := post(t, rt, context.Background(), addr, tt.path, tt.body, tt.header)
			if tt.wantStatus == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("RoundTrip succeeded with status %d", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := readBody(t, resp)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, got)
			}
		})
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestGRPCTransportFailureIsAnError(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, c := range []struct{ role, body string }{
		{RolePrefill, `{"text":"t"}`},
		{RoleDecode, `{"text":"t"}`},
		{RoleDecode, `{"text":"t","stream":true}`},
	} {
		resp, err := post(t, newTestTransport(t, c.role), context.Background(), addr, "/generate", c.body, nil)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s %s: dial failure answered with status %d", c.role, c.body, resp.StatusCode)
		}
	}
}

func TestGRPCStreamErrorAfterHead(t *testing.T) {
	t.Parallel()
	f := &fakeWorker{decode: func(_ context.Context, _ *workerv1.DecodeRequest, s *connect.ServerStream[workerv1.DecodeResponse]) error {
		if err := s.Send(&workerv1.DecodeResponse{Text: "x"}); err != nil {
			return err
		}
		return connect.NewError(connect.CodeInternal, errors.New("kv transfer failed"))
	}}
	addr := startWorker(t, f)
	resp, err := post(t, newTestTransport(t, RoleDecode), context.Background(), addr, "/v1/chat/completions",
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	frames, err := readAll(t, resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	if len(frames) != 3 || !body.IsErrorFrame([]byte(frames[1])) || !strings.Contains(frames[1], "kv transfer failed") || frames[2] != "[DONE]" {
		t.Errorf("frames %q: want a chunk, an error event, [DONE]", frames)
	}
}

// Closing the synthesized body cancels the RPC: the worker's handler sees its context end, and no
// goroutine of the call is left when Close returns (goleak checks the rest at the end).
func TestGRPCBodyCloseCancelsRPC(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		t.Run("n="+string(rune('0'+n)), func(t *testing.T) {
			serverDone := make(chan struct{}, n)
			f := &fakeWorker{decode: func(ctx context.Context, _ *workerv1.DecodeRequest, s *connect.ServerStream[workerv1.DecodeResponse]) error {
				if err := s.Send(&workerv1.DecodeResponse{Text: "first"}); err != nil {
					return err
				}
				<-ctx.Done()
				serverDone <- struct{}{}
				return ctx.Err()
			}}
			addr := startWorker(t, f)
			rooms := `"bootstrap_room":[1,2,3]`
			resp, err := post(t, newTestTransport(t, RoleDecode), context.Background(), addr, "/v1/completions",
				`{"model":"m","prompt":"p","stream":true,"n":`+string(rune('0'+n))+`,`+rooms+`}`, nil)
			if err != nil {
				t.Fatal(err)
			}
			sr := body.NewSSEReader(resp.Body)
			for range n {
				p, err := sr.Next()
				if err != nil || !bytes.Contains(p, []byte("first")) {
					t.Fatalf("first chunk %s, %v", p, err)
				}
			}
			if err := resp.Body.Close(); err != nil {
				t.Fatal(err)
			}
			deadline := time.After(10 * time.Second)
			for range n {
				select {
				case <-serverDone:
				case <-deadline:
					t.Fatal("the worker never saw the RPC cancelled")
				}
			}
		})
	}
}

// A request whose context ends while waiting for the first token gets a context error.
func TestGRPCContextCancelBeforeHead(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	f := &fakeWorker{decode: func(ctx context.Context, _ *workerv1.DecodeRequest, _ *connect.ServerStream[workerv1.DecodeResponse]) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}}
	addr := startWorker(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-entered
		cancel()
	}()
	resp, err := post(t, newTestTransport(t, RoleDecode), ctx, addr, "/generate", `{"text":"t","stream":true}`, nil)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("status %d, want a context error", resp.StatusCode)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}
