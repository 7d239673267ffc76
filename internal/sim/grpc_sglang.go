package sim

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	smgcommonpb "github.com/sluicegw/sluice/gen/smg/grpc/common"
)

// sglangServicer serves SGLang's sglang.grpc.scheduler.SglangScheduler as `--grpc-mode` does
// (smg-project/smg grpc_servicer/smg_grpc_servicer/sglang/servicer.py): token ids in and out, PD over
// the same bootstrap rendezvous as the HTTP API. RPCs the simulator does not model (LoRA, profiling)
// answer UNIMPLEMENTED; GetTokenizer and SubscribeKvEvents are in grpc_tokenizer.go and grpc_kvevents.go.
type sglangServicer struct {
	sglangpbconnect.UnimplementedSglangSchedulerHandler
	g *grpcEngine
}

var _ sglangpbconnect.SglangSchedulerHandler = sglangServicer{}

// parse converts a GenerateRequest as the servicer's _convert_generate_request and
// _convert_sampling_params do. The proto's zeros are passed on as values (SGLang's servicer does not
// read them as absent): temperature 0 is greedy, and top_p 0 is refused by SGLang's own check.
func (s sglangServicer) parse(req *sglangpb.GenerateRequest) (*grpcCall, error) {
	e := s.g.e
	tok := req.GetTokenized()
	if tok == nil {
		return nil, rpcError(requestError("", "Tokenized input must be provided"))
	}
	p := req.GetSamplingParams()
	if p.GetN() > 1 && e.cfg.Role != RoleRegular {
		return nil, errNUnsupported
	}
	temp, topP := float64(p.GetTemperature()), float64(p.GetTopP())
	gs := grpcSampling{
		sr:        samplingRequest{n: 1, temperature: &temp, topP: &topP},
		ignoreEOS: p.GetIgnoreEos(), stop: p.GetStop(), stopIDs: p.GetStopTokenIds(),
		constraint: sglangConstraint(p),
	}
	if n := len(tok.GetInputIds()); req.GetReturnLogprob() && int(req.GetLogprobStartLen()) >= n && n > 0 {
		// scheduler.py handle_generate_request aborts such a request.
		return nil, rpcError(requestError("", "logprob_start_len=%d is higher than the number of input tokens %d. Please use a smaller logprob_start_len.",
			req.GetLogprobStartLen(), n))
	}
	if p != nil && p.MaxNewTokens != nil {
		m := int(p.GetMaxNewTokens())
		gs.sr.maxTokens = &m
	}
	rid := req.GetRequestId()
	if rid == "" {
		rid = e.newID("grpc-")
	}
	sp, err := e.grpcSample(slices.Clone(tok.GetInputIds()), &gs, rid)
	if err != nil {
		return nil, err
	}
	if e.cfg.Role != RoleRegular {
		dp := req.GetDisaggregatedParams()
		if dp == nil {
			return nil, rpcError(abortError(errMissingRoom, 400, errMissingRoomMsg))
		}
		// An unset port is the engine's own --disaggregation-bootstrap-port, as over HTTP. The room
		// is int32 on this wire; both legs widen it alike, so they meet on the same room and rank.
		port := int(dp.GetBootstrapPort())
		if port == 0 {
			port = e.cfg.BootstrapPort
		}
		sp.hs = handshake{bootstrap: true, host: dp.GetBootstrapHost(), port: port, room: uint64(int64(dp.GetBootstrapRoom()))}
		sp.phase = phaseDecode
		if e.cfg.Role == RolePrefill {
			sp.phase = phasePrefill
		}
	}
	// data_parallel_rank is not read: the servicer does not pass it to the scheduler (the data-parallel
	// controller's default method places the request).
	return &grpcCall{rid: rid, spec: sp}, nil
}

// Generate streams one chunk per output token (its ids, cumulative counts) and then a Complete, or
// only the Complete when the request did not ask to stream. As in the servicer, a stream's Complete is
// built from the same engine output as the last chunk, so it repeats that chunk's ids; a non-streamed
// Complete has every output id.
//
// n > 1: the samples run one after the other, each tagged with its index and ended by its own
// Complete (SGLang's engine runs them at once; a client sorts by index either way).
func (s sglangServicer) Generate(ctx context.Context, req *sglangpb.GenerateRequest, stream *connect.ServerStream[sglangpb.GenerateResponse]) error {
	for i := range max(req.GetSamplingParams().GetN(), 1) {
		aborted, err := s.generateSample(ctx, req, stream, i)
		if err != nil || aborted {
			return err
		}
	}
	return nil
}

// generateSample runs sample index of a Generate and reports whether an Abort ended it.
func (s sglangServicer) generateSample(ctx context.Context, req *sglangpb.GenerateRequest, stream *connect.ServerStream[sglangpb.GenerateResponse], index uint32) (bool, error) {
	rid := req.GetRequestId()
	prompt := uint32(len(req.GetTokenized().GetInputIds()))
	var last, all []uint32
	completion := uint32(0)
	// Logprobs as the servicer sends them: a stream's chunks carry their own tokens' and the first
	// chunk the prompt's (from logprob_start_len >= 0, on an engine that computed the prompt); a
	// Complete not streamed carries them all.
	lp := &lpModel{top: int(req.GetTopLogprobsNum()), byteIDs: s.g.e.cfg.ByteTokenIDs}
	wantLP := req.GetReturnLogprob()
	inLP := wantLP && req.GetLogprobStartLen() >= 0 && s.g.e.cfg.Role != RoleDecode
	res, aborted, err := s.g.generate(ctx, sglangpbconnect.SglangSchedulerGenerateProcedure, stream.Conn().RequestHeader(),
		func() (*grpcCall, error) {
			c, err := s.parse(req)
			if err == nil {
				c.spec.choice = int(index)
			}
			return c, err
		},
		func(ids []uint32, cached int) error {
			completion++
			last = append(last[:0], ids...)
			if !req.GetStream() {
				all = append(all, ids...)
				return nil
			}
			if len(ids) == 0 {
				return nil // a stop string cut the token away: nothing to stream
			}
			ch := &sglangpb.GenerateStreamChunk{TokenIds: ids, PromptTokens: prompt, CompletionTokens: completion, CachedTokens: uint32(cached), Index: index}
			if wantLP {
				ch.OutputLogprobs = lp.sglang(ids)
				if inLP {
					ch.InputLogprobs, inLP = lp.sglangInput(req.GetTokenized().GetInputIds(), int(req.GetLogprobStartLen())), false
				}
			}
			return stream.Send(&sglangpb.GenerateResponse{RequestId: rid, Response: &sglangpb.GenerateResponse_Chunk{Chunk: ch}})
		})
	if err != nil {
		return false, err
	}
	done := &sglangpb.GenerateComplete{
		FinishReason: res.finish, PromptTokens: uint32(res.promptTokens),
		CompletionTokens: uint32(res.completionTokens), CachedTokens: uint32(res.cachedTokens), OutputIds: all, Index: index,
	}
	if req.GetStream() {
		done.OutputIds = last
	} else if wantLP {
		done.OutputLogprobs = lp.sglang(all)
		if inLP {
			done.InputLogprobs = lp.sglangInput(req.GetTokenized().GetInputIds(), int(req.GetLogprobStartLen()))
		}
	}
	switch {
	case aborted:
		done.FinishReason = "abort"
	case res.matchedToken:
		done.MatchedStop = &sglangpb.GenerateComplete_MatchedTokenId{MatchedTokenId: res.matchedID}
	case res.matched != "":
		done.MatchedStop = &sglangpb.GenerateComplete_MatchedStopStr{MatchedStopStr: res.matched}
	case res.finish == "stop":
		done.MatchedStop = &sglangpb.GenerateComplete_MatchedTokenId{MatchedTokenId: eosTokenID}
	}
	return aborted, stream.Send(&sglangpb.GenerateResponse{RequestId: rid, Response: &sglangpb.GenerateResponse_Complete{Complete: done}})
}

// HealthCheck answers healthy unless the FailHealth fault is on. (SGLang's runs a one-token generation
// and waits up to 20 s for the scheduler; the simulator's scheduler always answers.)
func (s sglangServicer) HealthCheck(context.Context, *sglangpb.HealthCheckRequest) (*sglangpb.HealthCheckResponse, error) {
	if s.g.e.healthFailing() {
		return &sglangpb.HealthCheckResponse{Healthy: false, Message: "Health check failed (injected fault)"}, nil
	}
	return &sglangpb.HealthCheckResponse{Healthy: true, Message: "Health check passed"}, nil
}

// Abort ends a running Generate; its stream completes with finish_reason "abort".
func (s sglangServicer) Abort(_ context.Context, req *sglangpb.AbortRequest) (*sglangpb.AbortResponse, error) {
	ok := s.g.abort(req.GetRequestId())
	verb := "not found"
	if ok {
		verb = "aborted"
	}
	return &sglangpb.AbortResponse{Success: ok, Message: fmt.Sprintf("Request %s %s", req.GetRequestId(), verb)}, nil
}

// GetModelInfo reports the served model as /get_model_info does, with the context length and EOS id
// a gateway needs for its text layer.
func (s sglangServicer) GetModelInfo(context.Context, *sglangpb.GetModelInfoRequest) (*sglangpb.GetModelInfoResponse, error) {
	e := s.g.e
	model := e.cfg.Models[0]
	return &sglangpb.GetModelInfoResponse{
		ModelPath: model, TokenizerPath: model, IsGeneration: true, WeightVersion: "default",
		ServedModelName: model, MaxContextLength: int32(e.cfg.ContextLength), ModelType: "sim",
		EosTokenIds:    []int32{eosTokenID},
		MaxReqInputLen: int32(min(int64(e.cfg.ContextLength), e.ranks[0].sched.kvCap) - 1),
		Architectures:  []string{"SimForCausalLM"},
	}, nil
}

// schedulerInfoKeys are the /get_server_info keys that come from the scheduler rather than the server
// args (http_server.py get_server_info merges the two); GetServerInfo keeps them apart.
var schedulerInfoKeys = []string{"max_total_num_tokens", "max_req_input_len", "internal_states"}

// GetServerInfo answers /get_server_info's content split into server args and scheduler info.
func (s sglangServicer) GetServerInfo(context.Context, *sglangpb.GetServerInfoRequest) (*sglangpb.GetServerInfoResponse, error) {
	e := s.g.e
	args := e.serverInfo()
	sched := make(map[string]any, len(schedulerInfoKeys))
	for _, k := range schedulerInfoKeys {
		sched[k] = args[k]
		delete(args, k)
	}
	delete(args, "version")
	argsPB, err := structpb.NewStruct(args)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	schedPB, err := structpb.NewStruct(sched)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return &sglangpb.GetServerInfoResponse{
		ServerArgs: argsPB, SchedulerInfo: schedPB, ActiveRequests: int32(s.g.active()),
		UptimeSeconds: timeSince(s.g.started), SglangVersion: engineVersion, ServerType: "grpc",
		StartTime: timestamppb.New(s.g.started), MaxTotalNumTokens: int32(e.ranks[0].sched.kvCap),
	}, nil
}

// GetLoads reports each DP rank's load as /v1/loads does (dp_rank selects one; an unknown rank gives
// none), with the disaggregation section: a prefill's bootstrap queue (requests waiting for their
// decode), a decode's pre-allocation and transfer queues. include filters the optional sections
// ("disagg", "queues"; "all" or nothing: every section the simulator has).
func (s sglangServicer) GetLoads(_ context.Context, req *sglangpb.GetLoadsRequest) (*sglangpb.GetLoadsResponse, error) {
	e := s.g.e
	want := func(section string) bool {
		inc := req.GetInclude()
		return len(inc) == 0 || slices.Contains(inc, "all") || slices.Contains(inc, section)
	}
	out := &sglangpb.GetLoadsResponse{Timestamp: grpcTimestamp(), Version: engineVersion, DpRankCount: int32(len(e.ranks))}
	agg := &sglangpb.AggregateMetrics{}
	for _, rk := range e.ranks {
		if req.DpRank != nil && int(req.GetDpRank()) != rk.index {
			continue
		}
		snap := rk.sched.snapshot()
		usage := float64(snap.kvUsed) / float64(max(snap.kvCap, 1))
		hitRate := 0.0
		if p := rk.promptTokens.Load(); p > 0 {
			hitRate = float64(rk.cachedTokens.Load()) / float64(p)
		}
		running, waiting := int32(snap.reportedRunning()), int32(snap.reportedWaiting())
		load := &sglangpb.SchedulerLoad{
			DpRank: int32(rk.index), NumRunningReqs: running, NumWaitingReqs: waiting, NumTotalReqs: running + waiting,
			NumUsedTokens: int32(snap.kvUsed), MaxTotalNumTokens: int32(snap.kvCap), TokenUsage: usage,
			CacheHitRate: hitRate, Utilization: usage, MaxRunningRequests: int32(rk.sched.maxRunning),
		}
		if want("disagg") {
			d := &sglangpb.DisaggregationMetrics{Mode: e.disaggregationMode()}
			switch e.cfg.Role {
			case RolePrefill:
				d.PrefillPreallocQueueReqs = int32(rk.bootstrapping.Load())
			case RoleDecode:
				d.DecodePreallocQueueReqs = int32(snap.preWaiting)
				d.DecodeTransferQueueReqs = int32(rk.transferring.Load())
			}
			load.Disaggregation = d
		}
		if want("queues") {
			// The waiting queue alone (len(waiting_queue)); num_waiting_reqs adds the PD queues.
			load.Queues = &sglangpb.QueueMetrics{Waiting: int32(snap.waiting + snap.prefillWaiting)}
		}
		out.Loads = append(out.Loads, load)
		agg.TotalRunningReqs += running
		agg.TotalWaitingReqs += waiting
		agg.AvgTokenUsage += usage
		agg.AvgUtilization += usage
	}
	if n := float64(len(out.Loads)); n > 0 {
		agg.TotalReqs = agg.TotalRunningReqs + agg.TotalWaitingReqs
		agg.AvgTokenUsage /= n
		agg.AvgUtilization /= n
	}
	out.Aggregate = agg
	return out, nil
}

// FlushCache empties every rank's prefix cache, as /flush_cache does.
func (s sglangServicer) FlushCache(context.Context, *smgcommonpb.FlushCacheRequest) (*smgcommonpb.FlushCacheResponse, error) {
	for _, r := range s.g.e.ranks {
		r.cache.flush()
	}
	return &smgcommonpb.FlushCacheResponse{Success: true, Message: "Cache flushed."}, nil
}
