package sim

import (
	"slices"
	"testing"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// SGLang's servicer: return_logprob gives the output tokens' logprobs (streamed, each chunk its own;
// whole, all in the Complete), top_logprobs_num alternatives each, and from logprob_start_len 0 the
// prompt's, whose first token has none; without return_logprob, nothing.
func TestSGLangGRPCLogprobs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, Seed: 5})
	client := sglangpb.NewSglangSchedulerClient(grpcConn(t, e))
	const prompt = "one two three"
	promptIDs := appendTokens(nil, prompt)

	req := sglangReq("whole", prompt, 4, false)
	req.ReturnLogprob, req.TopLogprobsNum, req.LogprobStartLen = true, 2, 0
	_, whole, err := sglangRun(t.Context(), client, req)
	if err != nil {
		t.Fatal(err)
	}
	out := whole.GetOutputLogprobs()
	if !slices.Equal(out.GetTokenIds(), whole.GetOutputIds()) || len(out.GetTokenLogprobs()) != 4 || len(out.GetTopLogprobs()) != 4 {
		t.Fatalf("output logprobs %v for ids %v", out, whole.GetOutputIds())
	}
	for k, v := range out.GetTokenLogprobs() {
		top := out.GetTopLogprobs()[k]
		if v != simLogprob(k) || len(top.GetValues()) != 2 || top.GetTokenIds()[0] != out.GetTokenIds()[k] || top.GetValues()[0] != v {
			t.Errorf("position %d: %v, top %v", k, v, top)
		}
	}
	in := whole.GetInputLogprobs()
	if !slices.Equal(in.GetTokenIds(), promptIDs) || in.GetTokenLogprobs()[0].Value != nil || in.GetTokenLogprobs()[1].GetValue() != simLogprob(1) {
		t.Errorf("input logprobs %v", in)
	}

	req = sglangReq("streamed", prompt, 4, true)
	req.ReturnLogprob, req.LogprobStartLen = true, -1
	chunks, done, err := sglangRun(t.Context(), client, req)
	if err != nil {
		t.Fatal(err)
	}
	var vals []float32
	for _, ch := range chunks {
		if !slices.Equal(ch.GetOutputLogprobs().GetTokenIds(), ch.GetTokenIds()) || ch.GetInputLogprobs() != nil {
			t.Errorf("chunk %v", ch)
		}
		vals = append(vals, ch.GetOutputLogprobs().GetTokenLogprobs()...)
	}
	if !slices.Equal(vals, out.GetTokenLogprobs()) || done.GetOutputLogprobs() != nil {
		t.Errorf("streamed logprobs %v, want %v", vals, out.GetTokenLogprobs())
	}

	_, plain, err := sglangRun(t.Context(), client, sglangReq("plain", prompt, 2, false))
	if err != nil {
		t.Fatal(err)
	}
	if plain.GetOutputLogprobs() != nil || plain.GetInputLogprobs() != nil {
		t.Errorf("logprobs not asked for: %v", plain)
	}
}

// vLLM's servicer: sampling_params.logprobs gives the output tokens' logprobs with that many
// alternatives, prompt_logprobs the prompt's in the first chunk (or the Complete, not streamed).
func TestVLLMGRPCLogprobs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolVLLM, Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true})
	client := vllmpb.NewVllmEngineClient(grpcConn(t, e))
	const prompt = "vllm logprobs"
	k := int32(1)

	req := vllmReq("whole", prompt, 3, false)
	req.SamplingParams.Logprobs, req.SamplingParams.PromptLogprobs = &k, &k
	_, whole, err := vllmRun(t.Context(), client, req)
	if err != nil {
		t.Fatal(err)
	}
	out := whole.GetOutputLogprobs()
	if !slices.Equal(out.GetTokenIds(), whole.GetOutputIds()) || len(out.GetTopLogprobs()) != 3 || out.GetTokenLogprobs()[2] != simLogprob(2) {
		t.Fatalf("output logprobs %v for ids %v", out, whole.GetOutputIds())
	}
	if in := whole.GetInputLogprobs(); len(in.GetTokenIds()) != len(appendTokens(nil, prompt)) || in.GetTokenLogprobs()[0].Value != nil {
		t.Errorf("input logprobs %v", in)
	}

	req = vllmReq("streamed", prompt, 3, true)
	req.SamplingParams.Logprobs, req.SamplingParams.PromptLogprobs = &k, &k
	chunks, _, err := vllmRun(t.Context(), client, req)
	if err != nil {
		t.Fatal(err)
	}
	var vals []float32
	for i, ch := range chunks {
		if (ch.GetInputLogprobs() != nil) != (i == 0) {
			t.Errorf("chunk %d input logprobs %v", i, ch.GetInputLogprobs())
		}
		vals = append(vals, ch.GetOutputLogprobs().GetTokenLogprobs()...)
	}
	if !slices.Equal(vals, out.GetTokenLogprobs()) {
		t.Errorf("streamed logprobs %v, want %v", vals, out.GetTokenLogprobs())
	}
}
