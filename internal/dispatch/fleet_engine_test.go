package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

// byteTokenizer loads a byte-level tokenizer (ids 0-255 the bytes): any model's, for the detector.
func byteTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for c := range 256 {
		r := rune(c)
		if printable := c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE; !printable {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = c
	}
	tj, err := json.Marshal(map[string]any{
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": [][2]string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o600); err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func startSimEngine(t *testing.T, cfg sim.Config) string {
	t.Helper()
	cfg.Mode, cfg.GRPC = sim.ModeInstant, true
	e, err := sim.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return strings.Replace(e.URL(), "http://", "grpc://", 1)
}

// A grpc:// worker is an engine-gRPC worker when it answers an engine's GetModelInfo (and not
// sluice.worker.v1) and its model's tokenizer is loaded; else it stays on sluice.worker.v1, or is
// refused when its engine protocol was named.
func TestDetectorCompleteEngineGRPC(t *testing.T) {
	tk := byteTokenizer(t)
	withTok := func(string) *tokenizer.Tokenizer { return tk }
	engineOnly := func(p sim.Protocol) sim.Config { return sim.Config{Protocol: p, EngineGRPCOnly: true} }
	// An engine whose tokenizer directory has no tokenizer files: its GetTokenizer fails.
	noTokenizer := func(c sim.Config) sim.Config { c.TokenizerDir = t.TempDir(); return c }
	tests := []struct {
		name      string
		engine    sim.Config
		tokenizer func(string) *tokenizer.Tokenizer
		protocol  worker.Protocol // given
		want      worker.Protocol
		source    string
		wantErr   string
	}{
		{name: "SGLang detected", engine: engineOnly(sim.ProtocolSGLang), tokenizer: withTok, protocol: worker.ProtocolGRPC,
			want: worker.ProtocolSGLang, source: worker.ProtocolFromModelInfo},
		{name: "vLLM named", engine: engineOnly(sim.ProtocolVLLM), tokenizer: withTok, protocol: worker.ProtocolVLLM,
			want: worker.ProtocolVLLM, source: worker.ProtocolFromConfig},
		{name: "TensorRT-LLM detected", engine: engineOnly(sim.ProtocolTRTLLM), tokenizer: withTok, protocol: worker.ProtocolGRPC,
			want: worker.ProtocolTRTLLM, source: worker.ProtocolFromModelInfo},
		{name: "TensorRT-LLM named", engine: engineOnly(sim.ProtocolTRTLLM), tokenizer: withTok, protocol: worker.ProtocolTRTLLM,
			want: worker.ProtocolTRTLLM, source: worker.ProtocolFromConfig},
		{name: "TensorRT-LLM named but the server speaks SGLang's", engine: engineOnly(sim.ProtocolSGLang), tokenizer: withTok,
			protocol: worker.ProtocolTRTLLM, wantErr: "trtllm GetModelInfo"},
		{name: "detected without a tokenizer stays on the worker protocol", engine: noTokenizer(engineOnly(sim.ProtocolVLLM)),
			protocol: worker.ProtocolGRPC, want: worker.ProtocolGRPC, source: worker.ProtocolFromURLScheme},
		{name: "named without a tokenizer is refused", engine: noTokenizer(engineOnly(sim.ProtocolSGLang)), protocol: worker.ProtocolSGLang,
			wantErr: "--tokenizer-path"},
		{name: "detected without --tokenizer-path pulls the engine's", engine: engineOnly(sim.ProtocolVLLM),
			protocol: worker.ProtocolGRPC, want: worker.ProtocolVLLM, source: worker.ProtocolFromModelInfo},
		{name: "named but the server speaks the other engine's protocol", engine: engineOnly(sim.ProtocolSGLang), tokenizer: withTok,
			protocol: worker.ProtocolVLLM, wantErr: "vllm GetModelInfo"},
		{name: "a server that also speaks sluice.worker.v1 keeps it", engine: sim.Config{Protocol: sim.ProtocolSGLang}, tokenizer: withTok,
			protocol: worker.ProtocolGRPC, want: worker.ProtocolGRPC, source: worker.ProtocolFromURLScheme},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := startSimEngine(t, tt.engine)
			client := backend.NewHTTPClient(backend.HTTPClientOptions{})
			t.Cleanup(client.CloseIdleConnections)
			d := &Detector{HTTP: client, Tokenizer: tt.tokenizer}
			got, err := d.Complete(context.Background(), worker.Spec{URL: url, Role: worker.RoleRegular, Protocol: tt.protocol})
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, worker.ErrInvalidSpec) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidSpec mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Protocol != tt.want || got.ProtocolSource != tt.source || got.DetectPending {
				t.Errorf("protocol %q (%s, pending %t), want %q (%s)", got.Protocol, got.ProtocolSource, got.DetectPending, tt.want, tt.source)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("completed spec invalid: %v", err)
			}
			if tt.want != worker.ProtocolGRPC && (len(got.Models) != 1 || got.Models[0] != "sim-model") {
				t.Errorf("models = %v, want GetModelInfo's served model", got.Models)
			}
		})
	}
}

// A TensorRT-LLM worker given as a prefill or decode worker is refused with the reason: its service
// cannot hand a context phase's state to a decode worker.
func TestDetectorTRTLLMNotPD(t *testing.T) {
	tk := byteTokenizer(t)
	url := startSimEngine(t, sim.Config{Protocol: sim.ProtocolTRTLLM, EngineGRPCOnly: true})
	client := backend.NewHTTPClient(backend.HTTPClientOptions{})
	t.Cleanup(client.CloseIdleConnections)
	d := &Detector{HTTP: client, Tokenizer: func(string) *tokenizer.Tokenizer { return tk }}
	for _, role := range []worker.Role{worker.RolePrefill, worker.RoleDecode} {
		_, err := d.Complete(context.Background(), worker.Spec{URL: url, Role: role, Protocol: worker.ProtocolGRPC})
		if !errors.Is(err, worker.ErrInvalidSpec) || !errors.Is(err, worker.ErrTRTLLMRole) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec and ErrTRTLLMRole", role, err)
		}
	}
}

// A grpc:// worker that does not answer yet is pending, as an HTTP one is: nothing is guessed.
func TestDetectorCompleteEngineGRPCUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a port nobody listens on
	client := backend.NewHTTPClient(backend.HTTPClientOptions{})
	t.Cleanup(client.CloseIdleConnections)
	d := &Detector{HTTP: client, Tokenizer: func(string) *tokenizer.Tokenizer { return byteTokenizer(t) }}
	got, err := d.Complete(context.Background(), worker.Spec{URL: "grpc://" + addr, Role: worker.RoleRegular, Protocol: worker.ProtocolGRPC})
	if err != nil {
		t.Fatal(err)
	}
	if !got.DetectPending || got.Protocol != worker.ProtocolGRPC {
		t.Errorf("spec = %+v, want pending detection on the grpc protocol", got)
	}
}

// The model's parser names (--reasoning-parser, --tool-call-parser) reach the engine transport, which
// checks them: an unknown one makes the spec invalid.
func TestDetectorEngineParsers(t *testing.T) {
	tk := byteTokenizer(t)
	url := startSimEngine(t, sim.Config{Protocol: sim.ProtocolSGLang, EngineGRPCOnly: true})
	client := backend.NewHTTPClient(backend.HTTPClientOptions{})
	t.Cleanup(client.CloseIdleConnections)
	var asked []string
	d := &Detector{HTTP: client, Tokenizer: func(string) *tokenizer.Tokenizer { return tk },
		Parsers: func(model string) (string, string) {
			asked = append(asked, model)
			return "qwen3", "nope"
		}}
	_, err := d.Complete(context.Background(), worker.Spec{URL: url, Role: worker.RoleRegular, Protocol: worker.ProtocolGRPC})
	if err == nil || !errors.Is(err, worker.ErrInvalidSpec) || !strings.Contains(err.Error(), `tool-call parser "nope"`) {
		t.Errorf("err = %v, want ErrInvalidSpec naming the unknown tool-call parser", err)
	}
	if len(asked) != 1 || asked[0] != "sim-model" {
		t.Errorf("parsers asked for %q, want the served model", asked)
	}
}
