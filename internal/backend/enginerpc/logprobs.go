package enginerpc

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/jsonx"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// Logprobs: what a request asks for becomes each engine's fields (SGLang: return_logprob,
// top_logprobs_num, logprob_start_len; vLLM: sampling_params.logprobs and prompt_logprobs, as the Rust
// gateway's clients send them: smg crates/grpc_client/src/sglang_scheduler.rs, vllm_engine.rs), and
// the engine's OutputLogProbs/InputLogProbs come back in the shapes the engines' HTTP servers answer:
// OpenAI chat's logprobs.content, completions' tokens/token_logprobs/top_logprobs/text_offset, SGLang
// /generate's meta_info.output_token_logprobs. Token strings are the gateway tokenizer's decode of the
// one id (special tokens kept), bytes those of the string, as vLLM's are.

// maxTopLogprobs is vLLM's default --max-logprobs and OpenAI's bound on top_logprobs.
const maxTopLogprobs = 20

// tokenLP is one position's logprob: the token, its logprob (none for a prompt's first token) and the
// most likely alternatives.
type tokenLP struct {
	id  uint32
	lp  float32
	has bool
	top []topLP
}

type topLP struct {
	id uint32
	lp float32
}

// topMsg is either protocol's TopLogProbs.
type topMsg interface {
	GetValues() []float32
	GetTokenIds() []uint32
}

func tops[T topMsg](t T) []topLP {
	vals, ids := t.GetValues(), t.GetTokenIds()
	out := make([]topLP, 0, min(len(vals), len(ids)))
	for i := range min(len(vals), len(ids)) {
		out = append(out, topLP{id: ids[i], lp: vals[i]})
	}
	return out
}

// outputLPs converts an OutputLogProbs (nil: none).
func outputLPs[T topMsg](vals []float32, ids []uint32, top []T) []tokenLP {
	n := min(len(vals), len(ids))
	if n == 0 {
		return nil
	}
	out := make([]tokenLP, n)
	for i := range n {
		out[i] = tokenLP{id: ids[i], lp: vals[i], has: true}
		if i < len(top) {
			out[i].top = tops(top[i])
		}
	}
	return out
}

// inputLPs converts an InputLogProbs, whose values are optional (the first prompt token has none).
func inputLPs[T topMsg](vals []*float32, ids []uint32, top []T) []tokenLP {
	n := min(len(vals), len(ids))
	if n == 0 {
		return nil
	}
	out := make([]tokenLP, n)
	for i := range n {
		out[i] = tokenLP{id: ids[i]}
		if v := vals[i]; v != nil {
			out[i].lp, out[i].has = *v, true
		}
		if i < len(top) {
			out[i].top = tops(top[i])
		}
	}
	return out
}

// lpRequest is what a request asks of logprobs.
type lpRequest struct {
	output bool  // the generated tokens' logprobs
	top    int32 // alternatives per position
	prompt bool  // the prompt's logprobs too (echo; /generate from logprob_start_len)
	start  int32 // SGLang's logprob_start_len: -1 none of the prompt
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// setLogprobs reads logprobs as each route spells it: chat's logprobs (a boolean) and top_logprobs,
// completions' logprobs (the number of alternatives) and echo, /generate's return_logprob,
// top_logprobs_num and logprob_start_len.
func (c *call) setLogprobs(r *requestJSON) error {
	c.lp.start = -1
	switch c.route {
	case body.RouteChat:
		if !isNull(r.Logprobs) {
			if err := json.Unmarshal(r.Logprobs, &c.lp.output); err != nil {
				return requestError("logprobs", "logprobs must be a boolean")
			}
		}
		if r.TopLogprobs != nil {
			k := *r.TopLogprobs
			if k < 0 || k > maxTopLogprobs {
				return requestError("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, k)
			}
			if k > 0 && !c.lp.output {
				return requestError("top_logprobs", "when using top_logprobs, logprobs must be set to true")
			}
			c.lp.top = int32(k)
		}
	case body.RouteCompletions:
		c.echo = r.Echo
		if !isNull(r.Logprobs) {
			var k int
			if err := json.Unmarshal(r.Logprobs, &k); err != nil {
				return requestError("logprobs", "logprobs must be an integer")
			}
			if k < 0 || k > maxTopLogprobs {
				return requestError("logprobs", "logprobs must be between 0 and %d, got %d", maxTopLogprobs, k)
			}
			c.lp.output, c.lp.top = true, int32(k)
			if c.echo {
				c.lp.prompt, c.lp.start = true, 0
			}
		}
	case body.RouteGenerate:
		c.lp.output = r.ReturnLogprob
		if r.ReturnLogprob {
			if r.TopLogprobsNum != nil {
				c.lp.top = max(*r.TopLogprobsNum, 0)
			}
			// SGLang's HTTP server reports the prompt's logprobs from logprob_start_len, by default
			// (the unset -1) from the prompt's start; its gRPC servicer only when it is >= 0.
			c.lp.start = 0
			if r.LogprobStartLen != nil && *r.LogprobStartLen >= 0 {
				c.lp.start = *r.LogprobStartLen
			}
			c.lp.prompt = true
		}
	}
	return nil
}

// tokenText is a token's string in logprobs: its text, special tokens kept.
func tokenText(tok *tokenizer.Tokenizer, id uint32) string {
	s, err := tok.Decode([]int{int(id)}, false)
	if err != nil {
		return "<token_" + strconv.FormatUint(uint64(id), 10) + ">"
	}
	return s
}

// appendLP writes a logprob; -inf (and NaN) become vLLM's floor -9999.0, which JSON can carry.
func appendLP(dst []byte, v float32) []byte {
	f := float64(v)
	if math.IsInf(f, 0) || math.IsNaN(f) || f < -9999 {
		return append(dst, "-9999.0"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 32)
}

func appendBytes(dst []byte, s string) []byte {
	dst = append(dst, '[')
	for i := range len(s) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(s[i]), 10)
	}
	return append(dst, ']')
}

// appendChatLogprobs writes a chat choice's logprobs: {"content":[...]} (null without entries).
func appendChatLogprobs(dst []byte, tok *tokenizer.Tokenizer, lps []tokenLP, k int32) []byte {
	dst = append(dst, `,"logprobs":`...)
	if len(lps) == 0 {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"content":[`...)
	for i, e := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		t := tokenText(tok, e.id)
		dst = append(dst, `{"token":`...)
		dst = jsonx.AppendString(dst, t)
		dst = append(dst, `,"logprob":`...)
		dst = appendLP(dst, e.lp)
		dst = append(dst, `,"bytes":`...)
		dst = appendBytes(dst, t)
		dst = append(dst, `,"top_logprobs":[`...)
		for j, a := range e.top[:min(len(e.top), int(k))] {
			if j > 0 {
				dst = append(dst, ',')
			}
			at := tokenText(tok, a.id)
			dst = append(dst, `{"token":`...)
			dst = jsonx.AppendString(dst, at)
			dst = append(dst, `,"logprob":`...)
			dst = appendLP(dst, a.lp)
			dst = append(dst, `,"bytes":`...)
			dst = appendBytes(dst, at)
			dst = append(dst, '}')
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, "]}"...)
}

// appendCompletionLogprobs writes a completions choice's logprobs as vLLM's: per token its string, its
// logprob (null for the prompt's first), a map of the token and its k alternatives, and the token's
// offset in the choice's text, counted on from offset. It returns the offset after the last token.
func appendCompletionLogprobs(dst []byte, tok *tokenizer.Tokenizer, lps []tokenLP, k int32, offset int) ([]byte, int) {
	dst = append(dst, `,"logprobs":`...)
	if len(lps) == 0 {
		return append(dst, "null"...), offset
	}
	texts := make([]string, len(lps))
	for i, e := range lps {
		texts[i] = tokenText(tok, e.id)
	}
	dst = append(dst, `{"text_offset":[`...)
	for i, t := range texts {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(offset), 10)
		offset += len(t)
	}
	dst = append(dst, `],"token_logprobs":[`...)
	for i, e := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		if e.has {
			dst = appendLP(dst, e.lp)
		} else {
			dst = append(dst, "null"...)
		}
	}
	dst = append(dst, `],"tokens":[`...)
	for i, t := range texts {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonx.AppendString(dst, t)
	}
	dst = append(dst, `],"top_logprobs":[`...)
	for i, e := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		if !e.has {
			dst = append(dst, "null"...)
			continue
		}
		// vLLM's map holds the token itself and its k alternatives (one key per distinct string).
		dst = append(dst, '{')
		seen := map[string]bool{texts[i]: true}
		dst = jsonx.AppendString(dst, texts[i])
		dst = append(dst, ':')
		dst = appendLP(dst, e.lp)
		for _, a := range e.top[:min(len(e.top), int(k))] {
			at := tokenText(tok, a.id)
			if seen[at] {
				continue
			}
			seen[at] = true
			dst = append(dst, ',')
			dst = jsonx.AppendString(dst, at)
			dst = append(dst, ':')
			dst = appendLP(dst, a.lp)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...), offset
}

// appendGenerateLogprobs writes /generate's meta_info logprob fields as SGLang's HTTP server does:
// [logprob, token id, null] per position (null: the text, which return_text_in_logprobs would give),
// and the top alternatives per position when asked for.
func appendGenerateLogprobs(dst []byte, c *call, s *sample) []byte {
	dst = append(dst, `,"input_token_logprobs":`...)
	dst = appendGenerateEntries(dst, s.inLPs)
	dst = append(dst, `,"output_token_logprobs":`...)
	dst = appendGenerateEntries(dst, s.lps)
	if c.lp.top > 0 {
		dst = append(dst, `,"input_top_logprobs":`...)
		dst = appendGenerateTops(dst, s.inLPs, c.lp.top)
		dst = append(dst, `,"output_top_logprobs":`...)
		dst = appendGenerateTops(dst, s.lps, c.lp.top)
	}
	return dst
}

func appendGenerateEntries(dst []byte, lps []tokenLP) []byte {
	dst = append(dst, '[')
	for i, e := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		if e.has {
			dst = appendLP(dst, e.lp)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, ',')
		dst = strconv.AppendUint(dst, uint64(e.id), 10)
		dst = append(dst, ",null]"...)
	}
	return append(dst, ']')
}

func appendGenerateTops(dst []byte, lps []tokenLP, k int32) []byte {
	dst = append(dst, '[')
	for i, e := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		if len(e.top) == 0 {
			dst = append(dst, "null"...)
			continue
		}
		dst = append(dst, '[')
		for j, a := range e.top[:min(len(e.top), int(k))] {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = appendLP(dst, a.lp)
			dst = append(dst, ',')
			dst = strconv.AppendUint(dst, uint64(a.id), 10)
			dst = append(dst, ",null]"...)
		}
		dst = append(dst, ']')
	}
	return append(dst, ']')
}
