package sim

import (
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// A JSON constraint makes the output one JSON object ended by the EOS (SGLang: matched_token_id), or
// cut by the length cap before it closes; the constraint is recorded by its proto field; a schema
// that is not JSON is refused. Byte-token mode: the output ids are the text's bytes.
func TestGRPCStructuredJSONObject(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, ByteTokenIDs: true})
	client := sglangpb.NewSglangSchedulerClient(grpcConn(t, e))
	req := sglangReq("json", "give me json", 16, false)
	req.SamplingParams.Constraint = &sglangpb.SamplingParams_JsonSchema{JsonSchema: `{"type":"object"}`}
	_, done, err := sglangRun(t.Context(), client, req)
	if err != nil {
		t.Fatal(err)
	}
	text := string(toBytes(done.GetOutputIds()))
	var obj map[string]string
	if json.Unmarshal([]byte(text), &obj) != nil || obj["text"] == "" || done.GetFinishReason() != "stop" ||
		done.GetMatchedTokenId() != eosTokenID || done.GetCompletionTokens() != objectWords+2 {
		t.Fatalf("constrained output %q, complete %v; want one JSON object of %d tokens ended by the EOS", text, done, objectWords+2)
	}
	if st := e.Stats(); st.Constrained != 1 || *st.LastConstraint != (Constraint{"json_schema", `{"type":"object"}`}) {
		t.Errorf("stats %d, %+v", st.Constrained, st.LastConstraint)
	}

	req = sglangReq("short", "give me json", 2, false)
	req.SamplingParams.Constraint = &sglangpb.SamplingParams_Regex{Regex: "a+"}
	if _, done, err = sglangRun(t.Context(), client, req); err != nil || done.GetFinishReason() != "length" {
		t.Fatalf("regex: %v, %v", err, done)
	}
	if st := e.Stats(); *st.LastConstraint != (Constraint{"regex", "a+"}) {
		t.Errorf("last constraint %+v, want the regex", st.LastConstraint)
	}

	req = sglangReq("bad", "give me json", 4, false)
	req.SamplingParams.Constraint = &sglangpb.SamplingParams_JsonSchema{JsonSchema: `{nope`}
	if _, _, err = sglangRun(t.Context(), client, req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("schema that is not JSON: %v; want INVALID_ARGUMENT", err)
	}
}

// vLLM's json_object is recorded as such and honoured like a schema; a length cap shorter than the
// object truncates it.
func TestGRPCStructuredVLLMJSONObject(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolVLLM, Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, ByteTokenIDs: true})
	client := vllmpb.NewVllmEngineClient(grpcConn(t, e))
	for _, tc := range []struct {
		max    uint32
		finish string
	}{{16, "stop"}, {2, "length"}} {
		req := vllmReq("obj", "json please", tc.max, false)
		req.SamplingParams.Constraint = &vllmpb.SamplingParams_JsonObject{JsonObject: true}
		_, done, err := vllmRun(t.Context(), client, req)
		if err != nil {
			t.Fatal(err)
		}
		text := string(toBytes(done.GetOutputIds()))
		if done.GetFinishReason() != tc.finish || (tc.finish == "stop") != json.Valid([]byte(text)) || text[0] != '{' {
			t.Errorf("max %d: output %q, finish %q; want %s", tc.max, text, done.GetFinishReason(), tc.finish)
		}
	}
	if st := e.Stats(); st.Constrained != 2 || *st.LastConstraint != (Constraint{"json_object", "true"}) {
		t.Errorf("stats %d, %+v", st.Constrained, st.LastConstraint)
	}
}

// SGLang's input logprobs start at logprob_start_len, the first without a value; a start past the
// prompt is refused.
func TestSGLangGRPCLogprobStartLen(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, ByteTokenIDs: true})
	client := sglangpb.NewSglangSchedulerClient(grpcConn(t, e))
	req := sglangReq("lp", "abcdef", 2, false)
	req.Tokenized.InputIds = []uint32{'a', 'b', 'c', 'd', 'e', 'f'}
	req.ReturnLogprob, req.LogprobStartLen = true, 2
	_, done, err := sglangRun(t.Context(), client, req)
	if err != nil {
		t.Fatal(err)
	}
	in := done.GetInputLogprobs()
	if string(toBytes(in.GetTokenIds())) != "cdef" || len(in.GetTokenLogprobs()) != 4 || in.GetTokenLogprobs()[0].Value != nil ||
		in.GetTokenLogprobs()[1].GetValue() != simLogprob(3) {
		t.Errorf("input logprobs from 2: %v", in)
	}
	req.RequestId, req.LogprobStartLen = "past", 6
	if _, _, err = sglangRun(t.Context(), client, req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("logprob_start_len past the prompt: %v; want INVALID_ARGUMENT", err)
	}
}
