package config

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsers(t *testing.T) {
	file := writeFile(t, `
worker-urls: [http://w:1]
reasoning-parser: ["r1=deepseek_r1", qwen3]
tool-call-parser: deepseek
`)
	w := []string{"--worker-urls", "http://w:1"}
	tests := []struct {
		name               string
		args               []string
		reasoning, toolcal map[string]string
		wantErr            string
	}{
		{name: "none", args: w},
		{name: "SMG form", args: append(w, "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen"),
			reasoning: map[string]string{"": "qwen3"}, toolcal: map[string]string{"": "qwen"}},
		{name: "per model and default", args: append(w, "--reasoning-parser", "r1=deepseek_r1", "--reasoning-parser", " q = qwen3 ", "--tool-call-parser", "q=hermes", "--tool-call-parser", "deepseek_v3"),
			reasoning: map[string]string{"r1": "deepseek_r1", "q": "qwen3"}, toolcal: map[string]string{"q": "hermes", "": "deepseek_v3"}},
		{name: "file", args: []string{"--config", file},
			reasoning: map[string]string{"r1": "deepseek_r1", "": "qwen3"}, toolcal: map[string]string{"": "deepseek"}},
		{name: "unknown reasoning parser", args: append(w, "--reasoning-parser", "m=deepseek-r1"),
			wantErr: `unknown reasoning parser "deepseek-r1" (valid: deepseek_r1, qwen3)`},
		{name: "unknown tool-call parser", args: append(w, "--tool-call-parser", "llama"),
			wantErr: `unknown tool-call parser "llama" (valid: deepseek, deepseek_v3, deepseekv3, hermes, qwen, qwen25)`},
		{name: "model twice", args: append(w, "--tool-call-parser", "a=qwen", "--tool-call-parser", "a=deepseek"), wantErr: `model "a" is given twice`},
		{name: "no name", args: append(w, "--reasoning-parser", "a="), wantErr: "want MODEL=NAME"},
		{name: "no model", args: append(w, "--reasoning-parser", "=qwen3"), wantErr: "empty model name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.reasoning, c.Parsers.Reasoning); diff != "" {
				t.Errorf("Parsers.Reasoning (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.toolcal, c.Parsers.ToolCall); diff != "" {
				t.Errorf("Parsers.ToolCall (-want +got):\n%s", diff)
			}
		})
	}
}

// A model without a parser of its own takes the default one; without a default it has none.
func TestParserForModel(t *testing.T) {
	c := ParsersConfig{Reasoning: map[string]string{"r1": "deepseek_r1", "": "qwen3"}, ToolCall: map[string]string{"q": "qwen"}}
	for _, tt := range []struct{ model, reasoning, tool string }{
		{"r1", "deepseek_r1", ""},
		{"q", "qwen3", "qwen"},
		{"other", "qwen3", ""},
	} {
		if r, tc := c.ReasoningParser(tt.model), c.ToolCallParser(tt.model); r != tt.reasoning || tc != tt.tool {
			t.Errorf("model %s: parsers %q %q, want %q %q", tt.model, r, tc, tt.reasoning, tt.tool)
		}
	}
}

// The startup summary shows the parsers.
func TestParsersInSummary(t *testing.T) {
	c, err := Parse([]string{"--worker-urls", "http://w:1", "--reasoning-parser", "m=qwen3", "--tool-call-parser", "qwen"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := c.LogValue().String()
	if !strings.Contains(s, "reasoning_parser=m=qwen3") || !strings.Contains(s, "tool_call_parser=qwen") {
		t.Errorf("summary %s: want the parsers in it", s)
	}
}
