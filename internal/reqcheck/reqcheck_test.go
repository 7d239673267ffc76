package reqcheck

import (
	"strings"
	"testing"
)

// member is one top-level field of a test body, in order.
type kv struct{ key, val string }

func check(api API, fields ...kv) *Error {
	c := New(api)
	for _, f := range fields {
		if err := c.Member([]byte(f.key), []byte(f.val)); err != nil {
			return err
		}
	}
	return c.Done()
}

// TestRefused: one row per rule, each naming the field in param and saying what is wrong.
func TestRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		api       API
		fields    []kv
		wantParam string
		wantMsg   string
	}{
		{"temperature a string", Chat, []kv{{"temperature", `"0.5"`}}, "temperature", "temperature must be a number, got a string"},
		{"temperature negative", Chat, []kv{{"temperature", `-0.1`}}, "temperature", "at least 0, got -0.1"},
		{"temperature infinite", Completions, []kv{{"temperature", `1e400`}}, "temperature", "must be a finite number"},
		{"top_p zero", Chat, []kv{{"top_p", `0`}}, "top_p", "top_p must be in (0, 1], got 0"},
		{"top_p above one", Completions, []kv{{"top_p", `1.5`}}, "top_p", "in (0, 1]"},
		{"top_p a bool", Chat, []kv{{"top_p", `true`}}, "top_p", "must be a number, got a boolean"},
		{"min_p above one", Chat, []kv{{"min_p", `1.01`}}, "min_p", "min_p must be in [0, 1]"},
		{"presence_penalty below", Chat, []kv{{"presence_penalty", `-2.5`}}, "presence_penalty", "in [-2, 2], got -2.5"},
		{"frequency_penalty above", Completions, []kv{{"frequency_penalty", `3`}}, "frequency_penalty", "in [-2, 2], got 3"},
		{"frequency_penalty an array", Chat, []kv{{"frequency_penalty", `[1]`}}, "frequency_penalty", "must be a number, got an array"},
		{"repetition_penalty zero", Chat, []kv{{"repetition_penalty", `0`}}, "repetition_penalty", "greater than 0"},
		{"top_k below -1", Chat, []kv{{"top_k", `-2`}}, "top_k", "top_k must be at least -1, got -2"},
		{"top_k fractional", Chat, []kv{{"top_k", `2.5`}}, "top_k", "top_k must be an integer, got 2.5"},
		{"max_tokens zero", Chat, []kv{{"max_tokens", `0`}}, "max_tokens", "max_tokens must be at least 1, got 0"},
		{"max_tokens negative", Completions, []kv{{"max_tokens", `-5`}}, "max_tokens", "at least 1, got -5"},
		{"max_tokens a string", Completions, []kv{{"max_tokens", `"16"`}}, "max_tokens", "must be an integer, got a string"},
		{"max_completion_tokens zero", Chat, []kv{{"max_completion_tokens", `0`}}, "max_completion_tokens", "at least 1"},
		{"min_tokens negative", Chat, []kv{{"min_tokens", `-1`}}, "min_tokens", "at least 0"},
		{"min_tokens above max_tokens", Completions, []kv{{"min_tokens", `10`}, {"max_tokens", `5`}}, "min_tokens",
			"min_tokens must be at most max_tokens (5), got 10"},
		{"min_tokens above max_completion_tokens", Chat, []kv{{"max_tokens", `50`}, {"max_completion_tokens", `5`}, {"min_tokens", `10`}},
			"min_tokens", "at most max_completion_tokens (5)"},
		{"seed fractional", Chat, []kv{{"seed", `1.5`}}, "seed", "seed must be an integer"},
		{"seed a string", Completions, []kv{{"seed", `"7"`}}, "seed", "must be an integer, got a string"},
		{"seed beyond int64", Chat, []kv{{"seed", `1e30`}}, "seed", "must be an integer"},
		{"stop a number", Chat, []kv{{"stop", `5`}}, "stop", "stop must be a string or an array of strings, got a number"},
		{"stop list with a number", Completions, []kv{{"stop", `["a", 1]`}}, "stop[1]", "stop[1] must be a string, got a number"},
		{"stop_token_ids not a list", Chat, []kv{{"stop_token_ids", `7`}}, "stop_token_ids", "an array of integers"},
		{"stop_token_ids with a string", Chat, []kv{{"stop_token_ids", `[1,"2"]`}}, "stop_token_ids[1]", "must be an integer, got a string"},
		{"logit_bias a list", Chat, []kv{{"logit_bias", `[1]`}}, "logit_bias", "an object mapping token ids to numbers, got an array"},
		{"logit_bias a word key", Completions, []kv{{"logit_bias", `{"hello": 1}`}}, "logit_bias", `keys must be token ids (integers), got "hello"`},
		{"logit_bias a string value", Chat, []kv{{"logit_bias", `{"50256": "-100"}`}}, "logit_bias", "values must be numbers, got a string"},
		{"chat logprobs a number", Chat, []kv{{"logprobs", `1`}}, "logprobs", "logprobs must be a boolean, got a number"},
		{"completions logprobs a bool", Completions, []kv{{"logprobs", `true`}}, "logprobs", "must be an integer, got a boolean"},
		{"completions logprobs below -1", Completions, []kv{{"logprobs", `-2`}}, "logprobs", "at least -1"},
		{"top_logprobs below -1", Chat, []kv{{"top_logprobs", `-3`}}, "top_logprobs", "at least -1"},
		{"top_logprobs a string", Chat, []kv{{"top_logprobs", `"2"`}}, "top_logprobs", "must be an integer, got a string"},
		{"stream_options a bool", Chat, []kv{{"stream_options", `true`}}, "stream_options", "stream_options must be an object, got a boolean"},
		{"include_usage a string", Completions, []kv{{"stream_options", `{"include_usage":"yes"}`}}, "stream_options.include_usage", "must be a boolean"},
		{"response_format a string", Chat, []kv{{"response_format", `"json"`}}, "response_format", "must be an object, got a string"},
		{"response_format without type", Chat, []kv{{"response_format", `{"json_schema":{}}`}}, "response_format.type", "is required"},
		{"tools an object", Chat, []kv{{"tools", `{"type":"function"}`}}, "tools", "tools must be an array, got an object"},
		{"tools element a string", Chat, []kv{{"tools", `["f"]`}}, "tools[0]", "tools[0] must be an object, got a string"},
		{"tool without function", Chat, []kv{{"tools", `[{"type":"function"}]`}}, "tools[0].function", "tools[0].function is required"},
		{"tool function a string", Chat, []kv{{"tools", `[{"type":"function","function":"f"}]`}}, "tools[0].function", "must be an object"},
		{"tool without name", Chat, []kv{{"tools", `[{"function":{"name":"a"}},{"function":{"parameters":{}}}]`}}, "tools[1].function.name", "is required"},
		{"tool name a number", Chat, []kv{{"tools", `[{"function":{"name":7}}]`}}, "tools[0].function.name", "must be a string, got a number"},
		{"tool type a number", Chat, []kv{{"tools", `[{"type":1,"function":{"name":"f"}}]`}}, "tools[0].type", "must be a string"},
		{"tool_choice a number", Chat, []kv{{"tool_choice", `1`}}, "tool_choice", "a string or an object, got a number"},
		{"user a number", Chat, []kv{{"user", `42`}}, "user", "user must be a string, got a number"},
		{"echo a string", Completions, []kv{{"echo", `"true"`}}, "echo", "echo must be a boolean, got a string"},
		{"responses max_output_tokens zero", Responses, []kv{{"max_output_tokens", `0`}}, "max_output_tokens", "at least 1"},
		{"responses top_p a string", Responses, []kv{{"top_p", `"1"`}}, "top_p", "must be a number"},
		{"responses tools a string", Responses, []kv{{"tools", `"x"`}}, "tools", "must be an array"},
		{"embeddings dimensions fractional", Embeddings, []kv{{"dimensions", `1.5`}}, "dimensions", "must be an integer"},
		{"embeddings encoding_format a number", Embeddings, []kv{{"encoding_format", `1`}}, "encoding_format", "must be a string"},
		{"generate sampling_params a string", Generate, []kv{{"sampling_params", `"x"`}}, "sampling_params", "an object or an array of objects"},
		{"generate temperature negative", Generate, []kv{{"sampling_params", `{"temperature":-1}`}}, "sampling_params.temperature", "at least 0"},
		{"generate max_new_tokens negative", Generate, []kv{{"sampling_params", `{"max_new_tokens":-5}`}}, "sampling_params.max_new_tokens", "at least 0, got -5"},
		{"generate min above max", Generate, []kv{{"sampling_params", `{"min_new_tokens":4,"max_new_tokens":2}`}}, "sampling_params.min_new_tokens", "at most max_new_tokens (2)"},
		{"generate repetition_penalty above 2", Generate, []kv{{"sampling_params", `{"repetition_penalty":2.5}`}}, "sampling_params.repetition_penalty", "in (0, 2]"},
		{"generate list element", Generate, []kv{{"sampling_params", `[{"top_p":0.5},{"top_p":0}]`}}, "sampling_params[1].top_p", "in (0, 1]"},
		{"generate list element a number", Generate, []kv{{"sampling_params", `[1]`}}, "sampling_params[0]", "must be an object"},
		{"generate stop a number", Generate, []kv{{"sampling_params", `{"stop":[1]}`}}, "sampling_params.stop[0]", "must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := check(tt.api, tt.fields...)
			if err == nil {
				t.Fatalf("accepted %v", tt.fields)
			}
			if err.Param != tt.wantParam || !strings.Contains(err.Message, tt.wantMsg) {
				t.Fatalf("got param %q message %q, want param %q message containing %q", err.Param, err.Message, tt.wantParam, tt.wantMsg)
			}
		})
	}
}

// TestAccepted: the edges of each range, the values one engine accepts and the other does not, null,
// and fields reqcheck has no rule for all pass.
func TestAccepted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		api    API
		fields []kv
	}{
		{"temperature 0", Chat, []kv{{"temperature", `0`}}},
		{"temperature above 2 (SGLang takes it)", Chat, []kv{{"temperature", `2.5`}}},
		{"temperature exponent", Completions, []kv{{"temperature", `7E-1`}}},
		{"top_p 1", Chat, []kv{{"top_p", `1`}}},
		{"top_p tiny", Chat, []kv{{"top_p", `1e-9`}}},
		{"min_p edges", Chat, []kv{{"min_p", `0`}, {"top_p", `1.0`}}},
		{"penalties at the edges", Completions, []kv{{"presence_penalty", `-2`}, {"frequency_penalty", `2.0`}}},
		{"repetition_penalty above 2 (vLLM takes it)", Chat, []kv{{"repetition_penalty", `3`}}},
		{"top_k -1 and 0 (vLLM's off)", Chat, []kv{{"top_k", `-1`}}},
		{"top_k 0", Chat, []kv{{"top_k", `0`}}},
		{"top_k 2.0 (pydantic reads an int)", Chat, []kv{{"top_k", `2.0`}}},
		{"max_tokens 1", Chat, []kv{{"max_tokens", `1`}}},
		{"max_tokens huge (the engine judges the context)", Completions, []kv{{"max_tokens", `100000000`}}},
		{"min_tokens equal to max_tokens", Chat, []kv{{"max_tokens", `5`}, {"min_tokens", `5`}}},
		{"min_tokens without max_tokens", Chat, []kv{{"min_tokens", `500`}}},
		{"min_tokens under max_completion_tokens", Chat, []kv{{"max_tokens", `1`}, {"max_completion_tokens", `10`}, {"min_tokens", `5`}}},
		{"seed negative", Chat, []kv{{"seed", `-1`}}},
		{"seed int64 edges", Chat, []kv{{"seed", `9223372036854775807`}}},
		{"stop string", Chat, []kv{{"stop", `"\n"`}}},
		{"stop empty list", Completions, []kv{{"stop", `[]`}}},
		{"stop empty string (SGLang takes it)", Chat, []kv{{"stop", `[""]`}}},
		{"logit_bias", Chat, []kv{{"logit_bias", `{"50256": -100, " 7 ": 1.5, "-3": 0, "1_0": 2}`}}},
		{"logit_bias escaped key", Chat, []kv{{"logit_bias", `{"\u0031": 1}`}}},
		{"logit_bias beyond 100 (vLLM clamps)", Chat, []kv{{"logit_bias", `{"1": 1000}`}}},
		{"chat logprobs", Chat, []kv{{"logprobs", `true`}, {"top_logprobs", `20`}}},
		{"top_logprobs -1 (vLLM's all)", Chat, []kv{{"logprobs", `true`}, {"top_logprobs", `-1`}}},
		{"completions logprobs", Completions, []kv{{"logprobs", `5`}}},
		{"stream_options", Chat, []kv{{"stream_options", `{"include_usage":true,"continuous_usage_stats":true}`}}},
		{"response_format", Chat, []kv{{"response_format", `{"type":"json_schema","json_schema":{"name":"x","schema":{}}}`}}},
		{"tools", Chat, []kv{{"tools", `[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`}, {"tool_choice", `"auto"`}}},
		{"tools empty", Chat, []kv{{"tools", `[]`}}},
		{"named tool_choice", Chat, []kv{{"tool_choice", `{"type":"function","function":{"name":"f"}}`}}},
		{"tools on completions (not a completions field)", Completions, []kv{{"tools", `"anything"`}}},
		{"null everywhere", Chat, []kv{{"temperature", `null`}, {"max_tokens", `null`}, {"stop", `null`}, {"tools", `null`}, {"logit_bias", `null`}}},
		{"unknown fields", Chat, []kv{{"chat_template_kwargs", `{"enable_thinking":false}`}, {"my_extra", `"x"`}, {"separate_reasoning", `1`}}},
		{"responses", Responses, []kv{{"temperature", `1`}, {"max_output_tokens", `16`}, {"tools", `[{"type":"function","name":"f"}]`}}},
		{"embeddings", Embeddings, []kv{{"dimensions", `256`}, {"encoding_format", `"float"`}}},
		{"generate", Generate, []kv{{"sampling_params", `{"max_new_tokens":0,"temperature":0,"n":2,"top_k":0,"json_schema":"{}","custom_params":{"a":1}}`}}},
		{"generate list", Generate, []kv{{"sampling_params", `[{"max_new_tokens":2},null,{"max_new_tokens":3,"temperature":null}]`}}},
		{"generate top-level temperature is not a /generate field", Generate, []kv{{"temperature", `"hot"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := check(tt.api, tt.fields...); err != nil {
				t.Fatalf("refused %v: param %q: %s", tt.fields, err.Param, err.Message)
			}
		})
	}
}

func TestMessages(t *testing.T) {
	t.Parallel()
	if err := Role(2, []byte(`1`)); err == nil || err.Param != "messages[2].role" || err.Message != "messages[2].role must be a string, got a number" {
		t.Errorf("Role(number) = %+v", err)
	}
	if err := Content(0, []byte(`{"text":"x"}`)); err == nil || err.Param != "messages[0].content" {
		t.Errorf("Content(object) = %+v", err)
	}
	if err := ContentPart(1, 3, []byte(`"hi"`)); err == nil || err.Param != "messages[1].content[3]" {
		t.Errorf("ContentPart(string) = %+v", err)
	}
	if err := MessageDone(4, false); err == nil || err.Param != "messages[4].role" || !strings.Contains(err.Message, "required") {
		t.Errorf("MessageDone(no role) = %+v", err)
	}
	for _, ok := range []string{`"hi"`, `[]`, `null`, `[{"type":"text","text":"x"}]`} {
		if err := Content(0, []byte(ok)); err != nil {
			t.Errorf("Content(%s) = %v", ok, err)
		}
	}
	if Role(0, []byte(`"user"`)) != nil || ContentPart(0, 0, []byte(`{}`)) != nil || MessageDone(0, true) != nil {
		t.Error("a good message was refused")
	}
}
