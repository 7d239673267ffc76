package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"

	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	"github.com/sluicegw/sluice/gen/trtllm/trtllmpbconnect"
)

// trtllmServicer serves TensorRT-LLM's trtllm.TrtllmService as `trtllm-serve --grpc --grpc-protocol
// smg` does (NVIDIA/TensorRT-LLM tensorrt_llm/grpc/smg/servicer.py and request_manager.py): token ids
// in and out. RPCs the simulator does not model (Embed, which TensorRT-LLM's servicer does not serve
// either, GetTokenizer, SubscribeKvEvents) answer UNIMPLEMENTED; the service has no GetLoads.
//
// Prefill/decode is not served. TensorRT-LLM's servicer accepts DisaggregatedParams (request_type,
// ctx_request_id and context_phase_params.first_gen_token_id; kv_cache_blocks is not read), but its
// Complete returns none of the context phase's state a generation-only leg needs (TensorRT-LLM's own
// disaggregated server hands the generation server the context response's opaque_state), and the
// Rust gateway refuses PD for this runtime (smg model_gateway/src/routers/grpc/common/stages/
// request_execution.rs: runtime_pd_not_supported). A request carrying DisaggregatedParams other than
// context-and-generation is refused.
type trtllmServicer struct {
	trtllmpbconnect.UnimplementedTrtllmServiceHandler
	g *grpcEngine
}

var _ trtllmpbconnect.TrtllmServiceHandler = trtllmServicer{}

// parse converts a GenerateRequest as create_sampling_params_from_proto does: an unset temperature or
// top_p is 1.0 (the servicer's own guard, not proto3's zero), max_tokens is taken as written (the
// field is required), num_return_sequences 0 is one sequence (the caller runs each sequence; beam search
// is not simulated). The simulated model's answer ends with
// its EOS after DefaultMaxTokens tokens, so a max_tokens above that (a gateway's "until EOS" cap)
// ends "stop" there, unless ignore_eos.
func (s trtllmServicer) parse(req *trtllmpb.GenerateRequest) (*grpcCall, error) {
	e := s.g.e
	tok := req.GetTokenized()
	if tok == nil {
		return nil, rpcError(requestError("", "Missing tokenized input")) // the servicer's words
	}
	cfg := req.GetSamplingConfig()
	if cfg.GetBeamWidth() > 1 {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("the simulator samples: beam_width above 1 is not served"))
	}
	if dp := req.GetDisaggregatedParams(); dp != nil && dp.GetRequestType() != trtllmpb.DisaggregatedParams_REQUEST_TYPE_CONTEXT_AND_GENERATION {
		return nil, connect.NewError(connect.CodeUnimplemented,
			fmt.Errorf("the simulator serves TensorRT-LLM's context-and-generation requests only, not %s", dp.GetRequestType()))
	}
	temp, topP := 1.0, 1.0
	if cfg != nil && cfg.Temperature != nil {
		temp = float64(cfg.GetTemperature())
	}
	if cfg != nil && cfg.TopP != nil {
		topP = float64(cfg.GetTopP())
	}
	maxTokens := int(req.GetMaxTokens())
	gs := grpcSampling{
		sr:        samplingRequest{n: 1, temperature: &temp, topP: &topP, maxTokens: &maxTokens},
		ignoreEOS: req.GetIgnoreEos(), stop: req.GetStop(), stopIDs: req.GetStopTokenIds(),
		constraint: trtllmConstraint(req.GetGuidedDecoding()),
	}
	if cfg != nil && cfg.Seed != nil {
		seed := int64(cfg.GetSeed()) //nolint:gosec // a seed's bits, not a quantity
		gs.seed = &seed
	}
	rid := req.GetRequestId()
	if rid == "" {
		rid = e.newID("grpc-")
	}
	sp, err := e.grpcSample(slices.Clone(tok.GetInputTokenIds()), &gs, rid)
	if err != nil {
		return nil, err
	}
	if natural := min(e.cfg.DefaultMaxTokens, e.cfg.ContextLength-len(sp.prompt.ids)); !gs.ignoreEOS && sp.maxTokens > natural {
		sp.maxTokens, sp.naturalStop = natural, true
	}
	return &grpcCall{rid: rid, spec: sp}, nil
}

// Generate streams, when asked to, one chunk per output token (its new ids, the cumulative
// completion count) and then, as the servicer's _complete_responses does, a Complete with every
// output id ("cumulative, not a delta") whether streaming or not. Finishing on the EOS is "stop" with
// no matched stop (TensorRT-LLM reports no stop_reason for its end id, and its output leaves the end
// id out); a stop string or id is reported as matched.
//
// n > 1 (num_return_sequences): every chunk carries its sequence_index, and the Completes, one per
// sequence, come together once the whole request has finished, as the servicer sends them when its
// GenerationResult is finished. The simulator runs the sequences one after the other. An Abort ends
// the request: the running sequence and those not yet run complete "cancelled".
//
// Logprobs (output_config.logprobs): each chunk carries its tokens' TokenLogprobs, each Complete its
// sequence's all; prompt_logprobs come only with the Completes.
func (s trtllmServicer) Generate(ctx context.Context, req *trtllmpb.GenerateRequest, stream *connect.ServerStream[trtllmpb.GenerateResponse]) error {
	n := max(req.GetSamplingConfig().GetNumReturnSequences(), 1)
	dones := make([]*trtllmpb.GenerateComplete, 0, n)
	for i := range n {
		done, aborted, err := s.generateSequence(ctx, req, stream, i)
		if err != nil {
			return err
		}
		dones = append(dones, done)
		if aborted {
			for j := i + 1; j < n; j++ {
				dones = append(dones, &trtllmpb.GenerateComplete{SequenceIndex: j, FinishReason: "cancelled",
					PromptTokens: uint32(len(req.GetTokenized().GetInputTokenIds()))})
			}
			break
		}
	}
	for _, done := range dones {
		if err := stream.Send(&trtllmpb.GenerateResponse{RequestId: req.GetRequestId(), Response: &trtllmpb.GenerateResponse_Complete{Complete: done}}); err != nil {
			return err
		}
	}
	return nil
}

// generateSequence runs sequence index of a Generate, streaming its chunks, and returns its Complete
// and whether an Abort ended it.
func (s trtllmServicer) generateSequence(ctx context.Context, req *trtllmpb.GenerateRequest, stream *connect.ServerStream[trtllmpb.GenerateResponse],
	index uint32,
) (*trtllmpb.GenerateComplete, bool, error) {
	rid := req.GetRequestId()
	prompt := uint32(len(req.GetTokenized().GetInputTokenIds()))
	oc := req.GetOutputConfig()
	lp := &lpModel{top: int(oc.GetLogprobs()), byteIDs: s.g.e.cfg.ByteTokenIDs}
	wantLP, wantPromptLP := oc != nil && oc.Logprobs != nil, oc != nil && oc.PromptLogprobs != nil
	var all []uint32
	completion := uint32(0) // engine tokens; with ByteTokenIDs one token is several ids
	res, aborted, err := s.g.generate(ctx, trtllmpbconnect.TrtllmServiceGenerateProcedure, stream.Conn().RequestHeader(),
		func() (*grpcCall, error) {
			c, err := s.parse(req)
			if err == nil {
				c.spec.choice = int(index)
			}
			return c, err
		},
		func(ids []uint32, cached int) error {
			completion++
			all = append(all, ids...)
			if !req.GetStreaming() || len(ids) == 0 {
				return nil // not streaming, or a stop string cut the token away: nothing new to send
			}
			ch := &trtllmpb.GenerateStreamChunk{TokenIds: ids, SequenceIndex: index, PromptTokens: prompt, CompletionTokens: completion, CachedTokens: uint32(cached)}
			if wantLP {
				ch.Logprobs = lp.trtllm(ids)
			}
			return stream.Send(&trtllmpb.GenerateResponse{RequestId: rid, Response: &trtllmpb.GenerateResponse_Chunk{Chunk: ch}})
		})
	if err != nil {
		return nil, false, err
	}
	done := &trtllmpb.GenerateComplete{
		OutputTokenIds: all, SequenceIndex: index, FinishReason: res.finish, PromptTokens: uint32(res.promptTokens),
		CompletionTokens: uint32(res.completionTokens), CachedTokens: uint32(res.cachedTokens),
	}
	if wantLP {
		done.Logprobs = (&lpModel{top: lp.top, byteIDs: lp.byteIDs}).trtllm(all)
	}
	if wantPromptLP {
		done.PromptLogprobs = (&lpModel{top: int(oc.GetPromptLogprobs()), byteIDs: lp.byteIDs}).trtllmPrompt(req.GetTokenized().GetInputTokenIds())
	}
	switch {
	case aborted:
		done.FinishReason = "cancelled" // TensorRT-LLM's FinishReason.CANCELLED, as CompletionOutput names it
	case res.matchedToken:
		done.MatchedStop = &trtllmpb.GenerateComplete_MatchedTokenId{MatchedTokenId: res.matchedID}
	case res.matched != "":
		done.MatchedStop = &trtllmpb.GenerateComplete_MatchedStopStr{MatchedStopStr: res.matched}
	}
	return done, aborted, nil
}

// HealthCheck answers "OK" when healthy; anything else is what is wrong (request_manager.py
// health_check).
func (s trtllmServicer) HealthCheck(context.Context, *trtllmpb.HealthCheckRequest) (*trtllmpb.HealthCheckResponse, error) {
	if s.g.e.healthFailing() {
		return &trtllmpb.HealthCheckResponse{Status: "Executor is unhealthy"}, nil
	}
	return &trtllmpb.HealthCheckResponse{Status: "OK"}, nil
}

// Abort ends a running Generate (its stream completes with finish_reason "cancelled") and says whether it found it, in the servicer's words.
func (s trtllmServicer) Abort(_ context.Context, req *trtllmpb.AbortRequest) (*trtllmpb.AbortResponse, error) {
	ok := s.g.abort(req.GetRequestId())
	verb := "not found"
	if ok {
		verb = "aborted"
	}
	return &trtllmpb.AbortResponse{Success: ok, Message: fmt.Sprintf("Request %s %s", req.GetRequestId(), verb)}, nil
}

// GetModelInfo reports the model id and lengths as the servicer does: no served name and no EOS ids
// (a gateway takes those from the tokenizer), max_seq_len the whole sequence.
func (s trtllmServicer) GetModelInfo(context.Context, *trtllmpb.GetModelInfoRequest) (*trtllmpb.GetModelInfoResponse, error) {
	e := s.g.e
	return &trtllmpb.GetModelInfoResponse{
		ModelId: e.cfg.Models[0], MaxInputLen: int32(e.cfg.ContextLength), MaxSeqLen: int32(e.cfg.ContextLength),
	}, nil
}

// GetServerInfo reports the version and parallelism (one rank: the servicer knows TP and PP only).
func (s trtllmServicer) GetServerInfo(context.Context, *trtllmpb.GetServerInfoRequest) (*trtllmpb.GetServerInfoResponse, error) {
	return &trtllmpb.GetServerInfoResponse{
		Version: engineVersion, Backend: "tensorrt-llm", TensorParallelSize: 1, PipelineParallelSize: 1,
		ContextParallelSize: 1, WorldSize: 1,
	}, nil
}
