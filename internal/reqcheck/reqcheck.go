package reqcheck

import (
	"strconv"
	"strings"
)

// API names the request schema a body follows.
type API uint8

// The checked APIs. Generation bodies (Chat, Completions) carry the sampling parameters; Responses and
// Embeddings share only a few of them.
const (
	Chat        API = iota + 1 // POST /v1/chat/completions
	Completions                // POST /v1/completions
	Responses                  // POST /v1/responses
	Embeddings                 // POST /v1/embeddings
	Generate                   // POST /generate (SGLang's native API: its sampling_params)
)

// Error is a field no engine would accept: Param names it as the client wrote it (a nested field with
// dots and indexes, "tools[0].function.name"), Message says what is wrong in the client's terms.
type Error struct {
	Param   string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Checker checks the top-level members of one request body, then the rules between them (Done). The
// zero Checker checks nothing; use New.
type Checker struct {
	api                      API
	maxTokens, maxCompletion int64
	minTokens                int64
	haveMax, haveMaxCompl    bool
	haveMin                  bool
}

// New returns a Checker for a body of api.
func New(api API) Checker { return Checker{api: api} }

// Member checks one top-level member; key is its decoded name and raw its value, valid JSON. It
// returns nil for a field it has no rule for.
func (c *Checker) Member(key, raw []byte) *Error {
	k := kindOf(raw)
	if k == kindNull {
		return nil // both engines read null as the field's default
	}
	switch c.api {
	case Chat, Completions:
		return c.generation(key, raw, k)
	case Responses:
		return c.responses(key, raw, k)
	case Embeddings:
		return embeddings(key, raw, k)
	case Generate:
		if string(key) == "sampling_params" {
			return samplingParams(raw, k)
		}
	}
	return nil
}

// Done checks the rules between fields, once every member has been seen.
func (c *Checker) Done() *Error {
	if !c.haveMin {
		return nil
	}
	// vLLM reads max_completion_tokens before max_tokens (chat_completion/protocol.py to_sampling_params);
	// both engines refuse min_tokens above it (vllm/sampling_params.py _verify_args;
	// sglang sampling_params.py verify: min_new_tokens in [0, max_new_tokens]).
	limit, have, name := c.maxTokens, c.haveMax, "max_tokens"
	if c.haveMaxCompl {
		limit, have, name = c.maxCompletion, true, "max_completion_tokens"
	}
	if have && c.minTokens > limit {
		return &Error{Param: "min_tokens", Message: "min_tokens must be at most " + name + " (" +
			strconv.FormatInt(limit, 10) + "), got " + strconv.FormatInt(c.minTokens, 10)}
	}
	return nil
}

// The ranges below are where vllm/sampling_params.py (SamplingParams._verify_args) and SGLang's
// python/sglang/srt/sampling/sampling_params.py (SamplingParams.verify) agree, or the wider of the two
// where they differ. Field types are those of vllm/entrypoints/openai/chat_completion/protocol.py and
// completion/protocol.py (ChatCompletionRequest, CompletionRequest) and of SGLang's
// python/sglang/srt/entrypoints/openai/protocol.py (ChatCompletionRequest, CompletionRequest).
func (c *Checker) generation(key, raw []byte, k kind) *Error {
	chat := c.api == Chat
	switch string(key) {
	case "temperature":
		// vLLM: [0, 2]; SGLang: any non-negative finite number. The wider wins.
		return numberAtLeast("temperature", raw, k, 0)
	case "top_p":
		// Both: (0, 1].
		return numberIn("top_p", raw, k, 0, false, 1)
	case "min_p":
		// Both: [0, 1].
		return numberIn("min_p", raw, k, 0, true, 1)
	case "presence_penalty":
		// Both: [-2, 2].
		return numberIn("presence_penalty", raw, k, -2, true, 2)
	case "frequency_penalty":
		return numberIn("frequency_penalty", raw, k, -2, true, 2)
	case "repetition_penalty":
		// vLLM: any finite number > 0; SGLang: (0, 2]. The wider wins.
		return numberAbove("repetition_penalty", raw, k, 0)
	case "top_k":
		// vLLM: -1 or 0 (both "off") or at least 1; SGLang: -1 or at least 1. The wider wins.
		return integerAtLeast("top_k", raw, k, -1, nil)
	case "max_tokens":
		// vLLM: at least 1 (sampling_params.py); SGLang: positive (protocol.py validate_max_tokens_positive).
		c.haveMax = true
		return integerAtLeast("max_tokens", raw, k, 1, &c.maxTokens)
	case "max_completion_tokens":
		if !chat {
			return nil
		}
		c.haveMaxCompl = true
		return integerAtLeast("max_completion_tokens", raw, k, 1, &c.maxCompletion)
	case "min_tokens":
		// Both: at least 0.
		c.haveMin = true
		return integerAtLeast("min_tokens", raw, k, 0, &c.minTokens)
	case "seed":
		// vLLM: an int64 (ChatCompletionRequest.seed ge/le); SGLang: an int.
		return integerAtLeast("seed", raw, k, minInt64, nil)
	case "stop":
		// Both: a string or a list of strings (vLLM StopParam; SGLang Optional[Union[str, List[str]]]).
		return stringOrStrings("stop", raw, k)
	case "stop_token_ids":
		// Both: a list of integers.
		return integers("stop_token_ids", raw, k)
	case "logit_bias":
		return logitBias(raw, k)
	case "logprobs":
		if chat {
			// Chat: a boolean (vLLM bool | None; SGLang bool).
			return want("logprobs", k, kindBool)
		}
		// Completions: the number of logprobs; vLLM refuses below 0 except -1 ("all").
		return integerAtLeast("logprobs", raw, k, -1, nil)
	case "top_logprobs":
		if !chat {
			return nil
		}
		// vLLM: an integer, at least 0 or -1 ("all"), capped by the server's --max-logprobs.
		return integerAtLeast("top_logprobs", raw, k, -1, nil)
	case "n", "stream", "model", "messages", "prompt", "priority":
		return nil // internal/backend reads and checks these: routing needs them
	case "stream_options":
		return streamOptions(raw, k)
	case "response_format":
		// Both: an object with a string type (vLLM AnyResponseFormat; SGLang ResponseFormat).
		return typedObject("response_format", raw, k)
	case "tools":
		if !chat {
			return nil
		}
		return tools(raw, k)
	case "tool_choice":
		if !chat {
			return nil
		}
		// Both: "none", "auto", "required" or a named tool object; the values are the engines' to judge.
		if k != kindString && k != kindObject {
			return typeError("tool_choice", "a string or an object", k)
		}
	case "user", "suffix":
		return want(string(key), k, kindString)
	case "echo", "ignore_eos", "skip_special_tokens", "parallel_tool_calls":
		// Booleans in both engines' request models; a field only one of them defines is an unknown
		// extra to the other, which takes any value, so it is not checked.
		return want(string(key), k, kindBool)
	}
	return nil
}

// responses checks the sampling fields /v1/responses shares with chat (vLLM and SGLang turn them into
// the same sampling parameters; vllm/entrypoints/openai/responses/protocol.py, SGLang protocol.py
// ResponsesRequest).
func (c *Checker) responses(key, raw []byte, k kind) *Error {
	switch string(key) {
	case "temperature":
		return numberAtLeast("temperature", raw, k, 0)
	case "top_p":
		return numberIn("top_p", raw, k, 0, false, 1)
	case "max_output_tokens":
		return integerAtLeast("max_output_tokens", raw, k, 1, nil)
	case "top_logprobs":
		return integerAtLeast("top_logprobs", raw, k, -1, nil)
	case "tools":
		// Responses tools are flat ({"type":"function","name":...}): only their list shape is shared.
		return objects("tools", raw, k)
	case "user", "instructions", "previous_response_id":
		return want(string(key), k, kindString)
	}
	return nil
}

// embeddings checks /v1/embeddings (vLLM EmbeddingCompletionRequest, SGLang EmbeddingRequest).
func embeddings(key, raw []byte, k kind) *Error {
	switch string(key) {
	case "dimensions":
		return integerAtLeast("dimensions", raw, k, minInt64, nil)
	case "encoding_format", "user":
		return want(string(key), k, kindString)
	}
	return nil
}

// samplingParams checks /generate's sampling_params, an object or a list of them (one per prompt), with
// SGLang's own rules: python/sglang/srt/sampling/sampling_params.py SamplingParams.verify (this API is
// SGLang's alone, so its ranges are the ones to match). n is internal/backend's.
func samplingParams(raw []byte, k kind) *Error {
	switch k {
	case kindObject:
		return samplingObject("sampling_params", raw)
	case kindArray:
		return elems(raw, func(i int, v []byte) *Error {
			p := "sampling_params[" + strconv.Itoa(i) + "]"
			switch vk := kindOf(v); vk {
			case kindNull:
				return nil
			case kindObject:
				return samplingObject(p, v)
			default:
				return typeError(p, "an object", vk)
			}
		})
	}
	return typeError("sampling_params", "an object or an array of objects", k)
}

func samplingObject(prefix string, raw []byte) *Error {
	var maxNew, minNew int64
	var haveMax, haveMin bool
	err := members(raw, func(key, v []byte) *Error {
		k := kindOf(v)
		if k == kindNull {
			return nil // SamplingParams.__post_init__: None is the default
		}
		p := func() string { return prefix + "." + string(key[1:len(key)-1]) }
		switch {
		case keyIs(key, "temperature"):
			return numberAtLeast(p(), v, k, 0)
		case keyIs(key, "top_p"):
			return numberIn(p(), v, k, 0, false, 1)
		case keyIs(key, "min_p"):
			return numberIn(p(), v, k, 0, true, 1)
		case keyIs(key, "frequency_penalty"), keyIs(key, "presence_penalty"):
			return numberIn(p(), v, k, -2, true, 2)
		case keyIs(key, "repetition_penalty"):
			// (0, 2]: 1.0 is no penalty.
			return numberIn(p(), v, k, 0, false, 2)
		case keyIs(key, "max_new_tokens"):
			// At least 0: SGLang runs a zero-token generation (prefill only).
			haveMax = true
			return integerAtLeast(p(), v, k, 0, &maxNew)
		case keyIs(key, "min_new_tokens"):
			haveMin = true
			return integerAtLeast(p(), v, k, 0, &minNew)
		case keyIs(key, "stop"), keyIs(key, "stop_regex"):
			return stringOrStrings(p(), v, k)
		case keyIs(key, "stop_token_ids"):
			return integers(p(), v, k)
		case keyIs(key, "ignore_eos"), keyIs(key, "skip_special_tokens"), keyIs(key, "no_stop_trim"):
			return want(p(), k, kindBool)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if haveMin && haveMax && minNew > maxNew {
		p := prefix + ".min_new_tokens"
		return &Error{Param: p, Message: p + " must be at most max_new_tokens (" + strconv.FormatInt(maxNew, 10) +
			"), got " + strconv.FormatInt(minNew, 10)}
	}
	return nil
}

// Role checks messages[i].role: both engines require a string (vLLM ChatCompletionMessageParam; SGLang
// ChatCompletionMessageGenericParam and ChatCompletionMessageUserParam). Which roles exist is theirs to
// judge (SGLang lowercases them, vLLM's chat template reads them).
func Role(i int, raw []byte) *Error {
	if k := kindOf(raw); k != kindString {
		return typeError(msgParam(i, "role"), "a string", k)
	}
	return nil
}

// Content checks messages[i].content: both engines take a string, a list of parts or null.
func Content(i int, raw []byte) *Error {
	if k := kindOf(raw); k != kindString && k != kindArray && k != kindNull {
		return typeError(msgParam(i, "content"), "a string, an array of content parts or null", k)
	}
	return nil
}

// ContentPart checks part j of messages[i].content: both engines take only objects
// ({"type":"text","text":...}, image_url parts, ...).
func ContentPart(i, j int, raw []byte) *Error {
	if k := kindOf(raw); k != kindObject {
		return typeError(msgParam(i, "content")+"["+strconv.Itoa(j)+"]", "an object", k)
	}
	return nil
}

// MessageDone checks messages[i] once all its members are seen.
func MessageDone(i int, sawRole bool) *Error {
	if !sawRole {
		return &Error{Param: msgParam(i, "role"), Message: msgParam(i, "role") + " is required"}
	}
	return nil
}

func msgParam(i int, field string) string { return "messages[" + strconv.Itoa(i) + "]." + field }

const minInt64 = -1 << 63

func typeError(param, wantWhat string, got kind) *Error {
	return &Error{Param: param, Message: param + " must be " + wantWhat + ", got " + kindName(got)}
}

func want(param string, got, k kind) *Error {
	if got != k {
		return typeError(param, kindName(k), got)
	}
	return nil
}

// shown renders a client's value back to it, bounded (and valid UTF-8 where the cut splits a rune).
func shown(raw []byte) string {
	if len(raw) > 32 {
		return strings.ToValidUTF8(string(raw[:32]), "") + "..."
	}
	return strings.ToValidUTF8(string(raw), "\uFFFD")
}

func finite(param string, raw []byte, k kind) (float64, *Error) {
	if k != kindNumber {
		return 0, typeError(param, "a number", k)
	}
	v, ok := number(raw)
	if !ok {
		return 0, &Error{Param: param, Message: param + " must be a finite number, got " + shown(raw)}
	}
	return v, nil
}

func numberAtLeast(param string, raw []byte, k kind, lo float64) *Error {
	v, err := finite(param, raw, k)
	if err != nil {
		return err
	}
	if v < lo {
		return &Error{Param: param, Message: param + " must be at least " + fmtFloat(lo) + ", got " + shown(raw)}
	}
	return nil
}

func numberAbove(param string, raw []byte, k kind, lo float64) *Error {
	v, err := finite(param, raw, k)
	if err != nil {
		return err
	}
	if v <= lo {
		return &Error{Param: param, Message: param + " must be greater than " + fmtFloat(lo) + ", got " + shown(raw)}
	}
	return nil
}

// numberIn checks lo <= v <= hi (lo < v when !loIncl).
func numberIn(param string, raw []byte, k kind, lo float64, loIncl bool, hi float64) *Error {
	v, err := finite(param, raw, k)
	if err != nil {
		return err
	}
	if v > hi || v < lo || (!loIncl && v == lo) {
		open := "["
		if !loIncl {
			open = "("
		}
		return &Error{Param: param, Message: param + " must be in " + open + fmtFloat(lo) + ", " + fmtFloat(hi) + "], got " + shown(raw)}
	}
	return nil
}

// integerAtLeast checks an integer >= lo and stores it in *dst when dst is not nil.
func integerAtLeast(param string, raw []byte, k kind, lo int64, dst *int64) *Error {
	if k != kindNumber {
		return typeError(param, "an integer", k)
	}
	v, ok := integer(raw)
	if !ok {
		return &Error{Param: param, Message: param + " must be an integer, got " + shown(raw)}
	}
	if v < lo {
		return &Error{Param: param, Message: param + " must be at least " + strconv.FormatInt(lo, 10) + ", got " + shown(raw)}
	}
	if dst != nil {
		*dst = v
	}
	return nil
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func stringOrStrings(param string, raw []byte, k kind) *Error {
	switch k {
	case kindString:
		return nil
	case kindArray:
		return elems(raw, func(i int, v []byte) *Error {
			if ek := kindOf(v); ek != kindString {
				return typeError(param+"["+strconv.Itoa(i)+"]", "a string", ek)
			}
			return nil
		})
	}
	return typeError(param, "a string or an array of strings", k)
}

func integers(param string, raw []byte, k kind) *Error {
	if k != kindArray {
		return typeError(param, "an array of integers", k)
	}
	return elems(raw, func(i int, v []byte) *Error {
		ek := kindOf(v)
		if _, ok := integer(v); ek == kindNumber && ok {
			return nil
		}
		p := param + "[" + strconv.Itoa(i) + "]"
		if ek != kindNumber {
			return typeError(p, "an integer", ek)
		}
		return &Error{Param: p, Message: p + " must be an integer, got " + shown(v)}
	})
}

// logitBias: both engines take a map from token id to a number (vLLM dict[str, float], refusing keys
// that int() cannot read, sampling_params.py from_optional; SGLang Dict[str, float], verify reads
// int(token_id)). The range of ids is the vocabulary's, which only the engine knows; vLLM clamps the
// biases to [-100, 100] rather than refusing them.
func logitBias(raw []byte, k kind) *Error {
	if k != kindObject {
		return typeError("logit_bias", "an object mapping token ids to numbers", k)
	}
	return members(raw, func(key, v []byte) *Error {
		if !isIntegerKey(key) {
			return &Error{Param: "logit_bias", Message: "logit_bias keys must be token ids (integers), got " + shown(key)}
		}
		if ek := kindOf(v); ek != kindNumber {
			return &Error{Param: "logit_bias", Message: "logit_bias values must be numbers, got " + kindName(ek) + " for " + shown(key)}
		}
		return nil
	})
}

// streamOptions: an object whose include_usage is a boolean (vLLM and SGLang StreamOptions).
func streamOptions(raw []byte, k kind) *Error {
	if k != kindObject {
		return typeError("stream_options", "an object", k)
	}
	if v, ok := member(raw, "include_usage"); ok {
		if vk := kindOf(v); vk != kindBool && vk != kindNull {
			return typeError("stream_options.include_usage", "a boolean", vk)
		}
	}
	return nil
}

func typedObject(param string, raw []byte, k kind) *Error {
	if k != kindObject {
		return typeError(param, "an object", k)
	}
	t, ok := member(raw, "type")
	if !ok {
		return &Error{Param: param + ".type", Message: param + ".type is required"}
	}
	if tk := kindOf(t); tk != kindString {
		return typeError(param+".type", "a string", tk)
	}
	return nil
}

func objects(param string, raw []byte, k kind) *Error {
	if k != kindArray {
		return typeError(param, "an array", k)
	}
	return elems(raw, func(i int, v []byte) *Error {
		if ek := kindOf(v); ek != kindObject {
			return typeError(param+"["+strconv.Itoa(i)+"]", "an object", ek)
		}
		return nil
	})
}

// tools: a list of {"type":"function","function":{"name":<string>,...}} (vLLM ChatCompletionToolsParam
// and FunctionDefinition; SGLang Tool and Function: function and its name are required in both). One
// pass over each tool and one over its function: tool parameters (JSON schemas) can be long.
func tools(raw []byte, k kind) *Error {
	if k != kindArray {
		return typeError("tools", "an array", k)
	}
	return elems(raw, func(i int, v []byte) *Error {
		p := func(field string) string { return "tools[" + strconv.Itoa(i) + "]" + field }
		if vk := kindOf(v); vk != kindObject {
			return typeError(p(""), "an object", vk)
		}
		var typ, fn []byte
		_ = members(v, func(key, mv []byte) *Error {
			switch {
			case keyIs(key, "type"):
				typ = mv
			case keyIs(key, "function"):
				fn = mv
			}
			return nil
		})
		if typ != nil {
			if tk := kindOf(typ); tk != kindString {
				return typeError(p(".type"), "a string", tk)
			}
		}
		if fn == nil || kindOf(fn) == kindNull {
			return &Error{Param: p(".function"), Message: p(".function") + " is required"}
		}
		if fk := kindOf(fn); fk != kindObject {
			return typeError(p(".function"), "an object", fk)
		}
		name, ok := member(fn, "name")
		if !ok {
			return &Error{Param: p(".function.name"), Message: p(".function.name") + " is required"}
		}
		if nk := kindOf(name); nk != kindString {
			return typeError(p(".function.name"), "a string", nk)
		}
		return nil
	})
}
