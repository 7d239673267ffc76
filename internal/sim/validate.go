package sim

import (
	"math"
	"strconv"
	"strings"
)

// samplingRequest is what a request asks of the sampler, before defaults: nil means absent.
type samplingRequest struct {
	maxTokens   *int // max_tokens / max_completion_tokens / sampling_params.max_new_tokens
	temperature *float64
	topP        *float64
	n           int // as sent (1 when absent)
}

// validate checks a request as its engine does before running it: the context length, then the
// sampling parameters. promptLens are the prompts' token counts. It returns an engineError.
func (e *Engine) validate(promptLens []int, sr *samplingRequest) error {
	if e.cfg.Protocol == ProtocolVLLM {
		return e.validateVLLM(promptLens, sr)
	}
	return e.validateSGLang(promptLens, sr)
}

// validateSGLang follows python/sglang/srt/managers/tokenizer_manager.py _validate_one_request (per
// prompt: the input alone, then input + max_new_tokens; validate_total_tokens is always on and no
// tokens are reserved without speculative decoding), then
// python/sglang/srt/sampling/sampling_params.py SamplingParams.verify. SGLang does not check n: a
// value below 2 is a single sample (io_struct.py _handle_parallel_sampling).
func (e *Engine) validateSGLang(promptLens []int, sr *samplingRequest) error {
	ctx := e.cfg.ContextLength
	for _, n := range promptLens {
		if n >= ctx {
			return requestError("", "The input (%d tokens) is longer than the model's context length (%d tokens).", n, ctx)
		}
		if sr.maxTokens != nil && *sr.maxTokens+n > ctx {
			return requestError("", "Requested token count exceeds the model's maximum context length of %d tokens. "+
				"You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. "+
				"Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
				ctx, *sr.maxTokens+n, n, *sr.maxTokens)
		}
	}
	if t := sr.temperature; t != nil && (math.IsInf(*t, 0) || math.IsNaN(*t) || *t < 0) {
		return requestError("", "temperature must be a non-negative finite number, got %s.", pyFloat(*t))
	}
	if p := sr.topP; p != nil && (*p <= 0 || *p > 1) {
		return requestError("", "top_p must be in (0, 1], got %s.", pyFloat(*p))
	}
	if m := sr.maxTokens; m != nil && *m < 0 {
		return requestError("", "max_new_tokens must be at least 0, got %d.", *m)
	}
	return nil
}

// validateVLLM follows vllm/renderers/params.py TokenizeParams (__post_init__, _token_len_check: the
// prompt may use the context minus the requested output tokens), then vllm/sampling_params.py
// SamplingParams._verify_args and _verify_greedy_sampling. A VLLMValidationError's message ends with
// "(parameter=..., value=...)" when it names one (vllm/exceptions.py __str__), and the parameter is
// the ErrorInfo.param.
func (e *Engine) validateVLLM(promptLens []int, sr *samplingRequest) error {
	ctx := e.cfg.ContextLength
	maxOut := 0
	if sr.maxTokens != nil && *sr.maxTokens > 0 {
		maxOut = *sr.maxTokens
	}
	if maxOut > ctx {
		// The wording here is ours: upstream formats its parameter names from the call site.
		return requestError("max_tokens", "max_tokens=%d cannot be greater than max_model_len=%d. Please request fewer output tokens. (parameter=max_tokens, value=%d)",
			maxOut, ctx, maxOut)
	}
	for _, n := range promptLens {
		if n > ctx-maxOut {
			return requestError("input_tokens", "You passed %d input tokens and requested %d output tokens. "+
				"However, the model's context length is only %d tokens, resulting in a maximum input length of %d tokens. "+
				"Please reduce the length of the input prompt. (parameter=input_tokens, value=%d)", n, maxOut, ctx, ctx-maxOut, n)
		}
	}
	if sr.n < 1 {
		return requestError("", "n must be at least 1, got %d.", sr.n)
	}
	if t := sr.temperature; t != nil {
		switch {
		case math.IsInf(*t, 0) || math.IsNaN(*t):
			return requestError("temperature", "temperature must be a finite number, got %s. (parameter=temperature, value=%s)", pyFloat(*t), pyFloat(*t))
		case *t < 0:
			return requestError("temperature", "temperature must be non-negative, got %s. (parameter=temperature, value=%s)", pyFloat(*t), pyFloat(*t))
		case *t > 2:
			return requestError("temperature", "temperature must be in [0, 2], got %s. (parameter=temperature, value=%s)", pyFloat(*t), pyFloat(*t))
		}
	}
	if p := sr.topP; p != nil && (*p <= 0 || *p > 1) {
		return requestError("top_p", "top_p must be in (0, 1], got %s. (parameter=top_p, value=%s)", pyFloat(*p), pyFloat(*p))
	}
	if m := sr.maxTokens; m != nil && *m < 1 {
		return requestError("max_tokens", "max_tokens must be at least 1, got %d. (parameter=max_tokens, value=%d)", *m, *m)
	}
	if m := sr.maxTokens; m == nil {
		// Without max_tokens vLLM asks for the rest of the context: nothing left is max_tokens=0.
		for _, n := range promptLens {
			if ctx-n < 1 {
				return requestError("max_tokens", "max_tokens must be at least 1, got %d. (parameter=max_tokens, value=%d)", ctx-n, ctx-n)
			}
		}
	}
	if t := sr.temperature; t != nil && *t < 1e-5 && sr.n > 1 {
		return requestError("", "n must be 1 when using greedy sampling, got %d.", sr.n)
	}
	return nil
}

// pyFloat formats a float as Python's repr does (-1.0, 0.5, 1e-07), for messages that quote values.
func pyFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsNaN(v):
		return "nan"
	}
	a := math.Abs(v)
	if a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(v, 'e', -1, 64) // both write 1e-07 and 1e+16
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
