package sim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"connectrpc.com/connect"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/gen/sluice/worker/v1/workerv1connect"
)

// rpcServer serves sluice.worker.v1 with the same model and handshakes as the HTTP API.
type rpcServer struct{ e *Engine }

var (
	_ workerv1connect.PrefillServiceHandler = rpcServer{}
	_ workerv1connect.DecodeServiceHandler  = rpcServer{}
	_ workerv1connect.LoadServiceHandler    = rpcServer{}
)

func (e *Engine) mountRPC(mux *http.ServeMux) {
	s := rpcServer{e: e}
	for _, reg := range []func() (string, http.Handler){
		func() (string, http.Handler) { return workerv1connect.NewPrefillServiceHandler(s) },
		func() (string, http.Handler) { return workerv1connect.NewDecodeServiceHandler(s) },
		func() (string, http.Handler) { return workerv1connect.NewLoadServiceHandler(s) },
	} {
		path, h := reg()
		mux.Handle(path, h)
	}
}

// rpcCode maps an injected HTTP status to the Connect code a gateway would see from a real server.
func rpcCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest:
		return connect.CodeInvalidArgument
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return connect.CodeUnavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return connect.CodeDeadlineExceeded
	case http.StatusInternalServerError:
		return connect.CodeInternal
	default:
		return connect.CodeUnknown
	}
}

func rpcError(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(rpcCode(errorStatus(err)), err)
}

// begin counts an RPC generation and applies the request faults.
func (s rpcServer) begin(ctx context.Context, procedure string, h http.Header) (requestFaults, error) {
	e := s.e
	e.stats.seen.Add(1)
	e.notePath(procedure, h.Get("Traceparent"))
	e.metrics.requests.WithLabelValues(procedure).Inc()
	rf := e.faults.Load().forRequest(e.cfg.Role, procedure, true, e.randFloat)
	if err := e.applyRequestFaults(ctx, &rf); err != nil {
		e.countFailure()
		if rf.errorStatus != 0 {
			return rf, connect.NewError(rpcCode(rf.errorStatus), fmt.Errorf("injected fault: status %d", rf.errorStatus))
		}
		return rf, rpcError(err)
	}
	return rf, nil
}

func (s rpcServer) sample(model string, p *workerv1.Prompt, sp *workerv1.SamplingParams) (*sampleSpec, error) {
	if model != "" && !slices.Contains(s.e.cfg.Models, model) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%w: the model `%s` does not exist", errModelNotFound, model))
	}
	var ids []uint32
	switch in := p.GetInput().(type) {
	case *workerv1.Prompt_Text:
		ids = appendTokens(nil, in.Text)
	case *workerv1.Prompt_TokenIds:
		ids = slices.Clone(in.TokenIds.GetIds())
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("prompt is required"))
	}
	sr := samplingRequest{n: 1}
	if sp.GetMaxTokens() > 0 {
		m := int(sp.GetMaxTokens())
		sr.maxTokens = &m
	}
	if sp != nil && sp.Temperature != nil {
		t := sp.GetTemperature()
		sr.temperature = &t
	}
	if err := s.e.validate([]int{len(ids)}, &sr); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	spec := &sampleSpec{prompt: newPrompt(ids), naturalStop: !sp.GetIgnoreEos(), rid: s.e.newID("rpc-"),
		maxTokens: min(s.e.cfg.DefaultMaxTokens, s.e.cfg.ContextLength-len(ids))}
	if sr.maxTokens != nil {
		spec.maxTokens, spec.naturalStop = *sr.maxTokens, false
	}
	spec.stop = sp.GetStop()
	spec.reqSeed, spec.seeded = sp.GetSeed(), sp != nil && sp.Seed != nil
	spec.greedy = sp != nil && sp.Temperature != nil && sp.GetTemperature() == 0
	return spec, nil
}

func kvFromProto(p *workerv1.KVTransferParams) *kvParams {
	kv := &kvParams{DoRemoteDecode: p.GetDoRemoteDecode(), DoRemotePrefill: p.GetDoRemotePrefill(), RemoteBlockIDs: p.GetRemoteBlockIds()}
	if id := p.GetRemoteEngineId(); id != "" {
		kv.RemoteEngineID = &id
	}
	if h := p.GetRemoteHost(); h != "" {
		kv.RemoteHost = &h
	}
	if port := int(p.GetRemotePort()); port != 0 {
		kv.RemotePort = &port
	}
	return kv
}

func kvToProto(kv *kvParams) *workerv1.KVTransferParams {
	if kv == nil {
		return nil
	}
	p := &workerv1.KVTransferParams{
		DoRemoteDecode: kv.DoRemoteDecode, DoRemotePrefill: kv.DoRemotePrefill, RemoteBlockIds: kv.RemoteBlockIDs,
	}
	if kv.RemoteEngineID != nil {
		p.RemoteEngineId = *kv.RemoteEngineID
	}
	if kv.RemoteHost != nil {
		p.RemoteHost = *kv.RemoteHost
	}
	if kv.RemotePort != nil {
		p.RemotePort = uint32(*kv.RemotePort)
	}
	return p
}

// Prefill computes the prompt and hands its KV to the bootstrap room or keeps it for a pull.
func (s rpcServer) Prefill(ctx context.Context, req *workerv1.PrefillRequest) (*workerv1.PrefillResponse, error) {
	e := s.e
	e.stats.inFlight.Add(1)
	defer e.stats.inFlight.Add(-1)
	rf, err := s.begin(ctx, workerv1connect.PrefillServicePrefillProcedure, connectHeader(ctx))
	if err != nil {
		return nil, err
	}
	sp, err := s.sample(req.GetModel(), req.GetPrompt(), req.GetSampling())
	if err != nil {
		e.countFailure()
		return nil, err
	}
	// The worker protocol's prefill computes the prompt and one token, whatever the engine style.
	sp.phase, sp.maxTokens, sp.naturalStop = phasePrefill, 1, false
	switch hs := req.GetHandshake().(type) {
	case *workerv1.PrefillRequest_Bootstrap:
		sp.hs = handshake{bootstrap: true, host: hs.Bootstrap.GetHost(), port: int(hs.Bootstrap.GetPort()), room: hs.Bootstrap.GetRoom()}
	case *workerv1.PrefillRequest_KvTransfer:
		sp.hs.kv = kvFromProto(hs.KvTransfer)
		sp.hs.kv.DoRemoteDecode = true
	}
	samples := []sampleSpec{*sp}
	e.assignRanks(samples, rankHint{}) // sluice.worker.v1 carries no rank: the engine's own choice
	release := e.claimRooms(samples)
	defer release()
	emit, leave := e.trackPrefill(samples, func(int, string) error { return nil })
	defer leave()
	res, err := e.runSample(ctx, &rf, &samples[0], emit)
	if err != nil {
		e.countFailure()
		return nil, rpcError(err)
	}
	e.stats.completed.Add(1)
	out := &workerv1.PrefillResponse{
		PromptTokens: uint32(res.promptTokens), CachedTokens: uint32(res.cachedTokens), KvTransfer: kvToProto(res.kvOut),
	}
	if req.GetReturnInputLogprobs() {
		out.InputLogprobs = make([]float64, res.promptTokens)
	}
	return out, nil
}

// Decode receives the KV (or recomputes the prompt) and streams one message per token.
func (s rpcServer) Decode(ctx context.Context, req *workerv1.DecodeRequest, stream *connect.ServerStream[workerv1.DecodeResponse]) error {
	e := s.e
	e.stats.inFlight.Add(1)
	defer e.stats.inFlight.Add(-1)
	rf, err := s.begin(ctx, workerv1connect.DecodeServiceDecodeProcedure, connectHeader(ctx))
	if err != nil {
		return err
	}
	sp, err := s.sample(req.GetModel(), req.GetPrompt(), req.GetSampling())
	if err != nil {
		e.countFailure()
		return err
	}
	sp.phase = phaseDecode
	switch hs := req.GetHandshake().(type) {
	case *workerv1.DecodeRequest_Bootstrap:
		port := int(hs.Bootstrap.GetPort())
		if port == 0 {
			port = e.cfg.BootstrapPort // as an SGLang decode does with a null bootstrap_port
		}
		sp.hs = handshake{bootstrap: true, host: hs.Bootstrap.GetHost(), port: port, room: hs.Bootstrap.GetRoom()}
	case *workerv1.DecodeRequest_KvTransfer:
		sp.hs.kv = kvFromProto(hs.KvTransfer)
		sp.hs.kv.DoRemotePrefill = true
	}
	samples := []sampleSpec{*sp}
	e.assignRanks(samples, rankHint{}) // sluice.worker.v1 carries no rank: the engine's own choice
	release := e.claimRooms(samples)
	defer release()
	sent := 0
	msg := &workerv1.DecodeResponse{}
	emit, leave := e.trackPrefill(samples, func(_ int, delta string) error {
		sent++
		msg.Text = delta
		msg.TokenIds = append(msg.TokenIds[:0], appendTokens(nil, delta)...)
		msg.CompletionTokens = uint32(sent)
		if err := stream.Send(msg); err != nil {
			return err
		}
		if rf.dieAfter > 0 && sent >= rf.dieAfter {
			return errDie
		}
		return nil
	})
	defer leave()
	res, err := e.runSample(ctx, &rf, &samples[0], emit)
	if err != nil {
		e.countFailure()
		if errors.Is(err, errDie) {
			panic(http.ErrAbortHandler) // reset the stream mid-way, like a crashing engine
		}
		return rpcError(err)
	}
	e.stats.completed.Add(1)
	return stream.Send(&workerv1.DecodeResponse{
		FinishReason: res.finish, PromptTokens: uint32(res.promptTokens),
		CompletionTokens: uint32(res.completionTokens), CachedTokens: uint32(res.cachedTokens),
	})
}

// GetLoad reports running and waiting requests and KV usage, summed over the DP ranks.
func (s rpcServer) GetLoad(context.Context, *workerv1.GetLoadRequest) (*workerv1.GetLoadResponse, error) {
	snap := s.e.totalSnapshot()
	return &workerv1.GetLoadResponse{
		RunningRequests:  uint32(snap.reportedRunning()),
		WaitingRequests:  uint32(snap.reportedWaiting()),
		KvUsage:          float64(snap.kvUsed) / float64(max(snap.kvCap, 1)),
		KvUsedTokens:     uint64(snap.kvUsed),
		KvCapacityTokens: uint64(snap.kvCap),
	}, nil
}

// connectHeader returns the request headers of a simple-style Connect handler call.
func connectHeader(ctx context.Context) http.Header {
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return ci.RequestHeader()
	}
	return http.Header{}
}
