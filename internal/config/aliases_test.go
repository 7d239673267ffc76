package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/alias"
)

func TestParseAliases(t *testing.T) {
	c, err := parseNoEnv("--worker-urls", "http://10.0.0.1:1", "--model-alias", "chat=llama-3.1-8b:90,llama-3.1-8b-rc:10",
		"--model-alias", "small=qwen", "--model-alias-expose-target")
	if err != nil {
		t.Fatal(err)
	}
	want := AliasesConfig{Rules: []alias.Rule{
		{Alias: "chat", Targets: []alias.Target{{Model: "llama-3.1-8b", Weight: 90}, {Model: "llama-3.1-8b-rc", Weight: 10}}},
		{Alias: "small", Targets: []alias.Target{{Model: "qwen", Weight: 1}}},
	}, ExposeTarget: true}
	if diff := cmp.Diff(want, c.Aliases); diff != "" {
		t.Fatalf("aliases (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--model-alias", "chat"}, "want alias=model"},
		{[]string{"--model-alias", "chat=a", "--model-alias", "chat=b"}, "--model-alias chat given twice"},
	} {
		_, err := parseNoEnv(append([]string{"--worker-urls", "http://10.0.0.1:1"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.wantErr)
		}
	}
}
