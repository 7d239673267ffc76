package body

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		route     Route
		body      string
		want      Request
		wantParam string // for errors: the field named; "-" for a body-level error
		malformed bool
	}{
		{
			name:  "chat minimal",
			route: RouteChat,
			body:  `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			want:  Request{Model: "m", N: 1, Text: "hi"},
		},
		{
			name:  "chat stream usage n parts",
			route: RouteChat,
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":3,` +
				`"messages":[{"role":"system","content":"be \"nice\""},{"role":"user","content":[` +
				`{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]},` +
				`{"role":"assistant","content":null}],"unknown":{"x":[1,2]}}`,
			want: Request{Model: "m", Stream: true, IncludeUsage: true, N: 3, Text: `be "nice" a b`},
		},
		{
			name:  "chat n as integral float and null stream",
			route: RouteChat,
			body:  `{"model":"m","n":2.0,"stream":null,"messages":[{"role":"user","content":"x"}]}`,
			want:  Request{Model: "m", N: 2, Text: "x"},
		},
		{
			name:  "chat escaped key",
			route: RouteChat,
			body:  `{"mod\u0065l":"m","messages":[{"role":"user","content":"x"}]}`,
			want:  Request{Model: "m", N: 1, Text: "x"},
		},
		{
			name:  "completions string",
			route: RouteCompletions,
			body:  ` {"model":"m","prompt":"once upon"} `,
			want:  Request{Model: "m", N: 1, Text: "once upon"},
		},
		{
			name:  "completions batch of strings",
			route: RouteCompletions,
			body:  `{"model":"m","prompt":["a","b","c"],"n":2}`,
			want:  Request{Model: "m", N: 2, BatchSize: 3, Text: "a"},
		},
		{
			name:  "completions token ids are one prompt",
			route: RouteCompletions,
			body:  `{"model":"m","prompt":[1,2,3]}`,
			want:  Request{Model: "m", N: 1},
		},
		{
			name:  "completions batch of token arrays",
			route: RouteCompletions,
			body:  `{"model":"m","prompt":[[1,2],[3]]}`,
			want:  Request{Model: "m", N: 1, BatchSize: 2},
		},
		{
			name:  "generate text without model",
			route: RouteGenerate,
			body:  `{"text":"hello","sampling_params":{"max_new_tokens":8,"n":4},"return_logprob":true,"stream":true}`,
			want:  Request{N: 4, Text: "hello", ReturnLogprob: true, Stream: true},
		},
		{
			name:  "generate batch",
			route: RouteGenerate,
			body:  `{"model":"m","text":["a","b"],"return_logprob":[false,true]}`,
			want:  Request{Model: "m", N: 1, BatchSize: 2, Text: "a", ReturnLogprob: true},
		},
		{
			name:  "generate input_ids batch with sampling list",
			route: RouteGenerate,
			body:  `{"input_ids":[[1,2],[3,4],[5]],"sampling_params":[{"n":2},{"n":2},{"n":2}]}`,
			want:  Request{N: 2, BatchSize: 3},
		},
		{
			name:  "generate input_ids single",
			route: RouteGenerate,
			body:  `{"input_ids":[1,2,3]}`,
			want:  Request{N: 1},
		},
		{name: "malformed", route: RouteChat, body: `{"model":"m",`, wantParam: "-", malformed: true},
		{name: "trailing garbage", route: RouteChat, body: `{"model":"m"} x`, wantParam: "-", malformed: true},
		{name: "not an object", route: RouteChat, body: `["model"]`, wantParam: "-"},
		{name: "empty body", route: RouteChat, body: ``, wantParam: "-"},
		{name: "chat missing model", route: RouteChat, body: `{"messages":[{"role":"user","content":"x"}]}`, wantParam: "model"},
		{name: "chat empty model", route: RouteChat, body: `{"model":"","messages":[{"role":"user","content":"x"}]}`, wantParam: "model"},
		{name: "model not a string", route: RouteChat, body: `{"model":3,"messages":[{"role":"user","content":"x"}]}`, wantParam: "model"},
		{name: "chat missing messages", route: RouteChat, body: `{"model":"m"}`, wantParam: "messages"},
		{name: "chat empty messages", route: RouteChat, body: `{"model":"m","messages":[]}`, wantParam: "messages"},
		{name: "chat messages not array", route: RouteChat, body: `{"model":"m","messages":"hi"}`, wantParam: "messages"},
		{name: "chat message not object", route: RouteChat, body: `{"model":"m","messages":["hi"]}`, wantParam: "messages[0]"},
		{name: "completions missing model", route: RouteCompletions, body: `{"prompt":"x"}`, wantParam: "model"},
		{name: "completions missing prompt", route: RouteCompletions, body: `{"model":"m"}`, wantParam: "prompt"},
		{name: "completions null prompt", route: RouteCompletions, body: `{"model":"m","prompt":null}`, wantParam: "prompt"},
		{name: "completions empty prompt array", route: RouteCompletions, body: `{"model":"m","prompt":[]}`, wantParam: "prompt"},
		{name: "completions prompt object", route: RouteCompletions, body: `{"model":"m","prompt":{}}`, wantParam: "prompt"},
		{name: "generate missing text", route: RouteGenerate, body: `{"model":"m"}`, wantParam: "text"},
		{name: "generate text number", route: RouteGenerate, body: `{"text":1}`, wantParam: "text"},
		{name: "n zero", route: RouteChat, body: `{"model":"m","n":0,"messages":[{"role":"user","content":"x"}]}`, wantParam: "n"},
		{name: "n too big", route: RouteCompletions, body: `{"model":"m","n":129,"prompt":"x"}`, wantParam: "n"},
		{name: "n not integer", route: RouteCompletions, body: `{"model":"m","n":1.5,"prompt":"x"}`, wantParam: "n"},
		{name: "n string", route: RouteCompletions, body: `{"model":"m","n":"2","prompt":"x"}`, wantParam: "n"},
		{name: "generate n zero", route: RouteGenerate, body: `{"text":"x","sampling_params":{"n":0}}`, wantParam: "sampling_params.n"},
		{name: "stream string", route: RouteChat, body: `{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, wantParam: "stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest(tt.route, []byte(tt.body))
			if tt.wantParam != "" {
				if err == nil {
					t.Fatalf("ParseRequest() = %+v, want error on %q", got, tt.wantParam)
				}
				if !errors.Is(err, ErrInvalidRequest) {
					t.Fatalf("error %v is not ErrInvalidRequest", err)
				}
				var re *RequestError
				if !errors.As(err, &re) {
					t.Fatalf("error %T is not *RequestError", err)
				}
				wantParam := tt.wantParam
				if wantParam == "-" {
					wantParam = ""
				}
				if re.Param != wantParam {
					t.Errorf("Param = %q, want %q (message %q)", re.Param, wantParam, re.Message)
				}
				if re.Malformed != tt.malformed {
					t.Errorf("Malformed = %v, want %v", re.Malformed, tt.malformed)
				}
				if wantParam != "" && !strings.Contains(re.Message, strings.Split(wantParam, "[")[0]) {
					t.Errorf("message %q does not name %q", re.Message, wantParam)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRequest() error = %v", err)
			}
			want := tt.want
			want.Route = tt.route
			if string(got.Body) != tt.body {
				t.Errorf("Body changed: %q", got.Body)
			}
			if diff := cmp.Diff(want, *got, cmpopts.IgnoreFields(Request{}, "Body", "PromptChars", "PromptTokenIDs"), cmpopts.IgnoreUnexported(Request{})); diff != "" {
				t.Errorf("ParseRequest() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRoutePaths(t *testing.T) {
	t.Parallel()
	for _, r := range append([]Route{RouteChat, RouteCompletions, RouteGenerate}, AuxRoutes()...) {
		got, ok := RouteFromPath(r.Path())
		if !ok || got != r {
			t.Errorf("RouteFromPath(%q) = %v, %v; want %v", r.Path(), got, ok, r)
		}
	}
	if _, ok := RouteFromPath("/v1/images/generations"); ok {
		t.Error("RouteFromPath(/v1/images/generations) ok")
	}
	if _, err := ParseRequest(Route(0), []byte(`{}`)); err == nil {
		t.Error("ParseRequest(invalid route) succeeded")
	}
}

// A 2 KB chat body: a system prompt and a few turns, as a chat client sends them.
func benchChatBody() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"stream_options":{"include_usage":true},` +
		`"temperature":0.7,"max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant. ` +
		`Answer briefly and precisely."}`)
	for b.Len() < 1900 {
		b.WriteString(`,{"role":"user","content":"Tell me about the history of the printing press and how it changed \"Europe\" in the fifteenth century."}`)
		b.WriteString(`,{"role":"assistant","content":"The printing press, developed by Gutenberg around 1440, made books cheaper.\nIt spread literacy."}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func BenchmarkParseRequest(b *testing.B) {
	body := benchChatBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(RouteChat, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseRequestStdlib is a reference point: encoding/json into the same few fields.
func BenchmarkParseRequestStdlib(b *testing.B) {
	body := benchChatBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var v struct {
			Model    string `json:"model"`
			Stream   *bool  `json:"stream"`
			N        *int   `json:"n"`
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// benchSamplingBody is a short chat request carrying the sampling fields reqcheck reads: there the
// checks are the largest share of the parse.
const benchSamplingBody = `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],` +
	`"temperature":0.7,"top_p":0.9,"top_k":40,"max_tokens":256,"min_tokens":1,"presence_penalty":0.1,"frequency_penalty":0.2,` +
	`"seed":1234,"stop":["\n\n","User:"],"logit_bias":{"50256":-100,"11":2.5},"stream":true,"stream_options":{"include_usage":true},` +
	`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],` +
	`"response_format":{"type":"json_object"},"user":"u-1"}`

func BenchmarkParseRequestSampling(b *testing.B) {
	body := []byte(benchSamplingBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(RouteChat, body); err != nil {
			b.Fatal(err)
		}
	}
}
