package sim

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"connectrpc.com/connect"

	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
	"github.com/sluicegw/sluice/gen/vllm/grpc/engine/vllmpbconnect"
)

// vllmServicer serves vLLM's vllm.grpc.engine.VllmEngine as `vllm serve --grpc` does
// (smg-project/smg grpc_servicer/smg_grpc_servicer/vllm/servicer.py, kv_transfer.py): token ids in and
// out, PD through kv_transfer_params_json with the same NIXL (or Mooncake) logic as the HTTP API. RPCs
// the simulator does not model answer UNIMPLEMENTED; GetTokenizer and SubscribeKvEvents are in
// grpc_tokenizer.go, grpc_kvevents.go.
type vllmServicer struct {
	vllmpbconnect.UnimplementedVllmEngineHandler
	g *grpcEngine
}

var _ vllmpbconnect.VllmEngineHandler = vllmServicer{}

// parse converts a GenerateRequest as the servicer's _sampling_params_from_proto and
// params_from_request do: an unset temperature is 1.0, a zero top_p 1.0, n 0 one sample; the connector
// parameters come from kv_transfer_params_json (a JSON object), else the deprecated typed field.
func (s vllmServicer) parse(req *vllmpb.GenerateRequest) (*grpcCall, error) {
	e := s.g.e
	var ids []uint32
	switch in := req.GetInput().(type) {
	case *vllmpb.GenerateRequest_Tokenized:
		ids = slices.Clone(in.Tokenized.GetInputIds())
	case *vllmpb.GenerateRequest_Text:
		ids = appendTokens(nil, in.Text) // the engine tokenizes a text prompt itself
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("GenerateRequest needs tokenized input or text"))
	}
	p := req.GetSamplingParams()
	temp, topP := 1.0, 1.0
	if p != nil && p.Temperature != nil {
		temp = float64(p.GetTemperature())
	}
	if p.GetTopP() != 0 {
		topP = float64(p.GetTopP())
	}
	gs := grpcSampling{
		sr:        samplingRequest{n: 1, temperature: &temp, topP: &topP},
		ignoreEOS: p.GetIgnoreEos(), stop: p.GetStop(), stopIDs: p.GetStopTokenIds(),
		constraint: vllmConstraint(p),
	}
	if p != nil && p.MaxTokens != nil {
		m := int(p.GetMaxTokens())
		gs.sr.maxTokens = &m
	}
	if p != nil && p.Seed != nil {
		seed := int64(p.GetSeed())
		gs.seed = &seed
	}
	kv, err := vllmKVParams(req)
	if err != nil {
		return nil, err
	}
	if p.GetN() > 1 && kv != nil {
		return nil, errNUnsupported // one KV handoff per request: a gateway sends n > 1 to a decode alone
	}
	rid := req.GetRequestId()
	if rid == "" {
		rid = e.newID("grpc-")
	}
	sp, err := e.grpcSample(ids, &gs, rid)
	if err != nil {
		return nil, err
	}
	samples := []sampleSpec{sp}
	if err := e.assignKVParams(samples, kv); err != nil {
		return nil, rpcError(err)
	}
	var hint rankHint
	if req.DataParallelRank != nil {
		r := int(req.GetDataParallelRank())
		if r < 0 || r >= len(e.ranks) {
			// vllm/v1/engine/input_processor.py process_inputs.
			return nil, rpcError(requestError("", "data_parallel_rank %d is out of range [0, %d).", r, len(e.ranks)))
		}
		hint.rank = &r
	}
	return &grpcCall{rid: rid, spec: samples[0], hint: hint}, nil
}

// vllmKVParams reads a request's connector parameters (kv_transfer.py params_from_request).
func vllmKVParams(req *vllmpb.GenerateRequest) (*kvParams, error) {
	if req.KvTransferParamsJson != nil {
		var raw any
		if err := json.Unmarshal([]byte(req.GetKvTransferParamsJson()), &raw); err != nil {
			return nil, rpcError(requestError("", "Invalid kv_transfer_params_json: %v", err))
		}
		if _, ok := raw.(map[string]any); !ok {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("kv_transfer_params_json must be a JSON object"))
		}
		var kv kvParams
		if err := json.Unmarshal([]byte(req.GetKvTransferParamsJson()), &kv); err != nil {
			return nil, rpcError(requestError("", "Invalid kv_transfer_params_json: %v", err))
		}
		return &kv, nil
	}
	if legacy := req.GetKvTransferParams(); legacy != nil {
		host, port := legacy.GetRemoteHost(), int(legacy.GetRemotePort())
		if host == "" || port < 1 || port > 65535 {
			return nil, rpcError(requestError("", "Invalid kv_transfer_params: remote_host must be set and remote_port must be in [1, 65535]."))
		}
		return &kvParams{RemoteHost: &host, RemotePort: &port}, nil
	}
	return nil, nil
}

// Generate streams one chunk per output token and a Complete when the sequence finishes, or only the
// Complete when the request did not ask to stream. vLLM's servicer runs the engine in DELTA mode when
// streaming: every chunk and the Complete carry the new ids and their count (the gateway accumulates),
// and the Complete is built from the same engine output as the last chunk, so it repeats that chunk's
// ids. Not streaming, the Complete has every id and the totals.
//
// n > 1: the samples run one after the other, each tagged with its index and ended by its own
// Complete.
func (s vllmServicer) Generate(ctx context.Context, req *vllmpb.GenerateRequest, stream *connect.ServerStream[vllmpb.GenerateResponse]) error {
	for i := range max(req.GetSamplingParams().GetN(), 1) {
		aborted, err := s.generateSample(ctx, req, stream, i)
		if err != nil || aborted {
			return err
		}
	}
	return nil
}

// generateSample runs sample index of a Generate and reports whether an Abort ended it.
func (s vllmServicer) generateSample(ctx context.Context, req *vllmpb.GenerateRequest, stream *connect.ServerStream[vllmpb.GenerateResponse], index uint32) (bool, error) {
	var last, all, promptIDs []uint32
	prompt := 0
	// Logprobs as the servicer sends them: sampling_params.logprobs alternatives per output token (a
	// stream's chunks carry their own), prompt_logprobs the prompt's in the first chunk, or in a
	// Complete not streamed; a decode leg computed no prompt.
	p := req.GetSamplingParams()
	lp := &lpModel{top: int(p.GetLogprobs()), byteIDs: s.g.e.cfg.ByteTokenIDs}
	wantLP := p.Logprobs != nil
	inLP := p.PromptLogprobs != nil && s.g.e.cfg.Role != RoleDecode
	if inLP && !wantLP {
		lp.top = int(p.GetPromptLogprobs())
	}
	first := true
	res, aborted, err := s.g.generate(ctx, vllmpbconnect.VllmEngineGenerateProcedure, stream.Conn().RequestHeader(),
		func() (*grpcCall, error) {
			c, err := s.parse(req)
			if err == nil {
				prompt = len(c.spec.prompt.ids)
				promptIDs = c.spec.prompt.ids
				c.spec.choice = int(index)
			}
			return c, err
		},
		func(ids []uint32, cached int) error {
			last = append(last[:0], ids...)
			if !req.GetStream() {
				all = append(all, ids...)
				return nil
			}
			if len(ids) == 0 {
				return nil // a stop string cut the token away: nothing to stream
			}
			ch := &vllmpb.GenerateStreamChunk{
				TokenIds: ids, PromptTokens: uint32(prompt), CompletionTokens: 1, CachedTokens: uint32(cached), // one engine token
				Index: index,
			}
			if wantLP {
				ch.OutputLogprobs = lp.vllm(ids)
			}
			if inLP && first {
				ch.InputLogprobs = lp.vllmInput(promptIDs)
			}
			first = false
			return stream.Send(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Chunk{Chunk: ch}})
		})
	if err != nil {
		return false, err
	}
	done := &vllmpb.GenerateComplete{
		FinishReason: res.finish, PromptTokens: uint32(res.promptTokens), CachedTokens: uint32(res.cachedTokens),
		OutputIds: all, CompletionTokens: uint32(res.completionTokens), Index: index,
	}
	if req.GetStream() {
		done.OutputIds, done.CompletionTokens = last, 1
	} else {
		if wantLP {
			done.OutputLogprobs = lp.vllm(all)
		}
		if inLP {
			done.InputLogprobs = lp.vllmInput(promptIDs)
		}
	}
	switch {
	case aborted:
		done.FinishReason = "abort"
	case res.matchedToken:
		done.MatchedStop = &vllmpb.GenerateComplete_MatchedTokenId{MatchedTokenId: res.matchedID}
	case res.matched != "":
		done.MatchedStop = &vllmpb.GenerateComplete_MatchedStopStr{MatchedStopStr: res.matched}
	}
	if kv := res.kvOut; kv != nil {
		// kv_transfer.py params_to_response_fields: the JSON object, and the deprecated typed mirror
		// when the params carry a valid host and port.
		b, err := json.Marshal(kv)
		if err != nil {
			return false, connect.NewError(connect.CodeInternal, err)
		}
		js := string(b)
		done.KvTransferParamsJson = &js
		if kv.RemoteHost != nil && *kv.RemoteHost != "" && kv.RemotePort != nil && *kv.RemotePort >= 1 && *kv.RemotePort <= 65535 {
			done.KvTransferParams = &vllmpb.KvTransferParams{RemoteHost: *kv.RemoteHost, RemotePort: uint32(*kv.RemotePort)}
		}
	}
	return aborted, stream.Send(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Complete{Complete: done}})
}

// HealthCheck answers healthy unless the FailHealth fault is on (vLLM's reports engine.errored).
func (s vllmServicer) HealthCheck(context.Context, *vllmpb.HealthCheckRequest) (*vllmpb.HealthCheckResponse, error) {
	if s.g.e.healthFailing() {
		return &vllmpb.HealthCheckResponse{Healthy: false, Message: "Engine is not alive"}, nil
	}
	return &vllmpb.HealthCheckResponse{Healthy: true, Message: "Health"}, nil
}

// Abort ends the running Generate calls with these ids; their streams complete with finish_reason
// "abort". Unknown ids are ignored, as vLLM's engine.abort does.
func (s vllmServicer) Abort(_ context.Context, req *vllmpb.AbortRequest) (*vllmpb.AbortResponse, error) {
	s.g.abort(req.GetRequestIds()...)
	return &vllmpb.AbortResponse{}, nil
}

// GetModelInfo reports the served model (model_info.py model_facts): max_req_input_len is the
// context length.
func (s vllmServicer) GetModelInfo(context.Context, *vllmpb.GetModelInfoRequest) (*vllmpb.GetModelInfoResponse, error) {
	e := s.g.e
	model := e.cfg.Models[0]
	return &vllmpb.GetModelInfoResponse{
		ModelPath: model, IsGeneration: true, MaxContextLength: uint32(e.cfg.ContextLength), ServedModelName: model,
		TokenizerPath: model, ModelType: "sim", Architectures: []string{"SimForCausalLM"},
		EosTokenIds: []int32{eosTokenID}, MaxReqInputLen: int32(e.cfg.ContextLength),
	}, nil
}

// GetServerInfo reports the KV connector a PD gateway needs to pick its transfer protocol, and the
// engine id and DP size (model_info.py server_facts).
func (s vllmServicer) GetServerInfo(context.Context, *vllmpb.GetServerInfoRequest) (*vllmpb.GetServerInfoResponse, error) {
	e := s.g.e
	out := &vllmpb.GetServerInfoResponse{
		ActiveRequests: uint32(s.g.active()), UptimeSeconds: timeSince(s.g.started), ServerType: "vllm-grpc",
		DataParallelSize: int32(len(e.ranks)),
	}
	if e.cfg.Role != RoleRegular {
		out.KvConnector = "NixlConnector"
		if e.cfg.mooncake() {
			out.KvConnector = "MooncakeConnector"
		}
		out.KvRole = "kv_producer"
		if e.cfg.Role == RoleDecode {
			out.KvRole = "kv_consumer"
		}
		out.KvEngineId = e.id
	}
	return out, nil
}

// GetLoads reports the engine's load as one entry, as vLLM's servicer does (dp_rank_count 1, the
// request's dp_rank and include ignored); the simulator's entry sums its DP ranks where vLLM's reads
// its first engine core's last scheduler stats.
func (s vllmServicer) GetLoads(context.Context, *vllmpb.GetLoadsRequest) (*vllmpb.GetLoadsResponse, error) {
	snap := s.g.e.totalSnapshot()
	running, waiting := int32(snap.reportedRunning()), int32(snap.reportedWaiting())
	return &vllmpb.GetLoadsResponse{
		Timestamp: grpcTimestamp(), Version: engineVersion, DpRankCount: 1,
		Loads: []*vllmpb.SchedulerLoad{{
			NumRunningReqs: running, NumWaitingReqs: waiting, NumTotalReqs: running + waiting,
			TokenUsage: float64(snap.kvUsed) / float64(max(snap.kvCap, 1)),
		}},
	}, nil
}
