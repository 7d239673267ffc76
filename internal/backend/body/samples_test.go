package body

import (
	"encoding/json"
	"testing"
)

func TestMergeSampleResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		route   Route
		bodies  []string
		want    string
		wantErr bool
	}{
		{
			name:  "chat: choices re-indexed, prompt counted once",
			route: RouteChat,
			bodies: []string{
				`{"id":"chatcmpl-a","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`,
				`{"id":"chatcmpl-b","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"y"},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`,
			},
			want: `{"id":"chatcmpl-a","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"y"},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":8,"total_tokens":18}}`,
		},
		{
			name:   "completions without usage",
			route:  RouteCompletions,
			bodies: []string{`{"choices":[{"index":0,"text":"a"}]}`, `{"choices":[{"text":"b","index":0}]}`, `{"choices":[{"text":"c"}]}`},
			want:   `{"choices":[{"index":0,"text":"a"},{"text":"b","index":1},{"text":"c","index":2}]}`,
		},
		{
			name:   "generate: SGLang's list for n samples",
			route:  RouteGenerate,
			bodies: []string{` {"text":"a","meta_info":{"id":"1"}}`, `{"text":"b","meta_info":{"id":"2"}}`},
			want:   `[{"text":"a","meta_info":{"id":"1"}},{"text":"b","meta_info":{"id":"2"}}]`,
		},
		{name: "no choices", route: RouteChat, bodies: []string{`{"id":"x"}`}, wantErr: true},
		{name: "malformed", route: RouteChat, bodies: []string{`{"choices":[`}, wantErr: true},
		{name: "generate malformed", route: RouteGenerate, bodies: []string{`{`}, wantErr: true},
		{name: "none", route: RouteChat, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bodies := make([][]byte, len(tt.bodies))
			for i, b := range tt.bodies {
				bodies[i] = []byte(b)
			}
			got, err := MergeSampleResponses(tt.route, bodies)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("MergeSampleResponses() = %s, want error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("MergeSampleResponses() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestSampleStreamMerger(t *testing.T) {
	t.Parallel()
	m := NewSampleStreamMerger(RouteChat)
	steps := []struct {
		k    int
		in   string
		want string // "" = held back
	}{
		{1, `{"id":"chatcmpl-b","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, `{"id":"chatcmpl-b","choices":[{"index":1,"delta":{"role":"assistant","content":""}}]}`},
		{0, `{"id":"chatcmpl-a","choices":[{"index":0,"delta":{"content":"x"}}]}`, `{"id":"chatcmpl-b","choices":[{"index":0,"delta":{"content":"x"}}]}`},
		{0, `{"id":"chatcmpl-a","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`, ""},
		{0, `[DONE]`, ""},
		{1, `{"id":"chatcmpl-b","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, `{"id":"chatcmpl-b","choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}`},
		{1, `{"id":"chatcmpl-b","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}`, ""},
		{1, `{"error":{"message":"boom"}}`, `{"error":{"message":"boom"}}`},
	}
	for i, s := range steps {
		got, err := m.Frame(s.k, []byte(s.in))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if string(got) != s.want {
			t.Errorf("step %d: Frame(%d, %s) = %s, want %s", i, s.k, s.in, got, s.want)
		}
	}
	u, err := m.UsageFrame()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"chatcmpl-b","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":6,"total_tokens":13}}`; string(u) != want {
		t.Errorf("UsageFrame() = %s, want %s", u, want)
	}

	g := NewSampleStreamMerger(RouteGenerate)
	got, err := g.Frame(3, []byte(`{"text":"t","meta_info":{"id":"r"}}`))
	if err != nil || string(got) != `{"text":"t","meta_info":{"id":"r"},"index":3}` {
		t.Errorf("generate frame = %s, %v", got, err)
	}
	if u, _ := g.UsageFrame(); u != nil {
		t.Errorf("generate usage frame = %s, want none", u)
	}
	if !json.Valid(got) {
		t.Error("invalid JSON")
	}
}
