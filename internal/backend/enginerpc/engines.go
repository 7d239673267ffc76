package enginerpc

import (
	"context"
	"math"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
	"github.com/sluicegw/sluice/gen/vllm/grpc/engine/vllmpbconnect"
)

// The two protocols behind one shape: a Generate stream of events, and Abort.

// event is one GenerateResponse of either protocol.
type event struct {
	ids                        []uint32
	index                      uint32    // the sample (n > 1)
	outLP, inLP                []tokenLP // the engine's logprobs of ids, and of the prompt
	complete                   bool
	finish                     string
	prompt, completion, cached uint32
	matchedID                  *uint32
	matchedStr                 *string
	kvTransfer                 *string // vLLM's kv_transfer_params_json on the Complete
}

// aborted says the event ends its sample with the engine's abort, not a result.
func (ev *event) aborted() bool { return ev.complete && ev.finish == "abort" }

// genStream is a Generate call's answer. The event's ids are valid until the next Receive: a stream
// decodes every message's ids into the same array (a token or a few a message, so a new slice each
// was most of reading one).
type genStream interface {
	Receive() bool
	Err() error
	Close() error
	event() event
}

type engineClient interface {
	generate(ctx context.Context, c *call) (genStream, error)
	abort(ctx context.Context, requestID string) error
	// embed runs Embed on one input: its vector and prompt tokens.
	embed(ctx context.Context, requestID string, ids []uint32) ([]float32, uint32, error)
	// cumulativeCounts says the stream chunks' counts are totals so far (SGLang) rather than the
	// chunk's own (vLLM).
	cumulativeCounts() bool
	// closeIdle closes the client's idle connections of its own (shut: the engine is gone).
	closeIdle(shut bool)
}

// SGLang's scheduler.

type sglangClient struct {
	c   sglangpbconnect.SglangSchedulerClient
	gen genCaller // Generate, called and decoded by hand (genclient.go, wire.go)
}

func (sglangClient) cumulativeCounts() bool { return true }

func (s sglangClient) closeIdle(shut bool) { s.gen.closeIdle(shut) }

func (s sglangClient) abort(ctx context.Context, rid string) error {
	_, err := s.c.Abort(ctx, &sglangpb.AbortRequest{RequestId: rid, Reason: "client disconnected"})
	return err
}

// sglangSampling maps a call's sampling fields. SGLang's servicer passes every field on as it is, so
// an absent one must be sent as SGLang's own default, not proto3's zero (temperature 0 is greedy, top_p
// 0 is refused): the defaults of SGLang's SamplingParams, as the Rust gateway's client sends them
// (smg crates/grpc_client/src/sglang_scheduler.rs). skip_special_tokens only steers the engine's own
// detokenizer, which nobody reads: the gateway decodes.
func sglangSampling(c *call) *sglangpb.SamplingParams {
	p := &sglangpb.SamplingParams{
		Temperature: deref(c.temperature, 1), TopP: deref(c.topP, 1), TopK: deref(c.topK, -1),
		MinP: deref(c.minP, 0), FrequencyPenalty: deref(c.freqPen, 0), PresencePenalty: deref(c.presPen, 0),
		RepetitionPenalty: deref(c.repPen, 1), Stop: c.stops, StopTokenIds: c.stopIDs,
		SkipSpecialTokens: true, SpacesBetweenSpecialTokens: true, N: uint32(c.n), MinNewTokens: c.minTokens,
		IgnoreEos: c.ignoreEOS, NoStopTrim: c.includeStop,
	}
	if c.maxTokens != nil {
		m := uint32(*c.maxTokens)
		p.MaxNewTokens = &m
	}
	if k := c.constraint; k != nil {
		switch k.kind {
		case "regex":
			p.Constraint = &sglangpb.SamplingParams_Regex{Regex: k.value}
		case "ebnf":
			p.Constraint = &sglangpb.SamplingParams_EbnfGrammar{EbnfGrammar: k.value}
		default: // json_schema, and json_object as the schema of any object (SGLang has no json_object)
			p.Constraint = &sglangpb.SamplingParams_JsonSchema{JsonSchema: k.value}
		}
	}
	return p
}

func (s sglangClient) generate(ctx context.Context, c *call) (genStream, error) {
	return s.gen.call(ctx, sglangRequest(c))
}

// sglangRequest is a call's GenerateRequest for SGLang's scheduler.
func sglangRequest(c *call) *sglangpb.GenerateRequest {
	req := &sglangpb.GenerateRequest{
		RequestId:       c.requestID,
		Tokenized:       &sglangpb.TokenizedInput{OriginalText: c.text, InputIds: c.ids},
		SamplingParams:  sglangSampling(c),
		Stream:          c.stream,
		ReturnLogprob:   c.lp.output,
		TopLogprobsNum:  c.lp.top,
		LogprobStartLen: c.lp.start,
	}
	if b := c.bootstrap; b != nil {
		req.DisaggregatedParams = &sglangpb.DisaggregatedParams{BootstrapHost: b.host, BootstrapPort: b.port, BootstrapRoom: b.room}
	}
	if c.dpRank != nil {
		req.DataParallelRank = *c.dpRank
	}
	return req
}

// vLLM's engine.

type vllmClient struct {
	c   vllmpbconnect.VllmEngineClient
	gen genCaller // Generate, called and decoded by hand (genclient.go, wire.go)
}

func (vllmClient) cumulativeCounts() bool { return false }

func (v vllmClient) closeIdle(shut bool) { v.gen.closeIdle(shut) }

func (v vllmClient) abort(ctx context.Context, rid string) error {
	_, err := v.c.Abort(ctx, &vllmpb.AbortRequest{RequestIds: []string{rid}})
	return err
}

// vllmSampling maps a call's sampling fields. vLLM's servicer reads an unset temperature as the
// engine's default and a zero top_p as 1.0; top_k 0 is "disabled", so OpenAI's -1 becomes 0; the seed
// is int32 on this wire and is clamped, as the Rust gateway's client does
// (smg crates/grpc_client/src/vllm_engine.rs).
func vllmSampling(c *call) *vllmpb.SamplingParams {
	p := &vllmpb.SamplingParams{
		Temperature: c.temperature, TopP: deref(c.topP, 1), MinP: deref(c.minP, 0),
		FrequencyPenalty: deref(c.freqPen, 0), PresencePenalty: deref(c.presPen, 0),
		RepetitionPenalty: deref(c.repPen, 1), MinTokens: c.minTokens, Stop: c.stops, StopTokenIds: c.stopIDs,
		SkipSpecialTokens: true, SpacesBetweenSpecialTokens: true, IgnoreEos: c.ignoreEOS, N: uint32(c.n),
		IncludeStopStrInOutput: c.includeStop,
	}
	if c.lp.output {
		k := c.lp.top
		p.Logprobs = &k
		if c.lp.prompt {
			p.PromptLogprobs = &k
		}
	}
	if c.topK != nil && *c.topK > 0 {
		p.TopK = uint32(*c.topK)
	}
	if c.maxTokens != nil {
		m := uint32(*c.maxTokens)
		p.MaxTokens = &m
	}
	if c.seed != nil {
		s := int32(min(max(*c.seed, math.MinInt32), math.MaxInt32))
		p.Seed = &s
	}
	if k := c.constraint; k != nil {
		switch k.kind {
		case "regex":
			p.Constraint = &vllmpb.SamplingParams_Regex{Regex: k.value}
		case "ebnf":
			p.Constraint = &vllmpb.SamplingParams_Grammar{Grammar: k.value}
		case "json_object":
			p.Constraint = &vllmpb.SamplingParams_JsonObject{JsonObject: true}
		default:
			p.Constraint = &vllmpb.SamplingParams_JsonSchema{JsonSchema: k.value}
		}
	}
	return p
}

func (v vllmClient) generate(ctx context.Context, c *call) (genStream, error) {
	return v.gen.call(ctx, vllmRequest(c))
}

// vllmRequest is a call's GenerateRequest for vLLM's engine.
func vllmRequest(c *call) *vllmpb.GenerateRequest {
	return &vllmpb.GenerateRequest{
		RequestId:            c.requestID,
		Input:                &vllmpb.GenerateRequest_Tokenized{Tokenized: &vllmpb.TokenizedInput{OriginalText: c.text, InputIds: c.ids}},
		SamplingParams:       vllmSampling(c),
		Stream:               c.stream,
		KvTransferParamsJson: c.kvTransfer,
		DataParallelRank:     c.dpRank,
	}
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func sglangInputLPs(in *sglangpb.InputLogProbs) []tokenLP {
	vals := make([]*float32, len(in.GetTokenLogprobs()))
	for i, v := range in.GetTokenLogprobs() {
		vals[i] = v.Value
	}
	return inputLPs(vals, in.GetTokenIds(), in.GetTopLogprobs())
}

func vllmInputLPs(in *vllmpb.InputLogProbs) []tokenLP {
	vals := make([]*float32, len(in.GetTokenLogprobs()))
	for i, v := range in.GetTokenLogprobs() {
		vals[i] = v.Value
	}
	return inputLPs(vals, in.GetTokenIds(), in.GetTopLogprobs())
}
