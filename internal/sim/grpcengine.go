package sim

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	"github.com/sluicegw/sluice/gen/trtllm/trtllmpbconnect"
	"github.com/sluicegw/sluice/gen/vllm/grpc/engine/vllmpbconnect"
)

// The engines' own gRPC protocols (SGLang's sglang.grpc.scheduler.SglangScheduler, vLLM's
// vllm.grpc.engine.VllmEngine, as smg-project/smg grpc_servicer/smg_grpc_servicer/ serves them, and
// TensorRT-LLM's trtllm.TrtllmService, as tensorrt_llm/grpc/smg/ serves it): what the servicers share.
// Each protocol's flow is in its own file (grpc_sglang.go, grpc_vllm.go, grpc_trtllm.go).

// eosTokenID is the simulated model's end-of-sequence token id: GetModelInfo's eos_token_ids, and the
// token an SGLang generation that ends "naturally" reports as matched (as /generate does).
const eosTokenID = 2

// mountEngineGRPC serves the engine protocol of Config.Protocol on mux. The other engines' services
// answer UNIMPLEMENTED, as a real engine's gRPC server does for a service it lacks: that is how a
// gateway tells the protocols apart (internal/enginegrpc Detect).
func (e *Engine) mountEngineGRPC(mux *http.ServeMux) {
	g := &grpcEngine{e: e, started: time.Now(), running: make(map[string]*grpcRequest)}
	var paths []func() (string, http.Handler)
	switch e.cfg.Protocol {
	case ProtocolTRTLLM:
		paths = append(paths,
			func() (string, http.Handler) { return trtllmpbconnect.NewTrtllmServiceHandler(trtllmServicer{g: g}) },
			func() (string, http.Handler) {
				return sglangpbconnect.NewSglangSchedulerHandler(sglangpbconnect.UnimplementedSglangSchedulerHandler{})
			},
			func() (string, http.Handler) {
				return vllmpbconnect.NewVllmEngineHandler(vllmpbconnect.UnimplementedVllmEngineHandler{})
			})
	case ProtocolVLLM:
		paths = append(paths,
			func() (string, http.Handler) { return vllmpbconnect.NewVllmEngineHandler(vllmServicer{g: g}) },
			func() (string, http.Handler) {
				return sglangpbconnect.NewSglangSchedulerHandler(sglangpbconnect.UnimplementedSglangSchedulerHandler{})
			})
	default:
		paths = append(paths,
			func() (string, http.Handler) { return sglangpbconnect.NewSglangSchedulerHandler(sglangServicer{g: g}) },
			func() (string, http.Handler) {
				return vllmpbconnect.NewVllmEngineHandler(vllmpbconnect.UnimplementedVllmEngineHandler{})
			})
	}
	if e.cfg.Protocol != ProtocolTRTLLM {
		paths = append(paths, func() (string, http.Handler) {
			return trtllmpbconnect.NewTrtllmServiceHandler(trtllmpbconnect.UnimplementedTrtllmServiceHandler{})
		})
	}
	if e.cfg.EngineGRPCOnly {
		// Every engine's gRPC server also serves the standard health service (without sluice.worker.v1
		// the gateway's probe has nothing else to ask); the FailHealth fault makes it NOT_SERVING.
		paths = append(paths, func() (string, http.Handler) { return grpchealth.NewHandler(healthChecker{e}) })
	}
	for _, p := range paths {
		path, h := p()
		mux.Handle(path, h)
	}
}

// healthChecker answers grpc.health.v1 for the whole server.
type healthChecker struct{ e *Engine }

func (h healthChecker) Check(context.Context, *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if h.e.healthFailing() {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// grpcEngine is the state both servicers share: the running Generate calls by request id, for Abort.
type grpcEngine struct {
	e         *Engine
	started   time.Time
	tokenizer tokenizerBundle // GetTokenizer's zip (grpc_tokenizer.go)

	mu      sync.Mutex
	running map[string]*grpcRequest
}

type grpcRequest struct{ cancel context.CancelCauseFunc }

// errAbortRPC is the cause of a generation's end by an Abort RPC.
var errAbortRPC = errors.New("aborted by an Abort request")

// track registers a Generate call under its request id until done is called. A later call with the
// same id replaces it for Abort (the engines key requests by id; a duplicate is the caller's bug).
func (g *grpcEngine) track(ctx context.Context, rid string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	r := &grpcRequest{cancel: cancel}
	g.mu.Lock()
	if rid != "" {
		g.running[rid] = r
		g.e.stats.grpcAbortable.Add(1)
	}
	g.mu.Unlock()
	return ctx, func() {
		g.mu.Lock()
		if g.running[rid] == r {
			delete(g.running, rid)
		}
		if rid != "" {
			g.e.stats.grpcAbortable.Add(-1)
		}
		g.mu.Unlock()
		cancel(nil)
	}
}

// abort ends the running Generate calls with these ids and reports whether any was running.
func (g *grpcEngine) abort(rids ...string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	found := false
	for _, rid := range rids {
		if r, ok := g.running[rid]; ok {
			r.cancel(errAbortRPC)
			g.e.stats.grpcAborts.Add(1)
			found = true
		}
	}
	return found
}

// active counts the running Generate calls (GetServerInfo's active_requests).
func (g *grpcEngine) active() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.running)
}

// grpcCall is one Generate call's sample, as its protocol's servicer parsed it.
type grpcCall struct {
	rid  string
	spec sampleSpec
	hint rankHint
}

// generate runs a Generate call's one sample through the model with the engine's faults: the faults
// first (as for every request), then parse (a refusal is the call's error), then rank, room,
// admission, prefill and decode. onToken gets each output token's ids (none when a stop string cut the
// token away) and the prompt's cached tokens. An Abort of the call's request id ends it with aborted
// set and the counts so far; a client that goes away cancels it: the engine's request ends with the
// call, as both servicers abort the engine request when the RPC is cancelled.
func (g *grpcEngine) generate(ctx context.Context, procedure string, header http.Header, parse func() (*grpcCall, error),
	onToken func(ids []uint32, cached int) error,
) (res sampleResult, aborted bool, err error) {
	e := g.e
	e.stats.inFlight.Add(1)
	defer e.stats.inFlight.Add(-1)
	rf, err := rpcServer{e: e}.begin(ctx, procedure, header)
	if err != nil {
		return res, false, err
	}
	c, err := parse()
	if err != nil {
		e.countFailure()
		return res, false, err
	}
	ctx, done := g.track(ctx, c.rid)
	defer done()
	samples := []sampleSpec{c.spec}
	e.assignRanks(samples, c.hint)
	release := e.claimRooms(samples)
	defer release()
	sp := &samples[0]
	sent := 0
	var ids []uint32
	emit, leave := e.trackPrefill(samples, func(_ int, delta string) error {
		sent++
		if e.cfg.ByteTokenIDs {
			ids = ids[:0]
			for i := range len(delta) {
				ids = append(ids, uint32(delta[i]))
			}
		} else {
			ids = appendTokens(ids[:0], delta)
		}
		if err := onToken(ids, sp.cached); err != nil {
			return err
		}
		if rf.dieAfter > 0 && sent >= rf.dieAfter {
			return errDie
		}
		return nil
	})
	defer leave()
	res, err = e.runSample(ctx, &rf, sp, emit)
	switch {
	case err == nil:
		e.stats.completed.Add(1)
		return res, false, nil
	case errors.Is(context.Cause(ctx), errAbortRPC):
		e.countFailure()
		return res, true, nil
	case errors.Is(err, errDie):
		e.countFailure()
		panic(http.ErrAbortHandler) // reset the stream mid-way, like a crashing engine
	}
	e.countFailure()
	return res, false, rpcError(err)
}

// grpcSampling is what both protocols' sampling parameters come to, before the engine's checks.
type grpcSampling struct {
	sr        samplingRequest
	ignoreEOS bool
	stop      []string
	stopIDs   []uint32
	seed      *int64
	// constraint is the structured-output constraint, nil without one.
	constraint *Constraint
}

// grpcSample validates a token-id prompt with its sampling parameters as the engine does over HTTP and
// builds its sample. A refusal is the engine's own message as INVALID_ARGUMENT.
func (e *Engine) grpcSample(ids []uint32, s *grpcSampling, rid string) (sampleSpec, error) {
	if len(ids) == 0 {
		return sampleSpec{}, connect.NewError(connect.CodeInvalidArgument, errors.New("the prompt has no input ids"))
	}
	if err := e.validate([]int{len(ids)}, &s.sr); err != nil {
		return sampleSpec{}, rpcError(err)
	}
	if err := e.checkConstraint(s.constraint); err != nil {
		return sampleSpec{}, err
	}
	sp := sampleSpec{
		prompt: newPrompt(ids), rid: rid, stop: s.stop, stopIDs: s.stopIDs,
		// Without a length cap a generation ends "naturally" (its EOS), never past the context.
		maxTokens: min(e.cfg.DefaultMaxTokens, e.cfg.ContextLength-len(ids)), naturalStop: !s.ignoreEOS,
		greedy:     s.sr.temperature != nil && *s.sr.temperature == 0,
		jsonObject: s.constraint.jsonConstrained(),
	}
	if s.sr.maxTokens != nil {
		sp.maxTokens, sp.naturalStop = *s.sr.maxTokens, false
	}
	if s.seed != nil {
		sp.reqSeed, sp.seeded = *s.seed, true
	}
	return sp, nil
}

// errNUnsupported refuses n > 1 on a PD leg, which the simulator does not serve over the engines' gRPC
// protocols (SGLang PD gateways send n single-sample requests; vLLM's NIXL handoff is single-consumer).
var errNUnsupported = connect.NewError(connect.CodeUnimplemented, errors.New("the simulator serves n = 1 per gRPC Generate request of a PD leg"))

// grpcTimestamp is the ISO 8601 time of a GetLoads answer.
func grpcTimestamp() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// timeSince is the seconds since t (the servers' uptime_seconds).
func timeSince(t time.Time) float64 { return time.Since(t).Seconds() }
