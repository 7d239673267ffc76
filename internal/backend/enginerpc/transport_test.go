package enginerpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func post(t *testing.T, tr http.RoundTripper, ctx context.Context, url, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Request-Id", "r1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decode[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	defer resp.Body.Close()
	var v T
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return v
}

// sseEvents reads an SSE body's data payloads, [DONE] included.
func sseEvents(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type chatResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         string          `json:"text"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
		MatchedStop  json.RawMessage `json:"matched_stop"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	Error            *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   string `json:"param"`
	} `json:"error"`
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`

// The prompt the engine gets is the chat rendered with the model's template and tokenized; the
// sampling defaults are SGLang's own, not proto3's zeros; the answer is the decoded reply without the
// EOS, with the engine's counts.
func TestChatUnarySGLang(t *testing.T) {
	f := newFake("hi there")
	tr, url := setup(t, enginegrpc.SGLang, f)
	resp := post(t, tr, t.Context(), url, "/v1/chat/completions", chatBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := decode[chatResponse](t, resp)
	if len(got.Choices) != 1 || got.Choices[0].Message.Content != "hi there" || got.Choices[0].Message.Role != "assistant" {
		t.Fatalf("choices = %+v", got.Choices)
	}
	if got.ID != "chatcmpl-r1" || got.Object != "chat.completion" || *got.Choices[0].FinishReason != "stop" ||
		string(got.Choices[0].MatchedStop) != "259" {
		t.Errorf("answer = %+v", got)
	}
	tk := testTokenizer(t)
	want := tk.Encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")
	req := f.sglang[0]
	if !slices.Equal(toInts(req.GetTokenized().GetInputIds()), want) {
		t.Errorf("input ids = %v, want %v", req.GetTokenized().GetInputIds(), want)
	}
	if u := got.Usage; u == nil || u.PromptTokens != len(want) || u.CompletionTokens != len("hi there")+1 {
		t.Errorf("usage = %+v, want %d prompt and %d completion tokens", got.Usage, len(want), len("hi there")+1)
	}
	p := req.GetSamplingParams()
	if p.GetTemperature() != 1 || p.GetTopP() != 1 || p.GetTopK() != -1 || p.GetRepetitionPenalty() != 1 ||
		p.MaxNewTokens != nil || p.GetN() != 1 || req.GetRequestId() != "r1" || req.GetStream() {
		t.Errorf("sampling params = %v (request id %q)", p, req.GetRequestId())
	}
}

// vLLM's wire: an unset temperature stays unset (the engine's default), OpenAI's top_k -1 is vLLM's
// 0, a seed beyond int32 is clamped; explicit values pass through.
func TestVLLMSamplingMapping(t *testing.T) {
	f := newFake("ok")
	tr, url := setup(t, enginegrpc.VLLM, f)
	resp := post(t, tr, t.Context(), url, "/v1/completions",
		`{"model":"m","prompt":"hello","top_k":-1,"seed":99999999999,"max_tokens":5,"temperature":0,"stop":["zz"],"min_tokens":1}`)
	got := decode[chatResponse](t, resp)
	if got.Choices[0].Text != "ok" || got.Object != "text_completion" {
		t.Fatalf("answer = %+v", got)
	}
	p := f.vllm[0].GetSamplingParams()
	if p.Temperature == nil || p.GetTemperature() != 0 || p.GetTopK() != 0 || p.GetSeed() != 2147483647 ||
		p.GetMaxTokens() != 5 || !slices.Equal(p.GetStop(), []string{"zz"}) || p.GetMinTokens() != 1 || p.GetTopP() != 1 {
		t.Errorf("sampling params = %v", p)
	}
	resp = post(t, tr, t.Context(), url, "/v1/completions", `{"model":"m","prompt":"hello"}`)
	decode[chatResponse](t, resp)
	if p := f.vllm[1].GetSamplingParams(); p.Temperature != nil {
		t.Errorf("temperature = %v, want unset", p.GetTemperature())
	}
	// A completions prompt is tokenized as the engine would (no special tokens for this model).
	if !slices.Equal(toInts(f.vllm[1].GetTokenized().GetInputIds()), testTokenizer(t).EncodeSpecial("hello")) {
		t.Errorf("prompt ids = %v", f.vllm[1].GetTokenized().GetInputIds())
	}
}

// A streamed chat is vLLM's SSE: the role first, the text in deltas, finish_reason on the last chunk,
// the usage chunk, [DONE]. Usage is the engine's count for both protocols, though SGLang's chunks
// count cumulatively and vLLM's per chunk.
func TestChatStream(t *testing.T) {
	for _, p := range []enginegrpc.Protocol{enginegrpc.SGLang, enginegrpc.VLLM} {
		t.Run(string(p), func(t *testing.T) {
			f := newFake("héllo wörld")
			tr, url := setup(t, p, f)
			resp := post(t, tr, t.Context(), url, "/v1/chat/completions",
				`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`)
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("content type %q", ct)
			}
			events := sseEvents(t, resp)
			if len(events) < 4 || events[len(events)-1] != "[DONE]" {
				t.Fatalf("events = %q", events)
			}
			var text strings.Builder
			var finish string
			for i, e := range events[:len(events)-2] {
				c := decodeString[chatResponse](t, e)
				ch := c.Choices[0]
				if (i == 0) != (ch.Delta.Role != nil) {
					t.Errorf("chunk %d: role %v", i, ch.Delta.Role)
				}
				if ch.Delta.Content != nil {
					if strings.ContainsRune(*ch.Delta.Content, '\uFFFD') {
						t.Errorf("chunk %d splits a character: %q", i, *ch.Delta.Content)
					}
					text.WriteString(*ch.Delta.Content)
				}
				if ch.FinishReason != nil {
					if i != len(events)-3 {
						t.Errorf("finish_reason on chunk %d of %d", i, len(events)-2)
					}
					finish = *ch.FinishReason
				}
			}
			if text.String() != "héllo wörld" || finish != "stop" {
				t.Errorf("text %q, finish %q", text.String(), finish)
			}
			u := decodeString[chatResponse](t, events[len(events)-2])
			if u.Usage == nil || len(u.Choices) != 0 || u.Usage.CompletionTokens != len("héllo wörld")+1 {
				t.Errorf("usage chunk = %s", events[len(events)-2])
			}
		})
	}
}

func decodeString[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v in %s", err, s)
	}
	return v
}

// A stop string spanning tokens ends the text where it begins; text held back in case it became one
// comes out when it does not; vLLM reports the matched string.
func TestStopStringAcrossTokens(t *testing.T) {
	f := newFake("hello world. bye")
	tr, url := setup(t, enginegrpc.VLLM, f)
	got := decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":["d. b","wz"]}`))
	if c := got.Choices[0]; c.Message.Content != "hello worl" || *c.FinishReason != "stop" || string(c.StopReason) != `"d. b"` {
		t.Errorf("choice = %+v (stop_reason %s)", c, c.StopReason)
	}
	events := sseEvents(t, post(t, tr, t.Context(), url, "/v1/completions",
		`{"model":"m","prompt":"x","stop":"d. b","stream":true}`))
	var text strings.Builder
	for _, e := range events[:len(events)-1] {
		text.WriteString(decodeString[chatResponse](t, e).Choices[0].Text)
	}
	if text.String() != "hello worl" {
		t.Errorf("streamed text %q", text.String())
	}
}

// max_tokens reaches the engine; its length finish is the answer's.
func TestLengthFinish(t *testing.T) {
	f := newFake("hello")
	tr, url := setup(t, enginegrpc.SGLang, f)
	got := decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":3,"max_tokens":9}`))
	if c := got.Choices[0]; c.Message.Content != "hel" || *c.FinishReason != "length" || f.sglang[0].GetSamplingParams().GetMaxNewTokens() != 3 {
		t.Errorf("choice = %+v, max_new_tokens %d", c, f.sglang[0].GetSamplingParams().GetMaxNewTokens())
	}
}

// A client that goes away mid-stream is an Abort of the engine's request, and the call leaves no
// goroutine behind (TestMain's goleak).
func TestClosedStreamAborts(t *testing.T) {
	for _, p := range []enginegrpc.Protocol{enginegrpc.SGLang, enginegrpc.VLLM} {
		t.Run(string(p), func(t *testing.T) {
			f := newFake("a long answer")
			f.hold = true
			tr, url := setup(t, p, f)
			resp := post(t, tr, t.Context(), url, "/v1/chat/completions",
				`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`)
			one := make([]byte, 1)
			if _, err := io.ReadFull(resp.Body, one); err != nil { // the role chunk: the stream is live
				t.Fatal(err)
			}
			resp.Body.Close() // with the rest of the role chunk unread
			if got := f.aborts(); !slices.Equal(got, []string{"r1"}) {
				t.Errorf("aborts = %q, want [r1]", got)
			}
			if n, err := resp.Body.Read(make([]byte, 64)); n != 0 || err == nil {
				t.Errorf("a read after Close got %d bytes, %v; want 0 and an error", n, err)
			}
		})
	}
}

// The body is rendered on its reader's goroutine: a Close from another goroutine ends a Read that
// waits for the engine (the RPC is cancelled), sends the Abort, and leaves no goroutine behind.
func TestCloseEndsAReadWaitingForTheEngine(t *testing.T) {
	f := newFake("a long answer")
	f.hold = true // one token, then nothing until the RPC ends or an Abort comes
	tr, url := setup(t, enginegrpc.SGLang, f)
	resp := post(t, tr, t.Context(), url, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`)
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		read <- err
	}()
	resp.Body.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Error("a closed stream's read ended cleanly")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the read waiting for the engine")
	}
	if got := f.aborts(); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("aborts = %q, want [r1]", got)
	}
}

// A cancelled request context while the unary answer is awaited is an Abort too.
func TestCancelledUnaryAborts(t *testing.T) {
	f := newFake("x")
	f.hold = true
	tr, url := setup(t, enginegrpc.SGLang, f)
	ctx, cancel := context.WithCancel(t.Context())
	// Not streaming the fake answers at once; ask for a stream to hold it, then cancel the context.
	resp := post(t, tr, ctx, url, "/generate", `{"text":"hi","stream":true}`)
	cancel()
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	poll.Until(t, "the engine got an Abort", 5*time.Second, func() bool { return len(f.aborts()) == 1 })
}

// SGLang PD: the bootstrap fields dispatch writes become DisaggregatedParams, the 63-bit room reduced
// to the wire's int32 keeping room % dp_size; the rank hint becomes data_parallel_rank.
func TestSGLangBootstrap(t *testing.T) {
	f := newFake("ok")
	tr, url := setup(t, enginegrpc.SGLang, f)
	const room = uint64(9_000_000_000_000_000_003)
	decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"bootstrap_host":"10.0.0.7","bootstrap_port":8998,"bootstrap_room":9000000000000000003,"routed_dp_rank":3}`))
	dp := f.sglang[0].GetDisaggregatedParams()
	if dp.GetBootstrapHost() != "10.0.0.7" || dp.GetBootstrapPort() != 8998 || dp.GetBootstrapRoom() < 0 {
		t.Fatalf("disaggregated params = %v", dp)
	}
	for dpSize := uint64(1); dpSize <= 16; dpSize++ {
		if uint64(dp.GetBootstrapRoom())%dpSize != room%dpSize {
			t.Errorf("room %d %% %d != %d %% %d", dp.GetBootstrapRoom(), dpSize, room, dpSize)
		}
	}
	if f.sglang[0].GetDataParallelRank() != 3 {
		t.Errorf("data_parallel_rank = %d", f.sglang[0].GetDataParallelRank())
	}
}

// vLLM NIXL: the prefill leg's kv_transfer_params go to the engine as kv_transfer_params_json, and the
// engine's come back as the answer's kv_transfer_params (what dispatch hands the decode leg).
func TestVLLMKVTransfer(t *testing.T) {
	f := newFake("ok")
	f.kvReturn = `{"do_remote_prefill":true,"remote_engine_id":"e1","remote_host":"10.0.0.8","remote_port":5600}`
	tr, url := setup(t, enginegrpc.VLLM, f)
	got := decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/completions",
		`{"model":"m","prompt":"x","max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true}}`))
	if kv := f.vllm[0].GetKvTransferParamsJson(); kv != `{"do_remote_decode":true}` {
		t.Errorf("kv_transfer_params_json = %q", kv)
	}
	var back, want map[string]any
	if err := json.Unmarshal(got.KVTransferParams, &back); err != nil {
		t.Fatalf("kv_transfer_params %s: %v", got.KVTransferParams, err)
	}
	_ = json.Unmarshal([]byte(f.kvReturn), &want)
	if back["remote_engine_id"] != want["remote_engine_id"] || back["remote_port"] != want["remote_port"] {
		t.Errorf("kv_transfer_params = %v, want %v", back, want)
	}
}

// The engine's errors are OpenAI error bodies with the status its HTTP server would give.
func TestEngineErrors(t *testing.T) {
	for _, tc := range []struct {
		code   connect.Code
		status int
		typ    string
	}{
		{connect.CodeInvalidArgument, 400, "invalid_request_error"},
		{connect.CodeResourceExhausted, 429, "rate_limit_error"},
		{connect.CodeUnavailable, 503, "server_error"},
		{connect.CodeInternal, 500, "server_error"},
	} {
		f := newFake("x")
		f.err = connect.NewError(tc.code, errors.New("the engine says no"))
		tr, url := setup(t, enginegrpc.SGLang, f)
		for _, stream := range []string{"false", "true"} {
			resp := post(t, tr, t.Context(), url, "/v1/chat/completions",
				`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":`+stream+`}`)
			got := decode[chatResponse](t, resp)
			if resp.StatusCode != tc.status || got.Error == nil || got.Error.Message != "the engine says no" || got.Error.Type != tc.typ {
				t.Errorf("%v stream=%s: status %d, %+v", tc.code, stream, resp.StatusCode, got.Error)
			}
		}
	}
}

// An engine that ends a generation with its own abort and nothing generated (SGLang's decode leg whose
// prefill failed) is a 503 dispatch may retry, streamed or not, and n > 1 alike: never a 200 with an
// empty answer.
func TestEngineAbortIsAnError(t *testing.T) {
	f := newFake("x")
	f.abortAll = true
	tr, url := setup(t, enginegrpc.SGLang, f)
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}`,
	} {
		resp := post(t, tr, t.Context(), url, "/v1/chat/completions", body)
		got := decode[chatResponse](t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || got.Error == nil || got.Error.Type != "server_error" {
			t.Errorf("%s: status %d, error %+v; want 503 server_error", body, resp.StatusCode, got.Error)
		}
	}
	if n := len(f.aborts()); n != 0 {
		t.Errorf("%d Aborts sent for generations the engine had already ended", n)
	}
}

// What is not served yet is a 400 naming the field, before any engine call.
func TestRefusals(t *testing.T) {
	f := newFake("x")
	tr, url := setup(t, enginegrpc.VLLM, f)
	for body, param := range map[string]string{
		`{"model":"m","messages":[{"role":"user","content":"x"}],"n":0}`:                  "n",
		`{"model":"m","prompt":["a","b"],"stream":true}`:                                  "stream",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":[""]}`:            "stop",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"regex":"a","ebnf":"b"}`: "response_format",
		`{"model":"m","messages":"nope"}`:                                                 "messages",
		`{"model":"m","prompt":[1,4000000]}`:                                              "prompt",
		`{"model":"m","prompt":[[4000000]]}`:                                              "prompt",
	} {
		path := "/v1/chat/completions"
		if strings.Contains(body, `"prompt"`) {
			path = "/v1/completions"
		}
		resp := post(t, tr, t.Context(), url, path, body)
		got := decode[chatResponse](t, resp)
		if resp.StatusCode != 400 || got.Error == nil || got.Error.Param != param {
			t.Errorf("%s: status %d, error %+v, want param %q", body, resp.StatusCode, got.Error, param)
		}
	}
	if len(f.vllm) != 0 {
		t.Errorf("%d requests reached the engine", len(f.vllm))
	}
	// SGLang's /generate: input_ids that name no token are refused, naming input_ids.
	sf := newFake("x")
	str, surl := setup(t, enginegrpc.SGLang, sf)
	resp := post(t, str, t.Context(), surl, "/generate", `{"input_ids":[1,2,4000000]}`)
	if got := decode[chatResponse](t, resp); resp.StatusCode != 400 || got.Error == nil || got.Error.Param != "input_ids" ||
		!strings.Contains(got.Error.Message, "input_ids[2]: token id 4000000") {
		t.Errorf("unknown input id: status %d, error %+v", resp.StatusCode, got.Error)
	}
	if len(sf.sglang) != 0 {
		t.Errorf("%d requests with an unknown id reached the engine", len(sf.sglang))
	}
	// An empty tools list (or null) is no tools.
	for _, tools := range []string{"[]", "null"} {
		resp := post(t, tr, t.Context(), url, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":`+tools+`}`)
		if got := decode[chatResponse](t, resp); resp.StatusCode != 200 || got.Choices[0].Message.Content != "x" {
			t.Errorf("tools %s: status %d, %+v", tools, resp.StatusCode, got)
		}
	}
}

// SGLang's /generate: text tokenized by the gateway, the object with output_ids and meta_info.
func TestGenerate(t *testing.T) {
	f := newFake("yo")
	tr, url := setup(t, enginegrpc.SGLang, f)
	got := decode[struct {
		Text      string   `json:"text"`
		OutputIDs []uint32 `json:"output_ids"`
		Meta      struct {
			FinishReason struct {
				Type    string `json:"type"`
				Matched int    `json:"matched"`
			} `json:"finish_reason"`
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"meta_info"`
	}](t, post(t, tr, t.Context(), url, "/generate", `{"text":"hey","sampling_params":{"max_new_tokens":8,"temperature":0.5}}`))
	if got.Text != "yo" || !slices.Equal(got.OutputIDs, []uint32{'y', 'o', imEnd}) || got.Meta.FinishReason.Type != "stop" ||
		got.Meta.FinishReason.Matched != imEnd || got.Meta.CompletionTokens != 3 {
		t.Errorf("answer = %+v", got)
	}
	if p := f.sglang[0].GetSamplingParams(); p.GetMaxNewTokens() != 8 || p.GetTemperature() != 0.5 {
		t.Errorf("sampling params = %v", p)
	}
}

// Requests for workers not registered as engines go to the fallback transport.
func TestFallback(t *testing.T) {
	called := false
	fb := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		called = true
		return &http.Response{StatusCode: 204, Body: http.NoBody, Request: r}, nil
	})
	tr := NewTransport(newH2CClient(), fb)
	req, _ := http.NewRequest(http.MethodPost, "grpc://127.0.0.1:1/v1/chat/completions", strings.NewReader("{}"))
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 204 || !called {
		t.Fatalf("fallback not used: %v %v", resp, err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The engine clients offer no compression: a Go engine would otherwise gzip every streamed chunk and
// the gateway inflate it, which cost most of the gateway's CPU per streamed token.
func TestGenerateOffersNoCompression(t *testing.T) {
	f := newFake("hi")
	mux := http.NewServeMux()
	mux.Handle(sglangpbconnect.NewSglangSchedulerHandler(f))
	accepted := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case accepted <- r.Header.Get("Grpc-Accept-Encoding"):
		default:
		}
		mux.ServeHTTP(w, r)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	h2c := newH2CClient()
	t.Cleanup(h2c.CloseIdleConnections)
	tr := NewTransport(h2c, nil)
	url := "grpc://" + srv.Listener.Addr().String()
	if err := tr.SetEngine(url, Engine{Protocol: enginegrpc.SGLang, Tokenizer: testTokenizer(t), EOS: []int{imEnd}, Model: "m"}); err != nil {
		t.Fatal(err)
	}
	events := sseEvents(t, post(t, tr, context.Background(), url, "/v1/chat/completions",
		`{"messages":[{"role":"user","content":"x"}],"stream":true}`))
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	if enc := <-accepted; strings.Contains(enc, "gzip") {
		t.Errorf("grpc-accept-encoding %q offers gzip", enc)
	}
}

// TestReadBody: a leg's body is read whole whatever its stated length says of it.
func TestReadBody(t *testing.T) {
	for _, c := range []struct {
		body   string
		length int64
	}{{"abc", 3}, {"abc", -1}, {"abc", 0}, {"abcdef", 3}, {"ab", 3}, {"", 0}} {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body))
		req.ContentLength = c.length
		got, err := readBody(req)
		if err != nil || string(got) != c.body {
			t.Errorf("length %d: got %q, %v; want %q", c.length, got, err, c.body)
		}
	}
}
