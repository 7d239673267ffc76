package reqcheck

import "testing"

// benchMembers are the sampling members of internal/backend's BenchmarkParseRequestSampling body, as
// its scanner hands them over: this is reqcheck's share of that parse.
var benchMembers = []kv{
	{"temperature", `0.7`}, {"top_p", `0.9`}, {"top_k", `40`}, {"max_tokens", `256`}, {"min_tokens", `1`},
	{"presence_penalty", `0.1`}, {"frequency_penalty", `0.2`}, {"seed", `1234`}, {"stop", `["\n\n","User:"]`},
	{"logit_bias", `{"50256":-100,"11":2.5}`}, {"stream_options", `{"include_usage":true}`},
	{"tools", `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`},
	{"response_format", `{"type":"json_object"}`}, {"user", `"u-1"`}, {"model", `"m"`}, {"stream", `true`},
}

func BenchmarkChecker(b *testing.B) {
	keys := make([][]byte, len(benchMembers))
	vals := make([][]byte, len(benchMembers))
	for i, m := range benchMembers {
		keys[i], vals[i] = []byte(m.key), []byte(m.val)
	}
	b.ReportAllocs()
	for b.Loop() {
		c := New(Chat)
		for i := range keys {
			if err := c.Member(keys[i], vals[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.Done(); err != nil {
			b.Fatal(err)
		}
	}
}
