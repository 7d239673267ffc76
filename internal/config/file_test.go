package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFilePrecedence(t *testing.T) {
	path := writeFile(t, `
port: 30001
policy: round_robin
health-check-interval-secs: 2.5
worker-urls: [http://file-a:1, http://file-b:1]
`)
	tests := []struct {
		name       string
		args       []string
		wantPort   int
		wantPolicy string
		wantURLs   []string
	}{
		{name: "file only", args: []string{"--config", path}, wantPort: 30001, wantPolicy: "round_robin", wantURLs: []string{"http://file-a:1", "http://file-b:1"}},
		{name: "flag overrides port, policy from file", args: []string{"--port", "40000", "--config", path}, wantPort: 40000, wantPolicy: "round_robin", wantURLs: []string{"http://file-a:1", "http://file-b:1"}},
		{name: "flag after --config still wins", args: []string{"--config=" + path, "--policy", "random"}, wantPort: 30001, wantPolicy: "random", wantURLs: []string{"http://file-a:1", "http://file-b:1"}},
		{name: "flag list replaces file list", args: []string{"--config", path, "--worker-urls", "http://cli:1"}, wantPort: 30001, wantPolicy: "round_robin", wantURLs: []string{"http://cli:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseNoEnv(tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			var urls []string
			for _, w := range c.Workers.Initial {
				urls = append(urls, w.URL)
			}
			got := []any{c.Server.Port, c.Placement.Policy, urls, c.Health.Interval.String()}
			want := []any{tt.wantPort, tt.wantPolicy, tt.wantURLs, "2.5s"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFileWorkers(t *testing.T) {
	path := writeFile(t, `
pd-disaggregation: true
runtime: vllm
prefill-max-inflight-requests-per-worker: 4
prefill-queue-size: 0
max-payload-size: 1GiB
prefill:
  - {url: "http://p:1", bootstrap-port: 8998}
  - url: http://p:2
  - url: http://p:3
    bootstrap-port: none
  - "http://p:4 9000"
  - http://p:5
decode:
  - http://d:1
  - {url: "grpc://d:2"}
`)
	c, err := parseNoEnv("--config", path)
	if err != nil {
		t.Fatal(err)
	}
	want := []WorkerFlag{
		{URL: "http://p:1", Role: RolePrefill, BootstrapPort: 8998},
		{URL: "http://p:2", Role: RolePrefill},
		{URL: "http://p:3", Role: RolePrefill},
		{URL: "http://p:4", Role: RolePrefill, BootstrapPort: 9000},
		{URL: "http://p:5", Role: RolePrefill},
		{URL: "http://d:1", Role: RoleDecode},
		{URL: "grpc://d:2", Role: RoleDecode, Protocol: ProtocolVLLM}, // runtime names its engine gRPC
	}
	if diff := cmp.Diff(want, c.Workers.Initial); diff != "" {
		t.Errorf("workers (-want +got):\n%s", diff)
	}
	if c.Mode() != ModePD || c.Admission.MaxInflightPerWorker != 4 || c.Admission.QueueSize != 0 || c.Server.MaxPayloadSize != 1<<30 {
		t.Errorf("mode %v, admission %+v, max payload %d", c.Mode(), c.Admission, c.Server.MaxPayloadSize)
	}
}

func TestFileEmpty(t *testing.T) {
	for _, content := range []string{"", "# only a comment\n"} {
		path := writeFile(t, content)
		c, err := parseNoEnv("--config", path)
		if err != nil {
			t.Fatalf("file %q: %v", content, err)
		}
		want := Default()
		want.Server.ConfigFile = path
		if diff := cmp.Diff(want, c, ignoreExplicit); diff != "" {
			t.Errorf("file %q changed the defaults (-want +got):\n%s", content, diff)
		}
	}
}

func TestFileRejects(t *testing.T) {
	tests := []struct {
		name    string
		content string
		args    []string
		wantErr string
	}{
		{name: "unknown key", content: "port: 1\nworkers: [http://a:1]\n", wantErr: `:2: unknown key "workers"`},
		{name: "unknown key with dashes", content: "--port: 1\n", wantErr: `unknown key "--port"`},
		{name: "config key", content: "config: other.yaml\n", wantErr: `key "config" is not allowed inside a config file`},
		{name: "duplicate key", content: "port: 1\nport: 2\n", wantErr: `key "port" given twice`},
		{name: "list for a single-valued key", content: "port: [1, 2]\n", wantErr: `key "port": takes a single value, not a list`},
		{name: "mapping for a single-valued key", content: "policy: {name: random}\n", wantErr: `key "policy": takes a single value, not a mapping`},
		{name: "null value", content: "port:\n", wantErr: `key "port": no value`},
		{name: "bad int", content: "port: high\n", wantErr: `key "port": invalid value "high"`},
		{name: "bad bool", content: "log-json: maybe\n", wantErr: `key "log-json": invalid value "maybe"`},
		{name: "bad size", content: "max-payload-size: huge\n", wantErr: `invalid size "huge"`},
		{name: "top level list", content: "- port\n", wantErr: "top level must be a mapping"},
		{name: "two documents", content: "port: 1\n---\nport: 2\n", wantErr: "want a single YAML document"},
		{name: "syntax error", content: "port: [1\n", wantErr: "config file"},
		{name: "unknown key in prefill entry", content: "pd-disaggregation: true\nprefill: [{url: http://p:1, port: 8998}]\n", wantErr: `unknown key "port" in a prefill entry (allowed: "url" and "bootstrap-port")`},
		{name: "bootstrap-port on decode entry", content: "pd-disaggregation: true\ndecode: [{url: http://d:1, bootstrap-port: 1}]\n", wantErr: `unknown key "bootstrap-port" in a decode entry`},
		{name: "prefill entry without url", content: "pd-disaggregation: true\nprefill: [{bootstrap-port: 1}]\n", wantErr: `prefill entry without "url"`},
		{name: "bad bootstrap port", content: "pd-disaggregation: true\nprefill: [{url: http://p:1, bootstrap-port: 99999}]\n", wantErr: `bootstrap port "99999"`},
		{name: "validation applies to file values", content: "retry-jitter-factor: 3\n", wantErr: "--retry-jitter-factor must be between 0 and 1"},
		{name: "queue flag in file without limit", content: "pd-disaggregation: true\nprefill-queue-size: 10\n", wantErr: "--prefill-queue-size is set but admission is off"},
		{name: "prefill in file without pd", content: "prefill: [http://p:1]\n", wantErr: "--prefill/--decode need --pd-disaggregation"},
		{name: "unknown key is an error even when the flag is given", content: "colour: blue\n", args: []string{"--port", "1"}, wantErr: `unknown key "colour"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--config", writeFile(t, tt.content)}, tt.args...)
			_, err := parseNoEnv(args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("parse with file %q = %v, want error containing %q", tt.content, err, tt.wantErr)
			}
		})
	}
}
