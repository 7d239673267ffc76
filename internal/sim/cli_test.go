package sim

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for one writer and one polling reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		want    func(Config) bool
		wantErr bool
	}{
		{name: "defaults", args: nil, want: func(c Config) bool {
			return c.Role == RoleRegular && c.Protocol == ProtocolSGLang && c.Mode == ModeRealistic && c.Host == "127.0.0.1" &&
				c.MaxRunningRequests == 256 && c.PrefillTokensPerSec == 8000 && c.ITLBase == 6*time.Millisecond &&
				c.ITLPerSeq == 350*time.Microsecond && c.KVCapacityTokens == 524288 && c.BlockSize == 16 &&
				c.BootstrapTimeout == 30*time.Second && len(c.Models) == 1 && c.Models[0] == "sim-model" && c.Faults.SlownessFactor == 1 &&
				c.ContextLength == DefaultContextLength && c.DPSize == 1 && c.BootstrapPort == 0 && !c.Faults.OmitKVTransferParams
		}},
		{name: "decode falls back to SGLang's bootstrap port", args: []string{"--role", "decode"}, want: func(c Config) bool {
			return c.BootstrapPort == DefaultBootstrapPort
		}},
		{name: "pd flags", args: []string{"--role", "decode", "--disaggregation-bootstrap-port", "9000", "--context-length", "4096", "--dp-size", "2",
			"--omit-kv-transfer-params"}, want: func(c Config) bool {
			return c.BootstrapPort == 9000 && c.ContextLength == 4096 && c.DPSize == 2 && c.Faults.OmitKVTransferParams
		}},
		{name: "bad context length", args: []string{"--context-length", "-1"}, wantErr: true},
		{name: "engine flags", args: []string{"--role", "decode", "--protocol", "vllm", "--model", "a", "--model", "b", "--itl-base-ms", "2.5",
			"--bootstrap-timeout-secs", "0.5", "--error-rate", "0.25", "--grpc", "--mode", "instant"}, want: func(c Config) bool {
			return c.Role == RoleDecode && c.Protocol == ProtocolVLLM && len(c.Models) == 2 && c.Models[1] == "b" &&
				c.ITLBase == 2500*time.Microsecond && c.BootstrapTimeout == 500*time.Millisecond && c.Faults.ErrorRate == 0.25 &&
				c.GRPC && c.Mode == ModeInstant
		}},
		{name: "vllm defaults to nixl", args: []string{"--protocol", "vllm"}, want: func(c Config) bool {
			return c.KVConnector == ConnectorNIXL && c.DPSize == 1
		}},
		{name: "vllm mooncake with data parallel", args: []string{"--protocol", "vllm", "--role", "prefill", "--kv-connector", "mooncake",
			"--data-parallel-size", "4"}, want: func(c Config) bool {
			return c.KVConnector == ConnectorMooncake && c.DPSize == 4 && c.hasBootstrapServer()
		}},
		{name: "vllm's --max-num-seqs is the running window", args: []string{"--protocol", "vllm", "--role", "decode", "--max-num-seqs", "8"},
			want: func(c Config) bool { return c.MaxRunningRequests == 8 }},
		{name: "sglang's --max-running-requests", args: []string{"--role", "decode", "--max-running-requests", "8"},
			want: func(c Config) bool { return c.MaxRunningRequests == 8 && c.preallocates() }},
		{name: "sglang has no kv connector", args: []string{"--kv-connector", "mooncake"}, wantErr: true},
		{name: "unknown kv connector", args: []string{"--protocol", "vllm", "--kv-connector", "p2p"}, wantErr: true},
		{name: "dp size too large", args: []string{"--dp-size", "1000"}, wantErr: true},
		{name: "bad role", args: []string{"--role", "router"}, wantErr: true},
		{name: "bad error rate", args: []string{"--error-rate", "1.5"}, wantErr: true},
		{name: "bad port", args: []string{"--port", "70000"}, wantErr: true},
		{name: "stray argument", args: []string{"serve"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !tt.want(cfg) {
				t.Errorf("config %+v", cfg)
			}
		})
	}
}

func TestMainCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"cluster", "--prefill", "1", "--decode", "2", "--regular", "1", "--base-port", "0", "--mode", "instant"}, &stdout, &stderr)
	}()
	var lines []string
	waitFor(t, "four engine lines", func() bool {
		lines = strings.Split(strings.TrimSpace(stdout.String()), "\n")
		return len(lines) == 4
	})
	c := testClient(t)
	wantRoles := []string{"prefill", "decode", "decode", "regular"}
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != wantRoles[i] {
			t.Fatalf("line %q, want role %s", line, wantRoles[i])
		}
		if status, _ := get(t, c, f[1]+"/health"); status != 200 {
			t.Errorf("%s/health: %d", f[1], status)
		}
		if f[0] == "prefill" {
			if len(f) != 3 {
				t.Fatalf("prefill line %q lacks the bootstrap port", line)
			}
			conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", f[2]))
			if err != nil {
				t.Errorf("bootstrap port %s: %v", f[2], err)
			} else {
				conn.Close()
			}
			if _, err := strconv.Atoi(f[2]); err != nil {
				t.Errorf("bootstrap port %q", f[2])
			}
		}
	}
	cancel()
	if got := <-code; got != 0 {
		t.Errorf("exit code %d, stderr %s", got, stderr.String())
	}
}

func TestStartClusterBasePort(t *testing.T) {
	t.Parallel()
	// Find a free range by listening on port 0, then use the port after it as a base.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := ln.Addr().(*net.TCPAddr).Port + 1
	ln.Close()
	c, err := StartCluster(t.Context(), ClusterConfig{Prefill: 1, Decode: 1, BasePort: base, Mode: ModeInstant})
	if err != nil {
		t.Skipf("ports from %d not free: %v", base, err) // another process took them
	}
	defer c.Close()
	if c.Engines[0].Port() != base || c.Engines[1].Port() != base+1 || c.Engines[0].BootstrapPort() != base+2 {
		t.Errorf("ports %d %d bootstrap %d, want %d %d %d", c.Engines[0].Port(), c.Engines[1].Port(), c.Engines[0].BootstrapPort(), base, base+1, base+2)
	}
	if ep := c.Endpoints(); len(ep) != 2 || ep[0].Role != RolePrefill || ep[0].BootstrapPort != base+2 || ep[1].URL != c.Engines[1].URL() {
		t.Errorf("endpoints %+v", ep)
	}
	if len(c.ByRole(RoleDecode)) != 1 {
		t.Errorf("decode engines: %d", len(c.ByRole(RoleDecode)))
	}
	// A decode's null bootstrap_port falls back to the prefill's bootstrap port.
	if got := c.Engines[1].Config().BootstrapPort; got != base+2 {
		t.Errorf("decode fallback bootstrap port %d, want %d", got, base+2)
	}
}

// TestClusterNullBootstrapPort: in a cluster, SGLang decodes fall back to the prefill's bootstrap port,
// so a gateway that sends bootstrap_port null gets a working rendezvous.
func TestClusterNullBootstrapPort(t *testing.T) {
	t.Parallel()
	c, err := StartCluster(t.Context(), ClusterConfig{Prefill: 1, Decode: 1, Mode: ModeInstant})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, d := c.ByRole(RolePrefill)[0], c.ByRole(RoleDecode)[0]
	if d.Config().BootstrapPort != p.BootstrapPort() || p.BootstrapPort() == 0 {
		t.Fatalf("decode fallback %d, prefill bootstrap port %d", d.Config().BootstrapPort, p.BootstrapPort())
	}
	body := withBootstrap(`{"text":"null port","sampling_params":{"max_new_tokens":3}}`, "127.0.0.1", nil, 77)
	pr, dr := sendBoth(t, testClient(t), p.URL()+"/generate", body, d.URL()+"/generate", body)
	if pr.status != 200 || dr.status != 200 {
		t.Errorf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
	}
}

// TestMainClusterMooncakeDP: a vLLM Mooncake cluster with DP ranks from the command line prints the
// prefill's bootstrap port, whose /query lists one engine per rank.
func TestMainClusterMooncakeDP(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"cluster", "--protocol", "vllm", "--kv-connector", "mooncake", "--prefill", "1", "--decode", "1",
			"--data-parallel-size", "2", "--mode", "instant", "--engine-id", "ignored-in-clusters"}, &stdout, &stderr)
	}()
	var lines []string
	waitFor(t, "two engine lines", func() bool {
		lines = strings.Split(strings.TrimSpace(stdout.String()), "\n")
		return len(lines) == 2
	})
	f := strings.Fields(lines[0])
	if len(f) != 3 || f[0] != "prefill" {
		t.Fatalf("prefill line %q", lines[0])
	}
	status, body := get(t, testClient(t), "http://127.0.0.1:"+f[2]+"/query")
	q := decodeJSON[map[string]map[string]any](t, body)
	if status != 200 || len(q) != 2 || !strings.HasSuffix(q["1"]["engine_id"].(string), "_dp1") {
		t.Errorf("/query %d %s", status, body)
	}
	cancel()
	if got := <-code; got != 0 {
		t.Errorf("exit code %d, stderr %s", got, stderr.String())
	}
}
