package sim

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// grpcConn is a grpc-go client connection to the engine's port (h2c), closed when the test ends.
func grpcConn(t *testing.T, e *Engine) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(e.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// wantCode fails the test unless err is a gRPC status with code c whose message contains msg.
func wantCode(t *testing.T, err error, c codes.Code, msg string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != c || !strings.Contains(st.Message(), msg) {
		t.Fatalf("error %v, want %s containing %q", err, c, msg)
	}
}

// waitIdle waits until the engine runs and serves no request: its requests really ended.
func waitIdle(t *testing.T, e *Engine) {
	t.Helper()
	waitFor(t, "the engine to be idle", func() bool {
		st := e.Stats()
		return st.Running == 0 && st.InFlight == 0 && st.Queued == 0
	})
}

// TestEngineGRPCDetectTRTLLM: a TensorRT-LLM engine is detected by its service's GetModelInfo, which
// names the model by its id and reports max_seq_len as the context length, and no EOS ids.
func TestEngineGRPCDetectTRTLLM(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolTRTLLM, Mode: ModeInstant, GRPC: true, ContextLength: 4096, Models: []string{"trt-sim"}})
	got, info, err := enginegrpc.Detect(t.Context(), grpcConn(t, e))
	if err != nil {
		t.Fatal(err)
	}
	if got != enginegrpc.TRTLLM || info.ServedModelName != "trt-sim" || info.ContextLength != 4096 || info.EOSTokenIDs != nil {
		t.Errorf("Detect = %s %+v, want trtllm serving trt-sim, context 4096, no EOS ids", got, info)
	}
}

// TestEngineGRPCDetect: the gateway's detection (one GetModelInfo per engine service, UNIMPLEMENTED
// for the others) names the engine's protocol and reads its model, context length and EOS ids.
func TestEngineGRPCDetect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		proto Protocol
		want  enginegrpc.Protocol
	}{{ProtocolSGLang, enginegrpc.SGLang}, {ProtocolVLLM, enginegrpc.VLLM}} {
		t.Run(string(tc.proto), func(t *testing.T) {
			t.Parallel()
			e := startEngine(t, Config{Protocol: tc.proto, Mode: ModeInstant, GRPC: true, ContextLength: 4096, Models: []string{"qwen-sim"}})
			got, info, err := enginegrpc.Detect(t.Context(), grpcConn(t, e))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || info.ServedModelName != "qwen-sim" || info.ContextLength != 4096 || !slices.Equal(info.EOSTokenIDs, []int32{eosTokenID}) {
				t.Errorf("Detect = %s %+v, want %s serving qwen-sim, context 4096, EOS [%d]", got, info, tc.want, eosTokenID)
			}
		})
	}
}
