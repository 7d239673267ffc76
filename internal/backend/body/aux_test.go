package body

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseAux(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		route   Route
		body    string
		want    Request
		wantErr string
	}{
		{name: "embeddings string", route: RouteEmbeddings, body: `{"model":"e5","input":"hello world"}`,
			want: Request{Model: "e5", Text: "hello world"}},
		{name: "embeddings list", route: RouteEmbeddings, body: `{"model":"e5","input":["first","second"],"encoding_format":"base64"}`,
			want: Request{Model: "e5", Text: "first"}},
		{name: "embeddings without a model", route: RouteEmbeddings, body: `{"input":["first","second"]}`, wantErr: "model is required"},
		{name: "embeddings dimensions not a number", route: RouteEmbeddings, body: `{"model":"e5","input":"x","dimensions":"8"}`,
			wantErr: "dimensions must be an integer, got a string"},
		{name: "responses temperature out of range", route: RouteResponses, body: `{"model":"m","input":"x","temperature":-1}`,
			wantErr: "temperature must be at least 0, got -1"},
		{name: "embeddings token ids", route: RouteEmbeddings, body: `{"model":"e5","input":[1,2,3]}`, want: Request{Model: "e5"}},
		{name: "rerank", route: RouteRerank, body: `{"model":"r","query":"q?","documents":["a","b"],"top_n":1}`,
			want: Request{Model: "r", Text: "q?"}},
		{name: "score sglang form", route: RouteScore, body: `{"model":"m","query":"is it","items":["yes","no"],"label_token_ids":[1,2]}`,
			want: Request{Model: "m", Text: "is it"}},
		{name: "score vllm form", route: RouteScore, body: `{"model":"m","text_1":"a","text_2":["b"]}`, want: Request{Model: "m", Text: "a"}},
		{name: "tokenize messages", route: RouteTokenize, body: `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"there"}]}]}`,
			want: Request{Model: "m", Text: "hi there"}},
		{name: "detokenize", route: RouteDetokenize, body: `{"model":"m","tokens":[1,2]}`, want: Request{Model: "m"}},
		{name: "responses streaming", route: RouteResponses, body: `{"model":"m","input":"say hi","stream":true}`,
			want: Request{Model: "m", Text: "say hi", Stream: true, IncludeUsage: true}},
		{name: "messages", route: RouteMessages, body: `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hey"}]}`,
			want: Request{Model: "m", Text: "hey"}},
		{name: "missing input", route: RouteEmbeddings, body: `{"model":"m"}`, wantErr: "input or messages is required"},
		{name: "missing documents", route: RouteRerank, body: `{"query":"q"}`, wantErr: "documents is required"},
		{name: "stream on a pooling route", route: RouteEmbeddings, body: `{"input":"x","stream":true}`, wantErr: "/v1/embeddings does not stream"},
		{name: "model not a string", route: RouteClassify, body: `{"model":1,"input":"x"}`, wantErr: "model must be a string"},
		{name: "not an object", route: RouteTokenize, body: `["prompt"]`, wantErr: "request body must be a JSON object"},
		{name: "malformed", route: RouteTokenize, body: `{"prompt":`, wantErr: "malformed JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest(tt.route, []byte(tt.body))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidRequest) {
					t.Fatalf("err = %v, want an invalid request containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.Route, want.N = tt.route, 1
			if diff := cmp.Diff(want, *got, cmpopts.IgnoreFields(Request{}, "Body"), cmpopts.IgnoreUnexported(Request{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnginePath(t *testing.T) {
	t.Parallel()
	want := map[Route][2]string{ // sglang, vllm
		RouteEmbeddings: {"/v1/embeddings", "/v1/embeddings"},
		RouteRerank:     {"/v1/rerank", "/rerank"},
		RouteScore:      {"/v1/score", "/score"},
		RouteClassify:   {"/v1/classify", "/classify"},
		RouteTokenize:   {"/v1/tokenize", "/tokenize"},
		RouteDetokenize: {"/v1/detokenize", "/detokenize"},
		RouteResponses:  {"/v1/responses", "/v1/responses"},
		RouteMessages:   {"/v1/messages", "/v1/messages"},
		RouteChat:       {"/v1/chat/completions", "/v1/chat/completions"},
	}
	for r, w := range want {
		if got := [2]string{r.EnginePath("sglang"), r.EnginePath("vllm")}; got != w {
			t.Errorf("%s: %v, want %v", r, got, w)
		}
	}
	if r, ok := RouteFromPath("/rerank"); !ok || r != RouteRerank {
		t.Errorf("RouteFromPath(/rerank) = %v, %v", r, ok)
	}
}
