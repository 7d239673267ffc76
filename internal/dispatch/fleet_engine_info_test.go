package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

// An engine-gRPC worker's spec is completed from GetServerInfo as an HTTP one is from
// /get_server_info: SGLang's dp size, a prefill's bootstrap port, a decode's window (per rank) and KV
// capacity, and the role checked; vLLM's dp size and KV connector, and its kv_role checked.
func TestDetectorCompleteEngineServerInfo(t *testing.T) {
	tk := byteTokenizer(t)
	tests := []struct {
		name    string
		engine  sim.Config
		spec    worker.Spec // URL filled in
		check   func(t *testing.T, got worker.Spec)
		wantErr string
	}{
		{name: "SGLang decode: dp size, window per rank, KV tokens",
			engine: sim.Config{Protocol: sim.ProtocolSGLang, Role: sim.RoleDecode, DPSize: 2, MaxRunningRequests: 12, KVCapacityTokens: 40000},
			spec:   worker.Spec{Role: worker.RoleDecode, Protocol: worker.ProtocolSGLang},
			check: func(t *testing.T, got worker.Spec) {
				if got.DPSize != 2 || got.DecodeWindow != 6 || got.DecodeKVTokens != 20000 {
					t.Errorf("dp %d, window %d, kv tokens %d; want 2, 6 (12 over 2 ranks), 20000", got.DPSize, got.DecodeWindow, got.DecodeKVTokens)
				}
			}},
		{name: "SGLang prefill: bootstrap port",
			engine: sim.Config{Protocol: sim.ProtocolSGLang, Role: sim.RolePrefill, BootstrapPort: 18998},
			spec:   worker.Spec{Role: worker.RolePrefill},
			check: func(t *testing.T, got worker.Spec) {
				if got.BootstrapPort != 18998 || got.Protocol != worker.ProtocolSGLang {
					t.Errorf("bootstrap port %d, protocol %s; want 18998, sglang", got.BootstrapPort, got.Protocol)
				}
			}},
		{name: "SGLang prefill: a given bootstrap port is kept",
			engine: sim.Config{Protocol: sim.ProtocolSGLang, Role: sim.RolePrefill, BootstrapPort: 18998},
			spec:   worker.Spec{Role: worker.RolePrefill, BootstrapPort: 9000},
			check: func(t *testing.T, got worker.Spec) {
				if got.BootstrapPort != 9000 {
					t.Errorf("bootstrap port %d, want the given 9000", got.BootstrapPort)
				}
			}},
		{name: "SGLang role mismatch is refused",
			engine:  sim.Config{Protocol: sim.ProtocolSGLang, Role: sim.RolePrefill},
			spec:    worker.Spec{Role: worker.RoleDecode, Protocol: worker.ProtocolSGLang},
			wantErr: "disaggregation_mode prefill"},
		{name: "SGLang regular configured as decode is refused",
			engine:  sim.Config{Protocol: sim.ProtocolSGLang},
			spec:    worker.Spec{Role: worker.RoleDecode},
			wantErr: "does not run disaggregated"},
		{name: "vLLM Mooncake prefill: dp size and connector",
			engine: sim.Config{Protocol: sim.ProtocolVLLM, Role: sim.RolePrefill, DPSize: 2, KVConnector: sim.ConnectorMooncake},
			spec:   worker.Spec{Role: worker.RolePrefill, Protocol: worker.ProtocolVLLM},
			check: func(t *testing.T, got worker.Spec) {
				if got.DPSize != 2 || got.KVConnector != worker.KVConnectorMooncake {
					t.Errorf("dp %d, connector %q; want 2, mooncake", got.DPSize, got.KVConnector)
				}
			}},
		{name: "vLLM consumer configured as prefill is refused",
			engine:  sim.Config{Protocol: sim.ProtocolVLLM, Role: sim.RoleDecode},
			spec:    worker.Spec{Role: worker.RolePrefill, Protocol: worker.ProtocolVLLM},
			wantErr: "kv_role kv_consumer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.engine.EngineGRPCOnly = true
			spec := tt.spec
			spec.URL = startSimEngine(t, tt.engine)
			client := backend.NewHTTPClient(backend.HTTPClientOptions{})
			t.Cleanup(client.CloseIdleConnections)
			d := &Detector{HTTP: client, Tokenizer: func(string) *tokenizer.Tokenizer { return tk }}
			got, err := d.Complete(context.Background(), spec)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, worker.ErrInvalidSpec) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidSpec mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("completed spec invalid: %v", err)
			}
			tt.check(t, got)
		})
	}
}

// Without --tokenizer-path or --model-path the engine's tokenizer is pulled (GetTokenizer) and loaded
// once per bundle; a bundle that does not match its SHA-256 refuses the worker, named or detected.
func TestDetectorPullsEngineTokenizer(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%t", named), func(t *testing.T) {
			cfg := sim.Config{Protocol: sim.ProtocolSGLang, EngineGRPCOnly: true}
			cfg.Faults.CorruptTokenizer = true
			spec := worker.Spec{URL: startSimEngine(t, cfg), Role: worker.RoleRegular, Protocol: worker.ProtocolGRPC}
			if named {
				spec.Protocol = worker.ProtocolSGLang
			}
			client := backend.NewHTTPClient(backend.HTTPClientOptions{})
			t.Cleanup(client.CloseIdleConnections)
			_, err := (&Detector{HTTP: client}).Complete(context.Background(), spec)
			if err == nil || !errors.Is(err, worker.ErrInvalidSpec) || !errors.Is(err, enginegrpc.ErrTokenizerChecksum) {
				t.Fatalf("err = %v, want ErrInvalidSpec for the tokenizer's SHA-256", err)
			}
		})
	}
	t.Run("loaded once", func(t *testing.T) {
		var p pulledTokenizers
		var got []*tokenizer.Tokenizer
		for range 2 {
			url := startSimEngine(t, sim.Config{Protocol: sim.ProtocolVLLM, EngineGRPCOnly: true})
			conn, err := dialEngine(url)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := p.pull(context.Background(), conn, enginegrpc.VLLM)
			conn.Close()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, tk)
		}
		if got[0] != got[1] {
			t.Error("two engines sending the same bundle gave two tokenizers: want it loaded once")
		}
		if ids := got[0].Encode("ok"); len(ids) != 2 || ids[0] != 'o' {
			t.Errorf("the simulator's tokenizer encodes \"ok\" as %v, want its bytes", ids)
		}
	})
}
