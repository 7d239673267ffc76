package enginerpc

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/jsonscan"
)

// decodeRequest reads a body into r with the gateway's one JSON reader, field by field: each leg of a
// request is decoded here, and encoding/json's reflection was half of parseCall's CPU (a tenth of the
// gateway's in gRPC mode; docs/benchmarks.md). It keeps encoding/json's meanings: the last of a
// repeated key wins, null leaves a scalar as it was and sets a pointer, slice or raw value to nil (a
// raw value to the bytes null), raw values are the body's own bytes (r must not outlive raw), a
// mistyped value is an error. Keys match exactly, as the engines' parsers (pydantic) match them;
// encoding/json also matched them case-insensitively. An integer field takes an integral number
// (2.0 too, as pydantic does).
func decodeRequest(raw []byte, r *requestJSON) error {
	end, err := decodeObject(raw, 0, r.member)
	if err != nil {
		// A mistyped member stops the walk; the body past it may not be JSON at all, which says more.
		if _, serr := jsonscan.CheckTopObject(raw); serr != nil {
			return &body.RequestError{Message: "invalid JSON body: " + serr.Error(), Malformed: true}
		}
		return err
	}
	if jsonscan.SkipWS(raw, end) != len(raw) {
		return &body.RequestError{Message: "invalid JSON body: data after the object", Malformed: true}
	}
	return nil
}

// decodeObject walks the object at b[i], calling member with each decoded key and its raw value, and
// returns the index just past the object.
func decodeObject(b []byte, i int, member func(key, v []byte) error) (int, error) {
	it := jsonscan.NewObjIter(b, i)
	for {
		m, ok := it.Next()
		if !ok {
			break
		}
		key := b[m.KeyStart+1 : m.KeyEnd-1] // a []byte: members switch on string(key), which copies nothing
		if m.KeyEsc {
			key = []byte(m.Key(b))
		}
		if err := member(key, m.Value(b)); err != nil {
			return 0, err
		}
	}
	if it.Err != nil {
		return 0, &body.RequestError{Message: "invalid JSON body: " + it.Err.Error(), Malformed: true}
	}
	return it.Close + 1, nil
}

func (r *requestJSON) member(k, v []byte) error {
	if dst := r.rawField(k); dst != nil {
		*dst = v
		return nil
	}
	switch string(k) {
	case "model":
		return decodeStringField("model", v, &r.Model)
	case "add_generation_prompt":
		return decodeBoolPtr("add_generation_prompt", v, &r.AddGenerationPrompt)
	case "sampling_params":
		return decodeSamplingParams(v, r)
	case "stream":
		return decodeBool("stream", v, &r.Stream)
	case "stream_options":
		return decodeStreamOptions(v, r)
	case "n":
		return decodeIntPtr("n", v, &r.N)
	case "max_tokens":
		return decodeIntPtr("max_tokens", v, &r.MaxTokens)
	case "max_completion_tokens":
		return decodeIntPtr("max_completion_tokens", v, &r.MaxCompletionTokens)
	case "echo":
		return decodeBool("echo", v, &r.Echo)
	case "top_logprobs":
		return decodeIntPtr("top_logprobs", v, &r.TopLogprobs)
	case "response_format":
		return decodeResponseFormat(v, r)
	case "routed_dp_rank":
		return decodeIntPtr("routed_dp_rank", v, &r.RoutedDPRank)
	case "return_logprob":
		return decodeBool("return_logprob", v, &r.ReturnLogprob)
	case "top_logprobs_num":
		return decodeIntPtr("top_logprobs_num", v, &r.TopLogprobsNum)
	case "logprob_start_len":
		return decodeIntPtr("logprob_start_len", v, &r.LogprobStartLen)
	}
	return r.samplingJSON.member(k, v)
}

// rawField is where the field k is kept as it came (its route or the handshake reads it later), or
// nil when k is not such a field.
func (r *requestJSON) rawField(k []byte) *json.RawMessage {
	switch string(k) {
	case "messages":
		return &r.Messages
	case "tools":
		return &r.Tools
	case "tool_choice":
		return &r.ToolChoice
	case "chat_template_kwargs":
		return &r.ChatTemplateKwargs
	case "prompt":
		return &r.Prompt
	case "text":
		return &r.Text
	case "input_ids":
		return &r.InputIDs
	case "logprobs":
		return &r.Logprobs
	case "structured_outputs":
		return &r.StructuredOutputs
	case "guided_json":
		return &r.GuidedJSON
	case "guided_regex":
		return &r.GuidedRegex
	case "guided_choice":
		return &r.GuidedChoice
	case "guided_grammar":
		return &r.GuidedGrammar
	case "bootstrap_host":
		return &r.BootstrapHost
	case "bootstrap_port":
		return &r.BootstrapPort
	case "bootstrap_room":
		return &r.BootstrapRoom
	case "kv_transfer_params":
		return &r.KVTransferParams
	}
	return nil
}

// decodeSamplingParams decodes SGLang's sampling_params object into r.SamplingParams.
func decodeSamplingParams(v []byte, r *requestJSON) error {
	if jsonscan.IsNull(v) {
		r.SamplingParams = nil
		return nil
	}
	if r.SamplingParams == nil {
		r.SamplingParams = new(samplingJSON)
	}
	_, err := decodeObject(v, 0, func(k, sv []byte) error {
		if string(k) == "n" { // the embedded copy's n is sampling_params' own
			return decodeIntPtr("n", sv, &r.SamplingParams.N)
		}
		return r.SamplingParams.member(k, sv)
	})
	return typed(err, "sampling_params", "an object", v)
}

// member decodes one sampling field; n is not among them, since at a body's top level n is the
// request's (requestJSON.N) and in sampling_params the caller routes it.
func (s *samplingJSON) member(k, v []byte) error {
	switch string(k) {
	case "temperature":
		return decodeFloat32Ptr("temperature", v, &s.Temperature)
	case "top_p":
		return decodeFloat32Ptr("top_p", v, &s.TopP)
	case "top_k":
		return decodeIntPtr("top_k", v, &s.TopK)
	case "min_p":
		return decodeFloat32Ptr("min_p", v, &s.MinP)
	case "frequency_penalty":
		return decodeFloat32Ptr("frequency_penalty", v, &s.FrequencyPenalty)
	case "presence_penalty":
		return decodeFloat32Ptr("presence_penalty", v, &s.PresencePenalty)
	case "repetition_penalty":
		return decodeFloat32Ptr("repetition_penalty", v, &s.RepetitionPenalty)
	case "stop":
		s.Stop = v
	case "stop_token_ids":
		return decodeUint32s("stop_token_ids", v, &s.StopTokenIDs)
	case "seed":
		if jsonscan.IsNull(v) {
			s.Seed = nil
			return nil
		}
		n, err := decodeInt("seed", v, math.MinInt64, math.MaxInt64)
		if err != nil {
			return err
		}
		s.Seed = &n
	case "min_tokens":
		return decodeUint32("min_tokens", v, &s.MinTokens)
	case "ignore_eos":
		return decodeBool("ignore_eos", v, &s.IgnoreEOS)
	case "skip_special_tokens":
		return decodeBoolPtr("skip_special_tokens", v, &s.SkipSpecialTokens)
	case "no_stop_trim":
		return decodeBool("no_stop_trim", v, &s.NoStopTrim)
	case "include_stop_str_in_output":
		return decodeBool("include_stop_str_in_output", v, &s.IncludeStopStr)
	case "regex":
		return decodeStringPtr("regex", v, &s.Regex)
	case "ebnf":
		return decodeStringPtr("ebnf", v, &s.Ebnf)
	case "bad":
		s.Bad = v
	case "bad_token_ids":
		return decodeUint32s("bad_token_ids", v, &s.BadTokenIDs)
	case "max_new_tokens":
		return decodeIntPtr("max_new_tokens", v, &s.MaxNewTokens)
	case "min_new_tokens":
		return decodeUint32("min_new_tokens", v, &s.MinNewTokens)
	case "json_schema":
		return decodeStringPtr("json_schema", v, &s.JSONSchema)
	}
	return nil
}

func decodeStreamOptions(v []byte, r *requestJSON) error {
	if jsonscan.IsNull(v) {
		r.StreamOptions = nil
		return nil
	}
	if r.StreamOptions == nil {
		r.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{}
	}
	_, err := decodeObject(v, 0, func(k, ov []byte) error {
		if string(k) == "include_usage" {
			return decodeBool("stream_options.include_usage", ov, &r.StreamOptions.IncludeUsage)
		}
		return nil
	})
	return typed(err, "stream_options", "an object", v)
}

func decodeResponseFormat(v []byte, r *requestJSON) error {
	if jsonscan.IsNull(v) {
		r.ResponseFormat = nil
		return nil
	}
	if r.ResponseFormat == nil {
		r.ResponseFormat = new(responseFormatJSON)
	}
	rf := r.ResponseFormat
	_, err := decodeObject(v, 0, func(k, ov []byte) error {
		switch string(k) {
		case "type":
			return decodeStringField("response_format.type", ov, &rf.Type)
		case "json_schema":
			if jsonscan.IsNull(ov) {
				rf.JSONSchema = nil
				return nil
			}
			if rf.JSONSchema == nil {
				rf.JSONSchema = new(jsonSchemaJSON)
			}
			_, err := decodeObject(ov, 0, func(k, sv []byte) error {
				if string(k) == "schema" {
					rf.JSONSchema.Schema = sv
				}
				return nil
			})
			return typed(err, "response_format.json_schema", "an object", ov)
		}
		return nil
	})
	return typed(err, "response_format", "an object", v)
}

// typed turns a walk's failure on a value that is not an object into a type error naming the field;
// other errors (a member's) pass through.
func typed(err error, param, want string, v []byte) error {
	if err != nil && len(v) > 0 && v[0] != '{' {
		return typeError(param, want)
	}
	return err
}

func typeError(param, want string) error {
	return &body.RequestError{Param: param, Message: param + " must be " + want}
}

// Each field's reader turns a value that is not null into the field's type. A null leaves a scalar
// field as it was (setVal) and sets a pointer to nil (setPtr), as encoding/json does.

func setVal[T any](key string, v []byte, dst *T, read func(key string, v []byte) (T, error)) error {
	if jsonscan.IsNull(v) {
		return nil
	}
	x, err := read(key, v)
	if err != nil {
		return err
	}
	*dst = x
	return nil
}

func setPtr[T any](key string, v []byte, dst **T, read func(key string, v []byte) (T, error)) error {
	if jsonscan.IsNull(v) {
		*dst = nil
		return nil
	}
	x, err := read(key, v)
	if err != nil {
		return err
	}
	*dst = &x
	return nil
}

func decodeStringField(key string, v []byte, dst *string) error {
	return setVal(key, v, dst, readString)
}
func decodeStringPtr(key string, v []byte, dst **string) error {
	return setPtr(key, v, dst, readString)
}
func decodeBool(key string, v []byte, dst *bool) error     { return setVal(key, v, dst, readBool) }
func decodeBoolPtr(key string, v []byte, dst **bool) error { return setPtr(key, v, dst, readBool) }
func decodeUint32(key string, v []byte, dst *uint32) error { return setVal(key, v, dst, readUint32) }
func decodeFloat32Ptr(key string, v []byte, dst **float32) error {
	return setPtr(key, v, dst, readFloat32)
}

// decodeIntPtr reads an integer that fits T into a new *T, or nil for null.
func decodeIntPtr[T int | int32](key string, v []byte, dst **T) error {
	return setPtr(key, v, dst, func(key string, v []byte) (T, error) {
		lo, hi := int64(math.MinInt), int64(math.MaxInt)
		if _, narrow := any(*new(T)).(int32); narrow {
			lo, hi = math.MinInt32, math.MaxInt32
		}
		n, err := decodeInt(key, v, lo, hi)
		return T(n), err
	})
}

func readString(key string, v []byte) (string, error) {
	s, ok := unquote(v)
	if !ok {
		return "", typeError(key, "a string")
	}
	return s, nil
}

// unquote decodes a JSON string value; invalid UTF-8 becomes U+FFFD as encoding/json makes it (the
// engines' protobuf strings must be valid UTF-8).
func unquote(v []byte) (string, bool) {
	s, ok := jsonscan.Unquote(v)
	if ok && !utf8.ValidString(s) {
		ok = json.Unmarshal(v, &s) == nil
	}
	return s, ok
}

func readBool(key string, v []byte) (bool, error) {
	b, ok := jsonscan.ParseBool(v)
	if !ok {
		return false, typeError(key, "a boolean")
	}
	return b, nil
}

func readUint32(key string, v []byte) (uint32, error) {
	n, err := decodeInt(key, v, 0, math.MaxUint32)
	return uint32(n), err
}

// decodeInt reads an integral number within [lo, hi].
func decodeInt(key string, v []byte, lo, hi int64) (int64, error) {
	n, ok := jsonscan.ParseInt(v)
	if !ok || n < lo || n > hi {
		return 0, typeError(key, "an integer between "+strconv.FormatInt(lo, 10)+" and "+strconv.FormatInt(hi, 10))
	}
	return n, nil
}

func decodeUint32s(key string, v []byte, dst *[]uint32) error {
	if jsonscan.IsNull(v) {
		*dst = nil
		return nil
	}
	it := jsonscan.NewArrIter(v, 0)
	out := (*dst)[:0]
	for {
		s, e, ok := it.Next()
		if !ok {
			break
		}
		n, err := decodeInt(key, v[s:e], 0, math.MaxUint32)
		if err != nil {
			return err
		}
		out = append(out, uint32(n))
	}
	if it.Err != nil {
		return typeError(key, "an array of token ids")
	}
	if out == nil {
		out = []uint32{} // [] is an empty list, not an absent one
	}
	*dst = out
	return nil
}

func readFloat32(key string, v []byte) (float32, error) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, typeError(key, "a number")
	}
	f, err := strconv.ParseFloat(string(v), 32)
	if err != nil {
		return 0, typeError(key, "a number within float32's range")
	}
	return float32(f), nil
}
