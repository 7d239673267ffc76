package body

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

func TestScanFrameUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		frame     string
		want      FrameUsage
		wantAfter string // CutUsageNull's result; "" = unchanged
	}{
		{name: "plain chunk", frame: `{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}`},
		{
			name:  "vLLM usage chunk",
			frame: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"total_tokens":19,"completion_tokens":7}}`,
			want:  FrameUsage{Has: true, Usage: Usage{Prompt: 12, Completion: 7}, UsageOnly: true},
		},
		{
			name:  "spaces and a usage detail object",
			frame: `{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 1}} }`,
			want:  FrameUsage{Has: true, Usage: Usage{Prompt: 3, Completion: 4}, UsageOnly: true},
		},
		{
			name:  "continuous usage on a content chunk",
			frame: `{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
			want:  FrameUsage{Has: true, Usage: Usage{Prompt: 3, Completion: 1}},
		},
		{
			name:      "OpenAI-style usage null",
			frame:     `{"id":"c","choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}`,
			want:      FrameUsage{NullStart: 57, NullEnd: 70}, // `,"usage":null`
			wantAfter: `{"id":"c","choices":[{"index":0,"delta":{"content":"x"}}]}`,
		},
		{
			name:  "usage of a choice is not the chunk's",
			frame: `{"choices":[{"index":0,"delta":{},"usage":null}],"created":1}`,
		},
		{
			name:  "usage inside a string",
			frame: `{"choices":[{"index":0,"delta":{"content":"\"usage\":{\"prompt_tokens\":1}"}}]}`,
		},
		{
			name:  "usage not last",
			frame: `{"usage":{"prompt_tokens":1,"completion_tokens":2},"choices":[]}`,
		},
		{name: "malformed", frame: `{"choices":[],"usage":{"prompt_tokens":`},
		{name: "done", frame: `[DONE]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ScanFrameUsage([]byte(tt.frame))
			if got != tt.want {
				t.Fatalf("ScanFrameUsage = %+v, want %+v", got, tt.want)
			}
			want := tt.wantAfter
			if want == "" {
				want = tt.frame
			}
			if after := string(CutUsageNull([]byte(tt.frame), got)); after != want {
				t.Errorf("CutUsageNull = %s, want %s", after, want)
			}
		})
	}
}

func TestUnaryUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		route  Route
		body   string
		want   Usage
		wantOK bool
	}{
		{"chat", RouteChat, `{"id":"x","choices":[{"message":{"content":"\"usage\""}}],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`, Usage{5, 9}, true},
		{"no usage", RouteCompletions, `{"id":"x","choices":[]}`, Usage{}, false},
		{"usage null", RouteCompletions, `{"usage":null}`, Usage{}, false},
		{"generate", RouteGenerate, `{"text":"hi","meta_info":{"id":"a","prompt_tokens":4,"completion_tokens":2}}`, Usage{4, 2}, true},
		{"generate batch", RouteGenerate, `[{"meta_info":{"prompt_tokens":4,"completion_tokens":2}},{"meta_info":{"prompt_tokens":5,"completion_tokens":3}}]`, Usage{9, 5}, true},
		{"generate without meta", RouteGenerate, `{"text":"hi"}`, Usage{}, false},
		{"not json", RouteChat, `oops`, Usage{}, false},
		{"embeddings", RouteEmbeddings, `{"data":[],"usage":{"prompt_tokens":3,"total_tokens":3}}`, Usage{3, 0}, true},
		{"responses", RouteResponses, `{"output":[],"usage":{"input_tokens":6,"output_tokens":4,"total_tokens":10}}`, Usage{6, 4}, true},
		{"messages", RouteMessages, `{"content":[],"usage":{"input_tokens":6,"output_tokens":4}}`, Usage{6, 4}, true},
		{"vllm members after usage", RouteChat, `{"id":"x","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}, "prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":{"a":[1,{"b":"}"}]}}` + "\n", Usage{5, 9}, true},
		{"sglang metadata after usage", RouteChat, `{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3},"metadata":{"weight_version":"default"}}`, Usage{2, 3}, true},
		{"nested usage after the top one", RouteChat, `{"usage":{"prompt_tokens":1,"completion_tokens":1},"meta":{"usage":{"prompt_tokens":9,"completion_tokens":9}}}`, Usage{1, 1}, true},
		{"nested usage only", RouteChat, `{"choices":[{"usage":{"prompt_tokens":9,"completion_tokens":9}}]}`, Usage{}, false},
		{"escaped key ends in usage", RouteChat, `{"usage":{"prompt_tokens":1,"completion_tokens":1},"x\"usage":{"prompt_tokens":7,"completion_tokens":7}}`, Usage{1, 1}, true},
		{"usage as a string value", RouteChat, `{"usage":{"prompt_tokens":1,"completion_tokens":2},"note":"usage"}`, Usage{1, 2}, true},
		{"last of two top-level usages", RouteChat, `{"usage":{"prompt_tokens":1,"completion_tokens":1},"usage":{"prompt_tokens":3,"completion_tokens":4}}`, Usage{3, 4}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := UnaryUsage(tt.route, []byte(tt.body))
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("UnaryUsage = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// FuzzUnaryUsage: reading the usage from the answer's end gives what a scan from its start gives,
// for every valid JSON body.
func FuzzUnaryUsage(f *testing.F) {
	for _, b := range []string{
		`{"id":"x","choices":[{"message":{"content":"\"usage\""}}],"usage":{"prompt_tokens":5,"completion_tokens":9}}`,
		`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9},"prompt_token_ids":null,"kv_transfer_params":{"a":[1]}}`,
		`{"usage":{"prompt_tokens":1,"completion_tokens":1},"meta":{"usage":{"prompt_tokens":9,"completion_tokens":9}}}`,
		`{"usage":{"prompt_tokens":1},"x\"usage":{"prompt_tokens":7}}`,
		`{"a":"\\","usage":{"completion_tokens":3}}`,
		`[{"usage":{"prompt_tokens":1}}]`,
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return // an engine's answer that is not JSON is not read from its end alike
		}
		want, wantOK := Usage{}, false
		if m, ok := jsonscan.FindMember(b, jsonscan.SkipWS(b, 0), "usage"); ok && b[m.ValStart] == '{' {
			want, wantOK = readUsage(m.Value(b))
		}
		if got, ok := UnaryUsage(RouteChat, b); got != want || ok != wantOK {
			t.Errorf("UnaryUsage(%s) = %+v, %v; a scan from the start reads %+v, %v", b, got, ok, want, wantOK)
		}
	})
}

func TestGenerateFrameUsage(t *testing.T) {
	t.Parallel()
	idx, u, ok := GenerateFrameUsage([]byte(`{"text":"ab","meta_info":{"prompt_tokens":7,"completion_tokens":2},"index":3}`))
	if !ok || idx != 3 || u != (Usage{7, 2}) {
		t.Errorf("got %d %+v %v", idx, u, ok)
	}
	if _, _, ok := GenerateFrameUsage([]byte(`{"text":"ab"}`)); ok {
		t.Error("a frame without meta_info reported usage")
	}
	if _, _, ok := GenerateFrameUsage([]byte(`[DONE]`)); ok {
		t.Error("[DONE] reported usage")
	}
}

func TestWithStreamUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
		wantOK           bool
	}{
		{"absent", `{"model":"m","stream":true}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, true},
		{"null", `{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"false kept order", `{"stream_options":{"include_usage":false,"x":1},"stream":true}`, `{"stream_options":{"include_usage":true,"x":1},"stream":true}`, true},
		{"other option", `{"stream_options":{"x":1}}`, `{"stream_options":{"x":1,"include_usage":true}}`, true},
		{"client asked", `{"stream_options":{"include_usage":true}}`, `{"stream_options":{"include_usage":true}}`, false},
		{"continuous stats", `{"stream_options":{"continuous_usage_stats":true}}`, `{"stream_options":{"continuous_usage_stats":true}}`, false},
		{"not an object", `{"stream_options":[1]}`, `{"stream_options":[1]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := WithStreamUsage([]byte(tt.body))
			if string(got) != tt.want || ok != tt.wantOK {
				t.Errorf("WithStreamUsage = %s, %v; want %s, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// BenchmarkScanFrameUsage is the per-frame cost the gateway adds to a relayed stream: the usage scan
// of a content chunk (no "usage") and of an OpenAI-style chunk with "usage":null.
func BenchmarkScanFrameUsage(b *testing.B) {
	for _, tc := range []struct{ name, frame string }{
		{"plain", benchChunk},
		{"usage_null", strings.TrimSuffix(benchChunk, "}") + `,"usage":null}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := []byte(tc.frame)
			b.ReportAllocs()
			for b.Loop() {
				if fu := ScanFrameUsage(p); fu.Has {
					b.Fatal("usage found")
				}
			}
		})
	}
}

// BenchmarkUnaryUsage reads the usage of a vLLM chat answer of 64 tokens, from its end (UnaryUsage)
// and, as the baseline, by a scan from its start.
func BenchmarkUnaryUsage(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("lorem ipsum dolor sit amet ", 13) + `","tool_calls":[]},"logprobs":null,"finish_reason":"length","stop_reason":null}],` +
		`"usage":{"prompt_tokens":64,"total_tokens":128,"completion_tokens":64},"prompt_logprobs":null,"kv_transfer_params":null}`)
	b.Run("from-end", func(b *testing.B) {
		for b.Loop() {
			if _, ok := UnaryUsage(RouteChat, answer); !ok {
				b.Fatal("no usage")
			}
		}
	})
	b.Run("from-start", func(b *testing.B) {
		for b.Loop() {
			m, ok := jsonscan.FindMember(answer, 0, "usage")
			if !ok {
				b.Fatal("no usage")
			}
			if _, ok := readUsage(m.Value(answer)); !ok {
				b.Fatal("no usage")
			}
		}
	})
}
