package sim

import (
	"testing"

	"google.golang.org/grpc/codes"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// Embed answers the input's embedding as /v1/embeddings computes it, over both servicers, and refuses
// an input that fills the context.
func TestGRPCEmbed(t *testing.T) {
	t.Parallel()
	ids := appendTokens(nil, "embed this")
	want := embedding(ids, EmbeddingDim)
	sg := startEngine(t, Config{Mode: ModeInstant, GRPC: true, ContextLength: 64})
	sr, err := sglangpb.NewSglangSchedulerClient(grpcConn(t, sg)).Embed(t.Context(), &sglangpb.EmbedRequest{Tokenized: &sglangpb.TokenizedInput{InputIds: ids}})
	if err != nil {
		t.Fatal(err)
	}
	if sr.GetEmbeddingDim() != EmbeddingDim || sr.GetPromptTokens() != uint32(len(ids)) || sr.GetEmbedding()[3] != float32(want[3]) {
		t.Errorf("sglang embed %v", sr)
	}
	ve := startEngine(t, Config{Protocol: ProtocolVLLM, Mode: ModeInstant, GRPC: true, ContextLength: 64})
	vc := vllmpb.NewVllmEngineClient(grpcConn(t, ve))
	vr, err := vc.Embed(t.Context(), &vllmpb.EmbedRequest{Tokenized: &vllmpb.TokenizedInput{InputIds: ids}})
	if err != nil {
		t.Fatal(err)
	}
	if len(vr.GetEmbedding()) != EmbeddingDim || vr.GetEmbedding()[0] != float32(want[0]) {
		t.Errorf("vllm embed %v", vr)
	}
	_, err = vc.Embed(t.Context(), &vllmpb.EmbedRequest{Tokenized: &vllmpb.TokenizedInput{InputIds: make([]uint32, 64)}})
	wantCode(t, err, codes.InvalidArgument, "maximum context length is 64")
}
