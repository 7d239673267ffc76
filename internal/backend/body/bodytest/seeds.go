// Package bodytest holds the request bodies every fuzz target at the gateway's trust boundary starts
// from, so the body parser and the worker-protocol conversion are fuzzed from the same real shapes.
package bodytest

import (
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// RequestSeeds are bodies as the OpenAI SDKs, SGLang clients and vLLM clients send them.
var RequestSeeds = []struct {
	Route body.Route
	Body  string
}{
	{body.RouteChat, `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":16,"temperature":0.7}`},
	{body.RouteChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}],"stream":true,"stream_options":{"include_usage":true}}`},
	{body.RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"n":3,"logprobs":true,"top_logprobs":2,"stop":["\n"],"seed":7}`},
	{body.RouteChat, `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`},
	{body.RouteCompletions, `{"model":"m","prompt":"Once upon a time","max_tokens":32,"echo":false}`},
	{body.RouteCompletions, `{"model":"m","prompt":["a","b","c"],"n":2,"stream":true}`},
	{body.RouteCompletions, `{"model":"m","prompt":[[1,2,3],[4,5]],"max_tokens":4}`},
	{body.RouteCompletions, `{"model":"m","prompt":[101,2023,2003],"logprobs":2}`},
	{body.RouteGenerate, `{"text":"The capital of France is","sampling_params":{"max_new_tokens":8,"temperature":0}}`},
	{body.RouteGenerate, `{"text":["a","b"],"sampling_params":{"n":2},"return_logprob":true,"logprob_start_len":0,"stream":true}`},
	{body.RouteGenerate, `{"input_ids":[[1,2],[3,4]],"return_logprob":[true,false],"sampling_params":[{"max_new_tokens":2},{"max_new_tokens":3}]}`},
	{body.RouteGenerate, `{"model":"m","input_ids":[1,2,3],"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":12345}`},
	{body.RouteChat, `{"model":"m","model":"other","messages":[]}`},
	{body.RouteChat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}"},
	{body.RouteChat, `{"model":"m","messages":[],"extra":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`},
	{body.RouteChat, `{"model":"m","messages":[],"max_tokens":1e400}`},
	{body.RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.5,"top_p":1,"max_tokens":4,"min_tokens":2,"stop":["a"],"logit_bias":{"1":2},"seed":3}`},
	{body.RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":-1,"temperature":0.5,"top_p":"1"}`},
	{body.RouteCompletions, `{"model":"m","prompt":"x","max_tokens":0,"logprobs":true,"presence_penalty":3}`},
}

// AddRequestSeeds adds every seed as (route, body) to a fuzz target taking (uint8, []byte).
func AddRequestSeeds(f *testing.F) {
	for _, s := range RequestSeeds {
		f.Add(uint8(s.Route), []byte(s.Body))
	}
}

// FuzzRoute maps a fuzzed byte onto one of the generation routes.
func FuzzRoute(r uint8) body.Route {
	routes := []body.Route{body.RouteChat, body.RouteCompletions, body.RouteGenerate}
	return routes[int(r)%len(routes)]
}
