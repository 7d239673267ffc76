package openai

import (
	"context"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// CreateEmbedding returns the embeddings of the input. They are asked for as floats (the typed
// response has no room for base64 strings), whatever extra_body says.
func (s *Service) CreateEmbedding(ctx context.Context, req *openaiv1.CreateEmbeddingRequest) (*openaiv1.CreateEmbeddingResponse, error) {
	r := proto.Clone(req).(*openaiv1.CreateEmbeddingRequest)
	if r.ExtraBody == nil {
		r.ExtraBody = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	r.ExtraBody.Fields["encoding_format"] = structpb.NewStringValue("float")
	return unary(ctx, s, body.RouteEmbeddings, r, callHeader(ctx), &openaiv1.CreateEmbeddingResponse{}, nil)
}
