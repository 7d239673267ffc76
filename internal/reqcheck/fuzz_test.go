package reqcheck

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"
)

// ranged are the numeric rules: what an accepted value must decode to.
var ranged = map[string]func(float64) bool{
	"temperature":        func(v float64) bool { return v >= 0 },
	"top_p":              func(v float64) bool { return v > 0 && v <= 1 },
	"min_p":              func(v float64) bool { return v >= 0 && v <= 1 },
	"presence_penalty":   func(v float64) bool { return v >= -2 && v <= 2 },
	"frequency_penalty":  func(v float64) bool { return v >= -2 && v <= 2 },
	"repetition_penalty": func(v float64) bool { return v > 0 },
	"top_k":              func(v float64) bool { return v >= -1 && v == math.Trunc(v) },
	"max_tokens":         func(v float64) bool { return v >= 1 && v == math.Trunc(v) },
	"min_tokens":         func(v float64) bool { return v >= 0 && v == math.Trunc(v) },
	"seed":               func(v float64) bool { return v == math.Trunc(v) },
}

// FuzzMember: a Checker never panics on any valid JSON value; what it accepts decodes (encoding/json) to
// what the rule promises the engines; what it refuses names a param and says why in valid UTF-8. The
// value walker agrees with encoding/json on the number of elements and members.
func FuzzMember(f *testing.F) {
	for _, s := range []struct{ key, val string }{
		{"temperature", `0.7`}, {"temperature", `-1`}, {"temperature", `"hot"`}, {"temperature", `1e400`},
		{"top_p", `1`}, {"top_p", `0`}, {"top_k", `-1`}, {"top_k", `2.0`}, {"max_tokens", `16`}, {"max_tokens", `0`},
		{"min_tokens", `3`}, {"seed", `9223372036854775807`}, {"seed", `1e19`}, {"stop", `["a","b"]`}, {"stop", `[1]`},
		{"stop_token_ids", `[1,2.0,3]`}, {"logit_bias", `{"1":-100,"2":"x"}`}, {"logit_bias", `{"\u0031":1,"a":2}`},
		{"tools", `[{"type":"function","function":{"name":"f","parameters":{"a":[1,{"b":"]"}]}}}]`},
		{"tools", `[{"function":{}}]`}, {"stream_options", `{"include_usage":true}`}, {"response_format", `{"type":"text"}`},
		{"logprobs", `true`}, {"top_logprobs", `-1`}, {"tool_choice", `"auto"`}, {"user", `"u"`}, {"echo", `false`},
		{"max_output_tokens", `1`}, {"dimensions", `8`},
		{"sampling_params", `{"temperature":0.5,"max_new_tokens":0,"min_new_tokens":0,"stop":"x"}`},
		{"sampling_params", `[{"top_p":0},null,{"repetition_penalty":3}]`},
	} {
		for api := Chat; api <= Generate; api++ {
			f.Add(uint8(api), s.key, []byte(s.val))
		}
	}
	f.Fuzz(func(t *testing.T, a uint8, key string, val []byte) {
		val = bytes.TrimSpace(val)
		if !json.Valid(val) {
			return
		}
		api := API(a%5) + Chat
		c := New(api)
		err := c.Member([]byte(key), val)
		if err == nil {
			err = c.Done()
		}
		if err != nil {
			if err.Param == "" || err.Message == "" || !utf8.ValidString(err.Message) {
				t.Fatalf("refusal without a param or a readable message: %+v", err)
			}
			return
		}
		var any_ any
		_ = json.Unmarshal(val, &any_)
		if any_ == nil {
			return
		}
		generation := api == Chat || api == Completions
		if ok, has := ranged[key]; has && generation {
			var v float64
			if json.Unmarshal(val, &v) != nil || math.IsInf(v, 0) || !ok(v) {
				t.Fatalf("%s accepted %s", key, val)
			}
		}
		switch {
		case key == "stop" && generation:
			var s string
			var l []string
			if json.Unmarshal(val, &s) != nil && json.Unmarshal(val, &l) != nil {
				t.Fatalf("stop accepted %s", val)
			}
		case key == "logit_bias" && generation:
			var m map[string]float64
			if json.Unmarshal(val, &m) != nil {
				t.Fatalf("logit_bias accepted %s", val)
			}
		case key == "tools" && api == Chat:
			var tl []struct {
				Function *struct {
					Name *string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(val, &tl) != nil {
				t.Fatalf("tools accepted %s", val)
			}
			for _, tool := range tl {
				if tool.Function == nil || tool.Function.Name == nil {
					t.Fatalf("tools accepted %s", val)
				}
			}
		}
		// The walker sees what encoding/json sees.
		switch x := any_.(type) {
		case []any:
			n := 0
			_ = elems(val, func(int, []byte) *Error { n++; return nil })
			if n != len(x) {
				t.Fatalf("elems counted %d of %d in %s", n, len(x), val)
			}
		case map[string]any:
			keys := map[string]bool{}
			_ = members(val, func(k, _ []byte) *Error {
				var s string
				if json.Unmarshal(k, &s) != nil {
					t.Fatalf("members returned key %s of %s", k, val)
				}
				keys[s] = true
				return nil
			})
			if len(keys) != len(x) {
				t.Fatalf("members saw %d distinct keys of %d in %s", len(keys), len(x), val)
			}
		}
	})
}
