// Package enginegrpc is the gateway's client of the engines' own gRPC protocols: SGLang's scheduler
// (sglang.grpc.scheduler.SglangScheduler), vLLM's engine (vllm.grpc.engine.VllmEngine) and
// TensorRT-LLM's service (trtllm.TrtllmService), as served by `--grpc-mode`, `vllm serve --grpc` and
// `trtllm-serve --grpc --grpc-protocol smg`. It tells which protocol a worker speaks and what model it
// serves.
package enginegrpc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// Protocol names an engine's gRPC protocol. The values are the Rust gateway's runtime names, so a
// `--runtime` flag can take them as written.
type Protocol string

// The protocols.
const (
	SGLang Protocol = "sglang"
	VLLM   Protocol = "vllm"
	TRTLLM Protocol = "trtllm"
)

// protocols lists every protocol Detect asks about.
var protocols = []Protocol{SGLang, VLLM, TRTLLM}

// ParseProtocol reads a protocol name; "tensorrt-llm" is accepted for TRTLLM, as the Rust gateway does.
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(s) {
	case string(SGLang):
		return SGLang, nil
	case string(VLLM):
		return VLLM, nil
	case string(TRTLLM), "tensorrt-llm":
		return TRTLLM, nil
	}
	return "", fmt.Errorf("unknown engine gRPC protocol %q (want sglang, vllm or trtllm)", s)
}

// ModelInfo is what an engine's GetModelInfo says about the model it serves.
type ModelInfo struct {
	// ServedModelName is the name clients ask for. TensorRT-LLM reports only a model id (a name or a
	// path), which stands in for it.
	ServedModelName string
	// ModelPath is the path or hub id the engine loaded; empty for TensorRT-LLM.
	ModelPath string
	// ContextLength is the longest sequence, prompt plus output, in tokens; 0 when unknown.
	// TensorRT-LLM's is its max_seq_len.
	ContextLength int
	// EOSTokenIDs are the ids that end generation. TensorRT-LLM does not report them (it resolves
	// its end id itself), so they are nil there and must come from the tokenizer's config.
	EOSTokenIDs []int32
}

// ErrNotEngine means the server answered UNIMPLEMENTED for every engine service: it speaks gRPC but
// none of the engines' protocols.
var ErrNotEngine = errors.New("the server implements none of the engine gRPC services (SGLang, vLLM, TensorRT-LLM)")

// ErrAmbiguous means more than one engine service answered, so the protocol must be named.
var ErrAmbiguous = errors.New("the server implements more than one engine gRPC service")

// Detect finds which engine protocol the server behind conn speaks by asking each engine service
// for its model info: an engine answers UNIMPLEMENTED for the other engines' services, so the one
// that answers is its protocol. The standard grpc.health.v1 service answers on every engine, so it is
// not asked. Any answer other than success or UNIMPLEMENTED (the address is unreachable, the engine
// is still loading, the deadline passed) fails detection with that error rather than guessing.
func Detect(ctx context.Context, conn grpc.ClientConnInterface) (Protocol, ModelInfo, error) {
	type answer struct {
		info ModelInfo
		err  error
	}
	// Asked at once: an engine that is slow to answer costs one round trip, not three.
	answers := make([]answer, len(protocols))
	var wg sync.WaitGroup
	for i, p := range protocols {
		wg.Go(func() {
			info, err := GetModelInfo(ctx, conn, p)
			answers[i] = answer{info, err}
		})
	}
	wg.Wait()

	var found []Protocol
	var info ModelInfo
	for i, a := range answers {
		switch {
		case a.err == nil:
			found = append(found, protocols[i])
			info = a.info
		case status.Code(a.err) != codes.Unimplemented:
			return "", ModelInfo{}, a.err
		}
	}
	switch len(found) {
	case 0:
		return "", ModelInfo{}, ErrNotEngine
	case 1:
		return found[0], info, nil
	}
	names := make([]string, len(found))
	for i, p := range found {
		names[i] = string(p)
	}
	return "", ModelInfo{}, fmt.Errorf("%w: %s", ErrAmbiguous, strings.Join(names, ", "))
}

// GetModelInfo asks the engine behind conn, which speaks protocol p, for its model info. Errors are
// the call's gRPC status, wrapped with the protocol's name.
func GetModelInfo(ctx context.Context, conn grpc.ClientConnInterface, p Protocol) (ModelInfo, error) {
	var info ModelInfo
	var err error
	switch p {
	case SGLang:
		var r *sglangpb.GetModelInfoResponse
		r, err = sglangpb.NewSglangSchedulerClient(conn).GetModelInfo(ctx, &sglangpb.GetModelInfoRequest{})
		if err == nil {
			info = ModelInfo{
				ServedModelName: cmp.Or(r.GetServedModelName(), r.GetModelPath()),
				ModelPath:       r.GetModelPath(),
				ContextLength:   int(r.GetMaxContextLength()),
				EOSTokenIDs:     slices.Clone(r.GetEosTokenIds()),
			}
		}
	case VLLM:
		var r *vllmpb.GetModelInfoResponse
		r, err = vllmpb.NewVllmEngineClient(conn).GetModelInfo(ctx, &vllmpb.GetModelInfoRequest{})
		if err == nil {
			info = ModelInfo{
				ServedModelName: cmp.Or(r.GetServedModelName(), r.GetModelPath()),
				ModelPath:       r.GetModelPath(),
				ContextLength:   int(r.GetMaxContextLength()),
				EOSTokenIDs:     slices.Clone(r.GetEosTokenIds()),
			}
		}
	case TRTLLM:
		var r *trtllmpb.GetModelInfoResponse
		r, err = trtllmpb.NewTrtllmServiceClient(conn).GetModelInfo(ctx, &trtllmpb.GetModelInfoRequest{})
		if err == nil {
			info = ModelInfo{
				ServedModelName: r.GetModelId(),
				ContextLength:   int(r.GetMaxSeqLen()),
			}
		}
	default:
		return ModelInfo{}, fmt.Errorf("unknown engine gRPC protocol %q", p)
	}
	if err != nil {
		return ModelInfo{}, fmt.Errorf("%s GetModelInfo: %w", p, err)
	}
	if info.ContextLength < 0 {
		info.ContextLength = 0
	}
	return info, nil
}
