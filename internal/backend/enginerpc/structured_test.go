package enginerpc

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// Structured output reaches each engine's own constraint field: OpenAI's response_format (json_schema,
// json_object), the top-level regex and ebnf of vLLM's and SGLang's OpenAI servers, and /generate's
// sampling_params. SGLang has no json_object: it gets the schema of any object.
func TestStructuredOutputConstraints(t *testing.T) {
	const schema = `{"type":"object","properties":{"a":{"type":"integer"}}}`
	const msgs = `"model":"m","messages":[{"role":"user","content":"x"}]`
	cases := []struct {
		name, path, body string
		sglang           proto.Message
		vllm             proto.Message
	}{
		{"json_schema", "/v1/chat/completions",
			`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":` + schema + `}}}`,
			&sglangpb.SamplingParams{Constraint: &sglangpb.SamplingParams_JsonSchema{JsonSchema: schema}},
			&vllmpb.SamplingParams{Constraint: &vllmpb.SamplingParams_JsonSchema{JsonSchema: schema}}},
		{"json_object", "/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"json_object"}}`,
			&sglangpb.SamplingParams{Constraint: &sglangpb.SamplingParams_JsonSchema{JsonSchema: `{"type":"object"}`}},
			&vllmpb.SamplingParams{Constraint: &vllmpb.SamplingParams_JsonObject{JsonObject: true}}},
		{"regex", "/v1/completions", `{"model":"m","prompt":"x","regex":"[0-9]+"}`,
			&sglangpb.SamplingParams{Constraint: &sglangpb.SamplingParams_Regex{Regex: "[0-9]+"}},
			&vllmpb.SamplingParams{Constraint: &vllmpb.SamplingParams_Regex{Regex: "[0-9]+"}}},
		{"ebnf", "/v1/chat/completions", `{` + msgs + `,"ebnf":"root ::= \"a\""}`,
			&sglangpb.SamplingParams{Constraint: &sglangpb.SamplingParams_EbnfGrammar{EbnfGrammar: `root ::= "a"`}},
			&vllmpb.SamplingParams{Constraint: &vllmpb.SamplingParams_Grammar{Grammar: `root ::= "a"`}}},
		{"generate json_schema", "/generate", `{"text":"x","sampling_params":{"json_schema":"{\"type\":\"string\"}"}}`,
			&sglangpb.SamplingParams{Constraint: &sglangpb.SamplingParams_JsonSchema{JsonSchema: `{"type":"string"}`}},
			&vllmpb.SamplingParams{Constraint: &vllmpb.SamplingParams_JsonSchema{JsonSchema: `{"type":"string"}`}}},
		{"generate regex", "/generate", `{"text":"x","sampling_params":{"regex":"a|b"}}`,
			&sglangpb.SamplingParams{Constraint: &sglangpb.SamplingParams_Regex{Regex: "a|b"}},
			&vllmpb.SamplingParams{Constraint: &vllmpb.SamplingParams_Regex{Regex: "a|b"}}},
		{"text is none", "/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"text"}}`,
			&sglangpb.SamplingParams{}, &vllmpb.SamplingParams{}},
	}
	for _, p := range []enginegrpc.Protocol{enginegrpc.SGLang, enginegrpc.VLLM} {
		f := newFake("1")
		tr, url := setup(t, p, f)
		for i, tc := range cases {
			resp := post(t, tr, t.Context(), url, tc.path, tc.body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s %s: status %d", p, tc.name, resp.StatusCode)
			}
			var got, want proto.Message
			if p == enginegrpc.SGLang {
				got = &sglangpb.SamplingParams{Constraint: f.sglang[i].GetSamplingParams().GetConstraint()}
				want = tc.sglang
			} else {
				got = &vllmpb.SamplingParams{Constraint: f.vllm[i].GetSamplingParams().GetConstraint()}
				want = tc.vllm
			}
			if !proto.Equal(got, want) {
				t.Errorf("%s %s: constraint %v, want %v", p, tc.name, got, want)
			}
		}
	}
}

// TestStructuredOutputFieldsRefused: vLLM's structured_outputs and guided_* fields are a 400 naming the
// field, not dropped (the answer would be unconstrained), and no Generate reaches the engine.
func TestStructuredOutputFieldsRefused(t *testing.T) {
	const msgs = `"model":"m","messages":[{"role":"user","content":"x"}]`
	f := newFake("1")
	tr, url := setup(t, enginegrpc.VLLM, f)
	for _, field := range []string{"structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"} {
		value := `"x"`
		if field == "structured_outputs" {
			value = `{"regex":"[0-9]+"}`
		}
		resp := post(t, tr, t.Context(), url, "/v1/chat/completions", `{`+msgs+`,"`+field+`":`+value+`}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"`+field+`"`) {
			t.Errorf("%s: %d %s; want a 400 naming it", field, resp.StatusCode, b)
		}
	}
	// null is absent, as for every optional field.
	resp := post(t, tr, t.Context(), url, "/v1/chat/completions", `{`+msgs+`,"structured_outputs":null}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(f.vllm) != 1 {
		t.Errorf("structured_outputs null: %d, %d Generate calls; want it served", resp.StatusCode, len(f.vllm))
	}
}
