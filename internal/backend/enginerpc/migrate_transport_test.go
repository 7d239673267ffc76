package enginerpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// breakingEngine is an SGLang engine that streams the bytes of reply one per chunk and, after `after`
// of them, breaks off as brk says.
type breakingEngine struct {
	sglangpbconnect.UnimplementedSglangSchedulerHandler
	reply string
	after int
	brk   string // "abort": the engine's own abort finish; "unavailable": the RPC fails; "end": no Complete
}

func (b *breakingEngine) Generate(_ context.Context, req *sglangpb.GenerateRequest, st *connect.ServerStream[sglangpb.GenerateResponse]) error {
	prompt := uint32(len(req.GetTokenized().GetInputIds()))
	for i := range b.after {
		id := uint32(imEnd)
		if i < len(b.reply) {
			id = uint32(b.reply[i])
		}
		ch := &sglangpb.GenerateStreamChunk{TokenIds: []uint32{id}, PromptTokens: prompt, CompletionTokens: uint32(i + 1)}
		if err := st.Send(&sglangpb.GenerateResponse{Response: &sglangpb.GenerateResponse_Chunk{Chunk: ch}}); err != nil {
			return err
		}
	}
	switch b.brk {
	case "abort":
		done := &sglangpb.GenerateComplete{FinishReason: "abort", PromptTokens: prompt, CompletionTokens: uint32(b.after)}
		return st.Send(&sglangpb.GenerateResponse{Response: &sglangpb.GenerateResponse_Complete{Complete: done}})
	case "unavailable":
		return connect.NewError(connect.CodeUnavailable, errors.New("engine shutting down"))
	}
	return nil
}

func (b *breakingEngine) Abort(context.Context, *sglangpb.AbortRequest) (*sglangpb.AbortResponse, error) {
	return &sglangpb.AbortResponse{Success: true}, nil
}

func startHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return "grpc://" + srv.Listener.Addr().String()
}

// TestMigrationContinuesTheStream: the first engine breaks off after "he" (each way an engine can);
// the migrator continues on a second engine, which gets the prompt and "he" as its prompt and
// max_new_tokens reduced by 2. The client reads one stream: one role frame, "hello" once, no error,
// finish_reason and usage of the whole (prompt once, 2 + 3 + EOS completion tokens); the continuation
// ends without an Abort (it completed) and no goroutine is left (TestMain's goleak).
func TestMigrationContinuesTheStream(t *testing.T) {
	for _, brk := range []string{"abort", "unavailable", "end"} {
		t.Run(brk, func(t *testing.T) {
			tok := testTokenizer(t)
			first := startHandler(t, func() http.Handler {
				mux := http.NewServeMux()
				mux.Handle(sglangpbconnect.NewSglangSchedulerHandler(&breakingEngine{reply: "hello", after: 2, brk: brk}))
				return mux
			}())
			second := newFake("llo")
			secondURL := startEngine(t, second, enginegrpc.SGLang)
			h2c := newH2CClient()
			t.Cleanup(h2c.CloseIdleConnections)
			tr := NewTransport(h2c, nil, WithIDSource(func() string { return "gen" }))
			for _, u := range []string{first, secondURL} {
				if err := tr.SetEngine(u, Engine{Protocol: enginegrpc.SGLang, Tokenizer: tok, EOS: []int{imEnd}, Model: "m"}); err != nil {
					t.Fatal(err)
				}
			}
			const reqBody = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":10,` +
				`"stream_options":{"include_usage":true},"bootstrap_host":"p","bootstrap_port":1,"bootstrap_room":7}`
			var mu sync.Mutex
			var resumes []*Resume
			migrator := func(ctx context.Context, r *Resume) (io.Closer, error) {
				mu.Lock()
				resumes = append(resumes, r)
				mu.Unlock()
				if len(resumes) > 1 {
					return nil, ErrNoMigration
				}
				req, err := http.NewRequestWithContext(WithResume(ctx, r, "grpc://prefill:1"), http.MethodPost,
					secondURL+"/v1/chat/completions", strings.NewReader(reqBody))
				if err != nil {
					return nil, err
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					return nil, err
				}
				return resp.Body, nil
			}
			resp := post(t, tr, WithMigrator(context.Background(), migrator), first, "/v1/chat/completions", reqBody)
			events := sseEvents(t, resp)

			var text strings.Builder
			roles, finish := 0, ""
			var usage struct{ PromptTokens, CompletionTokens int }
			for _, ev := range events {
				if ev == "[DONE]" {
					continue
				}
				var ch struct {
					Choices []struct {
						Delta struct {
							Role, Content string
						}
						FinishReason *string `json:"finish_reason"`
					}
					Usage *struct {
						PromptTokens     int `json:"prompt_tokens"`
						CompletionTokens int `json:"completion_tokens"`
					}
					Error any
				}
				if err := json.Unmarshal([]byte(ev), &ch); err != nil || ch.Error != nil {
					t.Fatalf("event %s: %v", ev, err)
				}
				for _, c := range ch.Choices {
					text.WriteString(c.Delta.Content)
					if c.Delta.Role != "" {
						roles++
					}
					if c.FinishReason != nil {
						finish = *c.FinishReason
					}
				}
				if ch.Usage != nil {
					usage.PromptTokens, usage.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
				}
			}
			prompt := len(tok.Encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"))
			if text.String() != "hello" || roles != 1 || finish != "stop" || usage.PromptTokens != prompt || usage.CompletionTokens != 6 {
				t.Errorf("client read %q, %d role frames, finish %q, usage %+v; want \"hello\", 1, stop, {%d 6}", text.String(), roles, finish, usage, prompt)
			}
			if len(resumes) != 1 || resumes[0].Produced != 2 || resumes[0].Failed != first {
				t.Fatalf("migrations %+v, want one after 2 tokens from %s", resumes, first)
			}
			wantReason := map[string]string{"abort": ReasonEngineAbort, "unavailable": ReasonUnavailable, "end": ReasonNoComplete}[brk]
			if resumes[0].Reason != wantReason {
				t.Errorf("reason %q, want %q", resumes[0].Reason, wantReason)
			}
			second.mu.Lock()
			got := second.sglang
			second.mu.Unlock()
			if len(got) != 1 {
				t.Fatalf("the second engine got %d requests", len(got))
			}
			wantIDs := append(tok.EncodeUint32("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), 'h', 'e')
			if ids := got[0].GetTokenized().GetInputIds(); !slices.Equal(ids, wantIDs) || got[0].GetSamplingParams().GetMaxNewTokens() != 8 {
				t.Errorf("continuation prompt %v max_new_tokens %d; want %v and 8", ids, got[0].GetSamplingParams().GetMaxNewTokens(), wantIDs)
			}
			if a := second.aborts(); len(a) != 0 {
				t.Errorf("the completed continuation was aborted: %v", a)
			}
		})
	}
}

// TestBrokenAfterTheLastToken: an engine that breaks off after its last token (EOS, or the max_tokens-th)
// lost only its Complete: the stream ends as the whole answer would, without a continuation.
func TestBrokenAfterTheLastToken(t *testing.T) {
	for _, tc := range []struct {
		name, maxTokens, finish, text string
		after                         int
	}{
		{name: "eos", maxTokens: "10", after: 6, finish: "stop", text: "hello"},
		{name: "max_tokens", maxTokens: "3", after: 3, finish: "length", text: "hel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := startHandler(t, func() http.Handler {
				mux := http.NewServeMux()
				mux.Handle(sglangpbconnect.NewSglangSchedulerHandler(&breakingEngine{reply: "hello", after: tc.after, brk: "unavailable"}))
				return mux
			}())
			h2c := newH2CClient()
			t.Cleanup(h2c.CloseIdleConnections)
			tr := NewTransport(h2c, nil)
			if err := tr.SetEngine(url, Engine{Protocol: enginegrpc.SGLang, Tokenizer: testTokenizer(t), EOS: []int{imEnd}, Model: "m"}); err != nil {
				t.Fatal(err)
			}
			calls := 0
			migrator := func(context.Context, *Resume) (io.Closer, error) { calls++; return nil, ErrNoMigration }
			resp := post(t, tr, WithMigrator(context.Background(), migrator), url, "/v1/completions",
				`{"model":"m","prompt":"hi","stream":true,"max_tokens":`+tc.maxTokens+`}`)
			var text strings.Builder
			finish := ""
			for _, ev := range sseEvents(t, resp) {
				if ev == "[DONE]" {
					continue
				}
				var ch struct {
					Choices []struct {
						Text         string  `json:"text"`
						FinishReason *string `json:"finish_reason"`
					}
					Error any
				}
				if err := json.Unmarshal([]byte(ev), &ch); err != nil || ch.Error != nil {
					t.Fatalf("event %s: %v", ev, err)
				}
				for _, c := range ch.Choices {
					text.WriteString(c.Text)
					if c.FinishReason != nil {
						finish = *c.FinishReason
					}
				}
			}
			if text.String() != tc.text || finish != tc.finish || calls != 0 {
				t.Errorf("read %q finish %q after %d migrations; want %q %q and none", text.String(), finish, calls, tc.text, tc.finish)
			}
		})
	}
}
