package sim

import (
	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// Logprobs over the engines' gRPC, from the model /generate's input_token_logprobs use over HTTP: a
// token at position k (of the prompt, or of the output) has logprob -0.(k%9+1). The first prompt token
// has none, as the engines' InputLogProbs say. A token's k alternatives are itself and the ids after
// it (within the bytes when ids are bytes, so that a byte-level tokenizer knows them), each 1 lower.

func simLogprob(pos int) float32 { return -float32(pos%9+1) / 10 }

// lpModel numbers a request's output tokens and gives their logprobs.
type lpModel struct {
	top     int  // alternatives per token
	byteIDs bool // ids are bytes: alternatives stay below 256
	pos     int  // the next output token's position
}

func (m *lpModel) alternatives(id uint32, pos int) (vals []float32, ids []uint32) {
	return m.alternativesK(id, pos, m.top)
}

func (m *lpModel) alternativesK(id uint32, pos, k int) (vals []float32, ids []uint32) {
	for j := range k {
		alt := id + uint32(j)
		if m.byteIDs {
			alt %= 256
		}
		vals = append(vals, simLogprob(pos)-float32(j))
		ids = append(ids, alt)
	}
	return vals, ids
}

func (m *lpModel) sglang(ids []uint32) *sglangpb.OutputLogProbs {
	o := &sglangpb.OutputLogProbs{}
	for _, id := range ids {
		o.TokenLogprobs, o.TokenIds = append(o.TokenLogprobs, simLogprob(m.pos)), append(o.TokenIds, id)
		if m.top > 0 {
			v, t := m.alternatives(id, m.pos)
			o.TopLogprobs = append(o.TopLogprobs, &sglangpb.TopLogProbs{Values: v, TokenIds: t})
		}
		m.pos++
	}
	return o
}

func (m *lpModel) vllm(ids []uint32) *vllmpb.OutputLogProbs {
	o := &vllmpb.OutputLogProbs{}
	for _, id := range ids {
		o.TokenLogprobs, o.TokenIds = append(o.TokenLogprobs, simLogprob(m.pos)), append(o.TokenIds, id)
		if m.top > 0 {
			v, t := m.alternatives(id, m.pos)
			o.TopLogprobs = append(o.TopLogprobs, &vllmpb.TopLogProbs{Values: v, TokenIds: t})
		}
		m.pos++
	}
	return o
}

// eachInput walks a prompt's logprobs as both engines give them, from position start (SGLang's
// logprob_start_len; 0 for vLLM): the first token walked has none (nil, as SGLang's scheduler puts
// None first whatever the start), every token its alternatives when top logprobs were asked for
// (m.top > 0). Values stay those of the token's position in the whole prompt.
func (m *lpModel) eachInput(prompt []uint32, start int, f func(value *float32, vals []float32, ids []uint32)) {
	for k := start; k < len(prompt); k++ {
		var v *float32
		if k > start {
			x := simLogprob(k)
			v = &x
		}
		var vals []float32
		var ids []uint32
		if m.top > 0 {
			vals, ids = m.alternatives(prompt[k], k)
		}
		f(v, vals, ids)
	}
}

// sglangInput is the prompt's logprobs from logprob_start_len start (checked below the prompt's
// length by the servicer's parse).
func (m *lpModel) sglangInput(prompt []uint32, start int) *sglangpb.InputLogProbs {
	in := &sglangpb.InputLogProbs{TokenIds: prompt[start:]}
	m.eachInput(prompt, start, func(v *float32, vals []float32, ids []uint32) {
		in.TokenLogprobs = append(in.TokenLogprobs, &sglangpb.InputTokenLogProb{Value: v})
		if m.top > 0 {
			in.TopLogprobs = append(in.TopLogprobs, &sglangpb.TopLogProbs{Values: vals, TokenIds: ids})
		}
	})
	return in
}

func (m *lpModel) vllmInput(prompt []uint32) *vllmpb.InputLogProbs {
	in := &vllmpb.InputLogProbs{TokenIds: prompt}
	m.eachInput(prompt, 0, func(v *float32, vals []float32, ids []uint32) {
		in.TokenLogprobs = append(in.TokenLogprobs, &vllmpb.InputTokenLogProb{Value: v})
		if m.top > 0 {
			in.TopLogprobs = append(in.TopLogprobs, &vllmpb.TopLogProbs{Values: vals, TokenIds: ids})
		}
	})
	return in
}

// trtllm is TensorRT-LLM's TokenLogprobs of ids: per id its logprob and, as top_logprobs, every entry
// of the engine's dictionary, which holds the k best and the sampled token (so one entry when k is 0;
// in the model the sampled token is the best).
func (m *lpModel) trtllm(ids []uint32) []*trtllmpb.TokenLogprob {
	out := make([]*trtllmpb.TokenLogprob, 0, len(ids))
	for _, id := range ids {
		e := &trtllmpb.TokenLogprob{TokenId: id, Logprob: simLogprob(m.pos)}
		vals, tids := m.alternativesK(id, m.pos, max(m.top, 1))
		for j := range vals {
			e.TopLogprobs = append(e.TopLogprobs, &trtllmpb.TopLogprob{TokenId: tids[j], Logprob: vals[j]})
		}
		out = append(out, e)
		m.pos++
	}
	return out
}

// trtllmPrompt is TensorRT-LLM's prompt_logprobs: the servicer pairs every prompt token with an entry,
// the first too, for which the model has no logprob (0, the servicer's value for a token missing from
// its dictionary, and no alternatives).
func (m *lpModel) trtllmPrompt(prompt []uint32) []*trtllmpb.TokenLogprob {
	out := make([]*trtllmpb.TokenLogprob, 0, len(prompt))
	for k, id := range prompt {
		e := &trtllmpb.TokenLogprob{TokenId: id}
		if k > 0 {
			e.Logprob = simLogprob(k)
			vals, tids := m.alternativesK(id, k, max(m.top, 1))
			for j := range vals {
				e.TopLogprobs = append(e.TopLogprobs, &trtllmpb.TopLogprob{TokenId: tids[j], Logprob: vals[j]})
			}
		}
		out = append(out, e)
	}
	return out
}
