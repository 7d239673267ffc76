package enginerpc

import (
	"cmp"
	"context"
	"slices"

	"connectrpc.com/connect"

	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	"github.com/sluicegw/sluice/gen/trtllm/trtllmpbconnect"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// TensorRT-LLM's service (trtllm.TrtllmService, `trtllm-serve --grpc --grpc-protocol smg`): what
// differs from the other two protocols. Its servicer is NVIDIA/TensorRT-LLM
// tensorrt_llm/grpc/smg/servicer.py and request_manager.py; the Rust gateway's client is smg
// crates/grpc_client/src/trtllm_service.rs.
//
// The stream's chunks carry the new ids and the cumulative completion count (as SGLang's); the
// Complete carries every output id even when streaming ("cumulative, not a delta"), which the sample
// skips as it skips the other protocols' repeated ids. The engine leaves its end id out of the output
// and reports no matched stop for it. Prefill/decode is not served: see docs/engines.md.
//
// n > 1 is one Generate with num_return_sequences n and one beam, as the Rust client sends it: the
// servicer tags every chunk and Complete with its sequence_index and sends one Complete per sequence
// once all have finished. Logprobs are OutputConfig's logprobs (the alternatives wanted) and
// prompt_logprobs; each chunk carries its new tokens' TokenLogprobs, each Complete all of its
// sequence's and, only there, the prompt's.

type trtllmClient struct {
	c trtllmpbconnect.TrtllmServiceClient
	// contextLength is the model's max_seq_len (Engine.ContextLength; 0 unknown): it caps the
	// default max_tokens.
	contextLength int
}

func (trtllmClient) cumulativeCounts() bool { return true }

// closeIdle: TensorRT-LLM's calls are connect's, on the transport's HTTP client.
func (trtllmClient) closeIdle(bool) {}

func (t trtllmClient) abort(ctx context.Context, rid string) error {
	_, err := t.c.Abort(ctx, &trtllmpb.AbortRequest{RequestId: rid})
	return err
}

// The Rust gateway's max_tokens when the client gives none (trtllm_service.rs: 2048 for chat and
// /generate, OpenAI's 16 for completions): the field is required, and 0 is no default.
const (
	trtllmDefaultMaxTokens           = 2048
	trtllmDefaultCompletionMaxTokens = 16
)

// trtllmMaxTokens is the request's max_tokens, or the default capped by what the model's sequence
// length leaves after the prompt (contextLength 0: unknown).
func trtllmMaxTokens(c *call, contextLength int) uint32 {
	if c.maxTokens != nil {
		return uint32(*c.maxTokens)
	}
	m := trtllmDefaultMaxTokens
	if c.route == body.RouteCompletions {
		m = trtllmDefaultCompletionMaxTokens
	}
	if contextLength > 0 {
		m = max(min(m, contextLength-len(c.ids)), 1)
	}
	return uint32(m)
}

// trtllmSampling maps a call's sampling fields to SamplingConfig, whose optional fields the servicer
// reads as "unset: TensorRT-LLM's default" (create_sampling_params_from_proto): temperature, top_p
// and repetition_penalty are sent as the Rust gateway's client sends them (1.0 when absent), the rest
// only when the client gave them. OpenAI's top_k -1 (off) is TensorRT-LLM's 0 (all logits); the seed
// is the client's bits, as the Rust client casts it. One beam, n sequences.
func trtllmSampling(c *call) *trtllmpb.SamplingConfig {
	p := &trtllmpb.SamplingConfig{
		BeamWidth: 1, NumReturnSequences: uint32(max(c.n, 1)),
		Temperature: ptr(deref(c.temperature, 1)), TopP: ptr(deref(c.topP, 1)), RepetitionPenalty: ptr(deref(c.repPen, 1)),
		MinP: c.minP, PresencePenalty: c.presPen, FrequencyPenalty: c.freqPen,
	}
	if c.topK != nil {
		p.TopK = ptr(max(*c.topK, 0))
	}
	if c.seed != nil {
		p.Seed = ptr(uint64(*c.seed)) //nolint:gosec // the seed's bits, as the Rust client's `as u64`
	}
	if c.minTokens > 0 {
		p.MinTokens = ptr(c.minTokens)
	}
	return p
}

// trtllmGuide maps a structured-output constraint as the Rust client does: a JSON object is the
// schema of any object (the servicer ignores a guide whose text is empty, so GUIDE_TYPE_JSON, which
// carries none, is not used).
func trtllmGuide(k *constraint) *trtllmpb.GuidedDecodingParams {
	if k == nil {
		return nil
	}
	g := &trtllmpb.GuidedDecodingParams{GuideType: trtllmpb.GuidedDecodingParams_GUIDE_TYPE_JSON_SCHEMA, Guide: k.value}
	switch k.kind {
	case "regex":
		g.GuideType = trtllmpb.GuidedDecodingParams_GUIDE_TYPE_REGEX
	case "ebnf":
		g.GuideType = trtllmpb.GuidedDecodingParams_GUIDE_TYPE_EBNF_GRAMMAR
	}
	return g
}

// trtllmRequest builds the GenerateRequest. Stop and bad words go as strings, which the engine
// tokenizes itself (its SamplingParams._setup), and as ids; the engine then trims a matched stop
// string from its output unless include_stop_token_in_output. The input is left out of the output.
func trtllmRequest(c *call, contextLength int) *trtllmpb.GenerateRequest {
	return &trtllmpb.GenerateRequest{
		RequestId:                c.requestID,
		Tokenized:                &trtllmpb.TokenizedInput{OriginalText: c.text, InputTokenIds: c.ids},
		SamplingConfig:           trtllmSampling(c),
		OutputConfig:             trtllmOutput(c),
		MaxTokens:                trtllmMaxTokens(c, contextLength),
		Streaming:                c.stream,
		GuidedDecoding:           trtllmGuide(c.constraint),
		Stop:                     c.stops,
		StopTokenIds:             c.stopIDs,
		IgnoreEos:                c.ignoreEOS,
		Bad:                      c.bad,
		BadTokenIds:              c.badIDs,
		IncludeStopTokenInOutput: c.includeStop,
	}
}

// trtllmOutput asks for logprobs as the Rust client does: logprobs is the number of alternatives
// (0: the sampled token's alone), sent only when wanted; prompt_logprobs likewise, for echo and
// /generate's input logprobs.
func trtllmOutput(c *call) *trtllmpb.OutputConfig {
	o := &trtllmpb.OutputConfig{ExcludeInputFromOutput: true}
	if c.lp.output {
		o.Logprobs = ptr(c.lp.top)
		if c.lp.prompt {
			o.PromptLogprobs = ptr(c.lp.top)
		}
	}
	return o
}

func (t trtllmClient) generate(ctx context.Context, c *call) (genStream, error) {
	st, err := t.c.Generate(ctx, trtllmRequest(c, t.contextLength))
	if err != nil {
		return nil, err
	}
	return trtllmStream{st, int(max(c.lp.start, 0))}, nil
}

type trtllmStream struct {
	*connect.ServerStreamForClient[trtllmpb.GenerateResponse]
	// promptFrom is the first prompt position whose logprobs the answer shows (/generate's
	// logprob_start_len): the engine sends the whole prompt's.
	promptFrom int
}

func (s trtllmStream) event() event {
	m := s.Msg()
	if ch := m.GetChunk(); ch != nil {
		return event{ids: ch.GetTokenIds(), prompt: ch.GetPromptTokens(), completion: ch.GetCompletionTokens(), cached: ch.GetCachedTokens(),
			index: ch.GetSequenceIndex(), outLP: trtllmLPs(ch.GetLogprobs())}
	}
	d := m.GetComplete()
	ev := event{ids: d.GetOutputTokenIds(), complete: true, finish: d.GetFinishReason(), prompt: d.GetPromptTokens(),
		completion: d.GetCompletionTokens(), cached: d.GetCachedTokens(), index: d.GetSequenceIndex(),
		outLP: trtllmLPs(d.GetLogprobs()), inLP: trtllmPromptLPs(d.GetPromptLogprobs(), s.promptFrom)}
	switch ms := d.GetMatchedStop().(type) {
	case *trtllmpb.GenerateComplete_MatchedTokenId:
		ev.matchedID = &ms.MatchedTokenId
	case *trtllmpb.GenerateComplete_MatchedStopStr:
		ev.matchedStr = &ms.MatchedStopStr
	}
	return ev
}

// trtllmLPs converts TokenLogprobs. A token's top_logprobs are every entry of the engine's
// dictionary: its k best and the sampled token when that is not among them, in no promised order;
// sorted best first, the first k are the alternatives OpenAI's shapes show.
func trtllmLPs(in []*trtllmpb.TokenLogprob) []tokenLP {
	if len(in) == 0 {
		return nil
	}
	out := make([]tokenLP, len(in))
	for i, t := range in {
		out[i] = tokenLP{id: t.GetTokenId(), lp: t.GetLogprob(), has: true}
		if tops := t.GetTopLogprobs(); len(tops) > 0 {
			out[i].top = make([]topLP, len(tops))
			for j, a := range tops {
				out[i].top[j] = topLP{id: a.GetTokenId(), lp: a.GetLogprob()}
			}
			slices.SortStableFunc(out[i].top, func(a, b topLP) int { return cmp.Compare(b.lp, a.lp) })
		}
	}
	return out
}

// trtllmPromptLPs converts the prompt's TokenLogprobs from position from. The servicer pairs each
// prompt token with an entry, the first included, but nothing predicts the first token: it has no
// logprob, as vLLM's and SGLang's InputLogProbs say.
func trtllmPromptLPs(in []*trtllmpb.TokenLogprob, from int) []tokenLP {
	out := trtllmLPs(in)
	if len(out) > 0 {
		out[0] = tokenLP{id: out[0].id}
	}
	if from >= len(out) {
		return nil
	}
	return out[from:]
}

func ptr[T any](v T) *T { return &v }
