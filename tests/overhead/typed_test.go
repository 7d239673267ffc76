package overhead

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/benchcpu"
	"github.com/sluicegw/sluice/internal/sim"
)

// BenchmarkTypedRPC is a Connect client of sluice.openai.v1 through sluice to PD engines speaking the
// worker protocol (grpc:// workers, instant mode): the path on which #23 wants no proto <-> JSON round
// trip. It uses only what main already has, so the same file measures before and after:
//
//	go test -run '^$' -bench TypedRPC -count 10 ./tests/overhead/ | benchstat -
func BenchmarkTypedRPC(b *testing.B) {
	c := startCluster(b, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: sim.Config{GRPC: true}})
	p, d := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
	gw := startGateway(b, "--pd-disaggregation", "--policy", "round_robin", "--model-id", "sim-model",
		"--prefill-max-inflight-requests-per-worker", "256",
		"--prefill", strings.Replace(p.URL(), "http://", "grpc://", 1), strconv.Itoa(p.BootstrapPort()),
		"--decode", strings.Replace(d.URL(), "http://", "grpc://", 1))
	cl := openaiv1connect.NewOpenAIServiceClient(client(), gw)
	req := &openaiv1.CreateChatCompletionRequest{Model: "sim-model", MaxTokens: ptr[int32](16),
		Messages: []*openaiv1.ChatMessage{
			{Role: "system", Content: structpb.NewStringValue("You are a helpful assistant.")},
			{Role: "user", Content: structpb.NewStringValue("Write one short sentence about rivers.")},
		}}

	b.Run("connect/unary", func(b *testing.B) {
		runTyped(b, func(ctx context.Context) (int, error) {
			resp, err := cl.CreateChatCompletion(ctx, req)
			if err != nil {
				return 0, err
			}
			return len(resp.GetChoices()[0].GetMessage().GetContent().GetStringValue()), nil
		})
	})
	b.Run("connect/stream", func(b *testing.B) {
		runTyped(b, func(ctx context.Context) (int, error) {
			st, err := cl.StreamChatCompletion(ctx, req)
			if err != nil {
				return 0, err
			}
			defer st.Close()
			n := 0
			for st.Receive() {
				for _, ch := range st.Msg().GetChoices() {
					n += len(ch.GetDelta().GetContent())
				}
			}
			return n, st.Err()
		})
	})
}

// runTyped calls do from b.RunParallel goroutines and fails on an error or an empty answer.
func runTyped(b *testing.B, do func(context.Context) (int, error)) {
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	defer benchcpu.Start(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n, err := do(context.Background())
			if err != nil || n == 0 {
				b.Errorf("%d bytes of content, err %v (%v)", n, err, connect.CodeOf(err))
				return
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }
