package enginerpc

import (
	"fmt"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/enginegrpc"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// n > 1: one Generate with sampling_params.n, as the Rust gateway sends it to both engines (smg
// crates/grpc_client/src/sglang_scheduler.rs, vllm_engine.rs); the engine tags every chunk and
// Complete with its sample's index and ends each sample with its own Complete. Each index is a sample
// of its own (text, stops, parsers, counts); the answer's choices carry the index, and usage counts
// the prompt once and every sample's completion, as the engines' HTTP servers do.

// samples are one call's samples, by index.
type samples struct {
	all      []*sample
	complete int // samples whose Complete arrived
}

func newSamples(tok *tokenizer.Tokenizer, c *call, cumulative bool) *samples {
	ss := &samples{all: make([]*sample, max(c.n, 1))}
	for i := range ss.all {
		ss.all[i] = newSample(tok, c, cumulative)
		ss.all[i].index = i
	}
	return ss
}

// add takes one event into its sample and returns that sample and its new text.
func (ss *samples) add(ev event) (*sample, delta, error) {
	if int(ev.index) >= len(ss.all) {
		return nil, delta{}, fmt.Errorf("the engine answered sample %d of a request for %d", ev.index, len(ss.all))
	}
	s := ss.all[ev.index]
	if len(ev.inLP) == 0 && s.inLPs == nil {
		// The prompt's logprobs are the request's: an engine may send them with one sample only.
		for _, o := range ss.all {
			if o.inLPs != nil {
				s.inLPs = o.inLPs
				break
			}
		}
	}
	wasComplete := s.complete
	d, err := s.add(ev)
	if err != nil {
		return s, d, err
	}
	if ev.complete && !wasComplete {
		ss.complete++
	}
	return s, d, nil
}

// done says every sample has completed.
func (ss *samples) done() bool { return ss.complete == len(ss.all) }

// usage is the answer's counts: the prompt once (the engine's count, else the prompt's ids), every
// sample's completion, the most cached.
func (ss *samples) usage(c *call) (prompt, completion, cached uint64) {
	for _, s := range ss.all {
		prompt = max(prompt, uint64(s.prompt))
		completion += uint64(s.completion)
		cached = max(cached, uint64(s.cached))
	}
	if prompt == 0 {
		prompt = uint64(len(c.ids))
	}
	return prompt, completion, cached
}

// inLPs are the prompt's logprobs as any sample got them.
func (ss *samples) inLPs() []tokenLP {
	for _, s := range ss.all {
		if s.inLPs != nil {
			return s.inLPs
		}
	}
	return nil
}

// refuseForProtocol refuses, naming the field, what a protocol cannot serve: TensorRT-LLM's servicer
// sends the prompt's logprobs only with its Complete, after every streamed chunk, so a streamed echo
// with logprobs, whose first chunk shows them, cannot be answered as it streams.
func refuseForProtocol(c *call, p enginegrpc.Protocol) *body.RequestError {
	if p == enginegrpc.TRTLLM && c.stream && c.echo && c.lp.output {
		return requestError("echo", "echo with logprobs is not served streamed over TensorRT-LLM's gRPC (its engine sends the prompt's logprobs at the end): send stream false, or no logprobs")
	}
	return nil
}
