package enginerpc

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// A prompt handed over with WithPrompt is sent as given, not tokenized again: the sentinel ids below
// are not what the tokenizer makes of the text, so the engine receiving them proves the transport
// used the hand-off. One for another route, tokenizer or text is ignored.
func TestGivenPromptIsNotTokenizedAgain(t *testing.T) {
	f := newFake("ok")
	tok := testTokenizer(t)
	tr, url := setupEngine(t, f, Engine{Protocol: enginegrpc.SGLang, Tokenizer: tok, EOS: []int{imEnd}, Model: "m", ContextLength: 100})
	sentinel := []uint32{900, 901, 902}
	tokenized := tok.EncodeSpecialUint32("abc")
	tests := []struct {
		name     string
		path     string
		body     string
		given    *Prompt
		want     []uint32
		wantText string
	}{
		{name: "completions text", path: "/v1/completions", body: `{"model":"m","prompt":"abc"}`,
			given: &Prompt{Tokenizer: tok, Route: body.RouteCompletions, Text: "abc", IDs: sentinel}, want: sentinel, wantText: "abc"},
		{name: "generate text", path: "/generate", body: `{"text":"abc"}`,
			given: &Prompt{Tokenizer: tok, Route: body.RouteGenerate, Text: "abc", IDs: sentinel}, want: sentinel, wantText: "abc"},
		{name: "chat", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
			given: &Prompt{Tokenizer: tok, Route: body.RouteChat, Text: "rendered", IDs: sentinel}, want: sentinel, wantText: "rendered"},
		{name: "another text", path: "/v1/completions", body: `{"model":"m","prompt":"abc"}`,
			given: &Prompt{Tokenizer: tok, Route: body.RouteCompletions, Text: "abd", IDs: sentinel}, want: tokenized, wantText: "abc"},
		{name: "another route", path: "/v1/completions", body: `{"model":"m","prompt":"abc"}`,
			given: &Prompt{Tokenizer: tok, Route: body.RouteGenerate, Text: "abc", IDs: sentinel}, want: tokenized, wantText: "abc"},
		{name: "another tokenizer", path: "/v1/completions", body: `{"model":"m","prompt":"abc"}`,
			given: &Prompt{Tokenizer: testTokenizer(t), Route: body.RouteCompletions, Text: "abc", IDs: sentinel}, want: tokenized, wantText: "abc"},
		{name: "none", path: "/v1/completions", body: `{"model":"m","prompt":"abc"}`, want: tokenized, wantText: "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.given != nil {
				ctx = WithPrompt(ctx, tt.given)
			}
			resp := post(t, tr, ctx, url, tt.path, tt.body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			f.mu.Lock()
			req := f.sglang[len(f.sglang)-1]
			f.mu.Unlock()
			if got := req.GetTokenized(); !slices.Equal(got.GetInputIds(), tt.want) || got.GetOriginalText() != tt.wantText {
				t.Errorf("engine got ids %v text %q, want %v %q", got.GetInputIds(), got.GetOriginalText(), tt.want, tt.wantText)
			}
		})
	}
}

// The transport's own check stays for callers that bypass dispatch, and a handed-over prompt's
// length is what it checks.
func TestGivenPromptContextCheck(t *testing.T) {
	f := newFake("ok")
	tok := testTokenizer(t)
	tr, url := setupEngine(t, f, Engine{Protocol: enginegrpc.SGLang, Tokenizer: tok, EOS: []int{imEnd}, Model: "m", ContextLength: 3})
	ctx := WithPrompt(t.Context(), &Prompt{Tokenizer: tok, Route: body.RouteCompletions, Text: "a", IDs: []uint32{1, 2, 3}})
	resp := post(t, tr, ctx, url, "/v1/completions", `{"model":"m","prompt":"a"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("3 handed-over ids in a 3-token context: status %d, want 400", resp.StatusCode)
	}
	if param, msg := ContextExceeded(body.RouteGenerate, true, 5, 4); param != "text" || msg == "" {
		t.Errorf("generate text: param %q", param)
	}
	if param, _ := ContextExceeded(body.RouteGenerate, false, 5, 4); param != "input_ids" {
		t.Errorf("generate ids: param %q", param)
	}
}

// BenchmarkGivenPrompt: a 9.9k-character completions prompt sent through the transport tokenizing it
// itself (the baseline) and with its ids handed over (WithPrompt), as dispatch sends it after its
// pre-admission check; the ratio of the two is what the second tokenization would cost.
func BenchmarkGivenPrompt(b *testing.B) {
	f := newFake("ok")
	tok := testTokenizer(b)
	url := startEngine(b, f, enginegrpc.SGLang)
	h2c := newH2CClient()
	b.Cleanup(h2c.CloseIdleConnections)
	tr := NewTransport(h2c, nil)
	if err := tr.SetEngine(url, Engine{Protocol: enginegrpc.SGLang, Tokenizer: tok, EOS: []int{imEnd}, Model: "m"}); err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("the quick brown fox jumps over the lazy dog ", 220)
	reqBody := `{"model":"m","prompt":"` + text + `","max_tokens":1}`
	given := &Prompt{Tokenizer: tok, Route: body.RouteCompletions, Text: text, IDs: tok.EncodeSpecialUint32(text)}
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"tokenize", context.Background()}, {"handed-over", WithPrompt(context.Background(), given)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, err := http.NewRequestWithContext(bc.ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(reqBody))
				if err != nil {
					b.Fatal(err)
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
