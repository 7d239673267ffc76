package config

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTokenizerPath(t *testing.T) {
	file := writeFile(t, `
worker-urls: [http://w:1]
tokenizer-path: ["qwen=/models/qwen3", /models/default]
`)
	tests := []struct {
		name    string
		args    []string
		want    map[string]string
		wantErr string
	}{
		{name: "none", args: []string{"--worker-urls", "http://w:1"}},
		{name: "per model and default", args: []string{"--worker-urls", "http://w:1", "--tokenizer-path", "a=/d/a", "--tokenizer-path", " b = /d/b ", "--tokenizer-path", "/d/any"},
			want: map[string]string{"a": "/d/a", "b": "/d/b", "": "/d/any"}},
		{name: "SMG form", args: []string{"--worker-urls", "http://w:1", "--tokenizer-path", "/d/x"}, want: map[string]string{"": "/d/x"}},
		{name: "file", args: []string{"--config", file}, want: map[string]string{"qwen": "/models/qwen3", "": "/models/default"}},
		{name: "command line replaces the file's list", args: []string{"--config", file, "--tokenizer-path", "m=/x"}, want: map[string]string{"m": "/x"}},
		{name: "model twice", args: []string{"--worker-urls", "http://w:1", "--tokenizer-path", "a=/1", "--tokenizer-path", "a=/2"}, wantErr: `model "a" is given twice`},
		{name: "no dir", args: []string{"--worker-urls", "http://w:1", "--tokenizer-path", "a="}, wantErr: "want MODEL=DIR"},
		{name: "no model", args: []string{"--worker-urls", "http://w:1", "--tokenizer-path", "=/d"}, wantErr: "empty model name"},
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
			if diff := cmp.Diff(tt.want, c.Tokenizer.Paths); diff != "" {
				t.Errorf("Tokenizer.Paths (-want +got):\n%s", diff)
			}
		})
	}
}

// SMG's --model-path (or --model): a local directory is the default tokenizer directory, as a bare
// --tokenizer-path is, which wins over it; a hub id is an inert SMG flag (sluice downloads nothing).
func TestModelPath(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		args  []string
		want  map[string]string
		inert []string
	}{
		{name: "local directory", args: []string{"--model-path", dir}, want: map[string]string{"": dir}},
		{name: "alias", args: []string{"--model", dir}, want: map[string]string{"": dir}},
		{name: "beside per-model tokenizers", args: []string{"--model-path", dir, "--tokenizer-path", "a=/d/a"},
			want: map[string]string{"": dir, "a": "/d/a"}},
		{name: "a bare --tokenizer-path wins", args: []string{"--model-path", dir, "--tokenizer-path", "/d/x"},
			want: map[string]string{"": "/d/x"}},
		{name: "hub id is not used", args: []string{"--model-path", "meta-llama/Llama-3.1-8B-Instruct"}, inert: []string{"model-path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(append([]string{"--worker-urls", "grpc://w:1"}, tt.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.Tokenizer.Paths); diff != "" {
				t.Errorf("Tokenizer.Paths (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.inert, c.InertSMGFlags); diff != "" {
				t.Errorf("InertSMGFlags (-want +got):\n%s", diff)
			}
		})
	}
}
