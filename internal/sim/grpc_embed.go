package sim

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// Embed over both servicers: the tokenized input's embedding as /v1/embeddings computes it (pooling.go),
// EmbeddingDim float32s, with its prompt tokens; an input that fills the context is refused as over
// HTTP, with INVALID_ARGUMENT.

func (e *Engine) grpcEmbedding(ids []uint32) ([]float32, error) {
	if len(ids) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the input has no input ids"))
	}
	if len(ids) >= e.cfg.ContextLength {
		return nil, rpcError(requestError("input", "This model's maximum context length is %d tokens. However, you requested %d tokens in the input.", e.cfg.ContextLength, len(ids)))
	}
	v := embedding(ids, EmbeddingDim)
	out := make([]float32, len(v))
	for i, f := range v {
		out[i] = float32(f)
	}
	e.stats.completed.Add(1)
	return out, nil
}

func (s sglangServicer) Embed(_ context.Context, req *sglangpb.EmbedRequest) (*sglangpb.EmbedResponse, error) {
	ids := req.GetTokenized().GetInputIds()
	v, err := s.g.e.grpcEmbedding(ids)
	if err != nil {
		return nil, err
	}
	return &sglangpb.EmbedResponse{Embedding: v, EmbeddingDim: uint32(len(v)), PromptTokens: uint32(len(ids))}, nil
}

func (s vllmServicer) Embed(_ context.Context, req *vllmpb.EmbedRequest) (*vllmpb.EmbedResponse, error) {
	ids := req.GetTokenized().GetInputIds()
	v, err := s.g.e.grpcEmbedding(ids)
	if err != nil {
		return nil, err
	}
	return &vllmpb.EmbedResponse{Embedding: v, EmbeddingDim: uint32(len(v)), PromptTokens: uint32(len(ids))}, nil
}
