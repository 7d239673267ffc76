package enginerpc

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	"github.com/sluicegw/sluice/gen/trtllm/trtllmpbconnect"
	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// trtllmFake is the fake engine behind TensorRT-LLM's service, as its servicer answers
// (tensorrt_llm/grpc/smg/servicer.py): chunks with the new ids and the cumulative count, a Complete
// with every output id even when streaming, the end id left out of the output with no matched stop.
// n > 1: every sequence's chunks (the last index first, so that a client must sort them), then one
// Complete per sequence, all at the end, as the servicer sends them once the request has finished.
// Logprobs: each chunk its tokens' TokenLogprobs, each Complete all of its sequence's and the
// prompt's (the first entry 0, the servicer's value for a token its dictionary lacks).
type trtllmFake struct {
	trtllmpbconnect.UnimplementedTrtllmServiceHandler
	f *fakeEngine
}

func (v trtllmFake) Generate(ctx context.Context, req *trtllmpb.GenerateRequest, st *connect.ServerStream[trtllmpb.GenerateResponse]) error {
	f := v.f
	f.mu.Lock()
	f.trtllm = append(f.trtllm, req)
	f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	prompt := uint32(len(req.GetTokenized().GetInputTokenIds()))
	maxTokens := req.GetMaxTokens()
	oc := req.GetOutputConfig()
	n := max(int(req.GetSamplingConfig().GetNumReturnSequences()), 1)
	var dones []*trtllmpb.GenerateComplete
	for i := n - 1; i >= 0; i-- {
		ids, finish := f.output(&maxTokens, i, n)
		if finish == "stop" {
			ids = ids[:len(ids)-1] // the end id is not output
		}
		err := f.run(ctx, req.GetStreaming(), ids, func(c []uint32, sent int) error {
			ch := &trtllmpb.GenerateStreamChunk{TokenIds: c, SequenceIndex: uint32(i), PromptTokens: prompt, CompletionTokens: uint32(sent), CachedTokens: f.cached}
			if oc.Logprobs != nil {
				ch.Logprobs = trtllmOutLP(c, sent-len(c), int(oc.GetLogprobs()))
			}
			return st.Send(&trtllmpb.GenerateResponse{RequestId: req.GetRequestId(), Response: &trtllmpb.GenerateResponse_Chunk{Chunk: ch}})
		})
		if err != nil {
			return err
		}
		done := &trtllmpb.GenerateComplete{OutputTokenIds: ids, SequenceIndex: uint32(i), FinishReason: finish, PromptTokens: prompt,
			CompletionTokens: uint32(len(ids)), CachedTokens: f.cached}
		if oc.Logprobs != nil {
			done.Logprobs = trtllmOutLP(ids, 0, int(oc.GetLogprobs()))
		}
		if oc.PromptLogprobs != nil && !f.noInLP {
			for j, id := range req.GetTokenized().GetInputTokenIds() {
				e := &trtllmpb.TokenLogprob{TokenId: id}
				if j > 0 {
					e.Logprob = -0.5
				}
				done.PromptLogprobs = append(done.PromptLogprobs, e)
			}
		}
		dones = append(dones, done)
	}
	for _, done := range dones {
		if err := st.Send(&trtllmpb.GenerateResponse{RequestId: req.GetRequestId(), Response: &trtllmpb.GenerateResponse_Complete{Complete: done}}); err != nil {
			return err
		}
	}
	return nil
}

// trtllmOutLP is the fake's logprobs of ids from position from with k alternatives, each entry's
// dictionary listed worst first (the servicer promises no order) and holding the sampled token even
// when k is 0, as TensorRT-LLM's does.
func trtllmOutLP(ids []uint32, from, k int) []*trtllmpb.TokenLogprob {
	var out []*trtllmpb.TokenLogprob
	for i, id := range ids {
		e := &trtllmpb.TokenLogprob{TokenId: id, Logprob: fakeLP(from + i)}
		vals, tids := fakeTop(id, from+i, max(k, 1))
		for j := len(vals) - 1; j >= 0; j-- {
			e.TopLogprobs = append(e.TopLogprobs, &trtllmpb.TopLogprob{TokenId: tids[j], Logprob: vals[j]})
		}
		out = append(out, e)
	}
	return out
}

func (v trtllmFake) Abort(_ context.Context, req *trtllmpb.AbortRequest) (*trtllmpb.AbortResponse, error) {
	v.f.recordAbort(req.GetRequestId())
	return &trtllmpb.AbortResponse{Success: true}, nil
}

func (f *fakeEngine) trtllmRequests() []*trtllmpb.GenerateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.trtllm)
}

// The request the engine gets: the rendered chat's ids, TensorRT-LLM's defaults where the client gave
// nothing (temperature, top_p, repetition_penalty 1.0 rather than proto3's zeros; the Rust gateway's
// max_tokens, capped by the sequence length), one beam and sequence, the input left out of the
// output; the answer is the reply with the engine's counts, vLLM's stop_reason null for the end id.
func TestTRTLLMChatDefaults(t *testing.T) {
	f := newFake("hi there")
	tr, url := setupEngine(t, f, Engine{Protocol: enginegrpc.TRTLLM, Tokenizer: testTokenizer(t), EOS: []int{imEnd}, Model: "m", ContextLength: 100})
	got := decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/chat/completions", chatBody))
	if c := got.Choices[0]; c.Message.Content != "hi there" || *c.FinishReason != "stop" || string(c.StopReason) != "null" || c.MatchedStop != nil {
		t.Errorf("choice = %+v (stop_reason %s, matched_stop %s)", c, c.StopReason, c.MatchedStop)
	}
	req := f.trtllmRequests()[0]
	promptLen := len(testTokenizer(t).Encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"))
	if u := got.Usage; u == nil || u.PromptTokens != promptLen || u.CompletionTokens != len("hi there") {
		t.Errorf("usage = %+v, want %d prompt and %d completion tokens (the engine's)", got.Usage, promptLen, len("hi there"))
	}
	p := req.GetSamplingConfig()
	if p.Temperature == nil || p.GetTemperature() != 1 || p.TopP == nil || p.GetTopP() != 1 || p.GetRepetitionPenalty() != 1 ||
		p.TopK != nil || p.Seed != nil || p.MinP != nil || p.PresencePenalty != nil || p.FrequencyPenalty != nil || p.MinTokens != nil ||
		p.GetBeamWidth() != 1 || p.GetNumReturnSequences() != 1 {
		t.Errorf("sampling config = %v", p)
	}
	if req.GetMaxTokens() != uint32(100-promptLen) || req.GetStreaming() || req.GetRequestId() != "r1" ||
		!req.GetOutputConfig().GetExcludeInputFromOutput() || req.GuidedDecoding != nil {
		t.Errorf("request = %v, want max_tokens %d (the sequence left after the prompt)", req, 100-promptLen)
	}

	// Completions default to 16 tokens; explicit values pass through, top_k -1 is TensorRT-LLM's 0.
	decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/completions", `{"model":"m","prompt":"hello"}`))
	if m := f.trtllmRequests()[1].GetMaxTokens(); m != 16 {
		t.Errorf("completions max_tokens = %d, want 16", m)
	}
	decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/completions",
		`{"model":"m","prompt":"hello","max_tokens":5,"temperature":0,"top_p":0.5,"top_k":-1,"seed":-1,"min_p":0.1,"presence_penalty":0.2,"frequency_penalty":0.3,"min_tokens":2,"ignore_eos":true}`))
	p = f.trtllmRequests()[2].GetSamplingConfig()
	if p.GetTemperature() != 0 || p.GetTopP() != 0.5 || p.TopK == nil || p.GetTopK() != 0 || p.GetSeed() != ^uint64(0) ||
		p.GetMinP() != 0.1 || p.GetPresencePenalty() != 0.2 || p.GetFrequencyPenalty() != 0.3 || p.GetMinTokens() != 2 ||
		f.trtllmRequests()[2].GetMaxTokens() != 5 || !f.trtllmRequests()[2].GetIgnoreEos() {
		t.Errorf("sampling config = %v", p)
	}
}

// Stop and bad words go to the engine as strings and ids (it tokenizes the strings itself); a
// constraint is a guide; include_stop_str_in_output keeps the stop in the engine's output.
func TestTRTLLMWordsAndGuides(t *testing.T) {
	f := newFake("ok")
	tr, url := setup(t, enginegrpc.TRTLLM, f)
	decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":"zz","stop_token_ids":[7],"bad":["darn","heck"],"bad_token_ids":[9],"include_stop_str_in_output":true,"regex":"o.*"}`))
	req := f.trtllmRequests()[0]
	if !slices.Equal(req.GetStop(), []string{"zz"}) || !slices.Equal(req.GetStopTokenIds(), []uint32{7}) ||
		!slices.Equal(req.GetBad(), []string{"darn", "heck"}) || !slices.Equal(req.GetBadTokenIds(), []uint32{9}) ||
		!req.GetIncludeStopTokenInOutput() {
		t.Errorf("request words = %v", req)
	}
	if g := req.GetGuidedDecoding(); g.GetGuideType() != trtllmpb.GuidedDecodingParams_GUIDE_TYPE_REGEX || g.GetGuide() != "o.*" {
		t.Errorf("guide = %v", g)
	}
	for body, want := range map[string]trtllmpb.GuidedDecodingParams_GuideType{
		`"response_format":{"type":"json_object"}`: trtllmpb.GuidedDecodingParams_GUIDE_TYPE_JSON_SCHEMA,
		`"ebnf":"root ::= \"ok\""`:                 trtllmpb.GuidedDecodingParams_GUIDE_TYPE_EBNF_GRAMMAR,
	} {
		n := len(f.trtllmRequests())
		decode[chatResponse](t, post(t, tr, t.Context(), url, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],`+body+`}`))
		if g := f.trtllmRequests()[n].GetGuidedDecoding(); g.GetGuideType() != want || g.GetGuide() == "" {
			t.Errorf("%s: guide = %v, want %s with its text (the servicer ignores an empty guide)", body, g, want)
		}
	}
	resp := post(t, tr, t.Context(), url, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"bad":7}`)
	if got := decode[chatResponse](t, resp); resp.StatusCode != http.StatusBadRequest || got.Error == nil || got.Error.Param != "bad" {
		t.Errorf("bad 7: status %d, %+v", resp.StatusCode, got.Error)
	}
}

// A streamed answer: the chunks' cumulative counts and the Complete that repeats every id make the
// same text and usage as the unary answer, not the text twice.
func TestTRTLLMStream(t *testing.T) {
	f := newFake("héllo wörld")
	tr, url := setup(t, enginegrpc.TRTLLM, f)
	events := sseEvents(t, post(t, tr, t.Context(), url, "/v1/completions",
		`{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true},"max_tokens":50}`))
	var text strings.Builder
	for _, e := range events[:len(events)-2] {
		for _, c := range decodeString[chatResponse](t, e).Choices {
			text.WriteString(c.Text)
		}
	}
	u := decodeString[chatResponse](t, events[len(events)-2])
	if text.String() != "héllo wörld" || u.Usage == nil || u.Usage.CompletionTokens != len("héllo wörld") || events[len(events)-1] != "[DONE]" {
		t.Errorf("text %q, usage chunk %s", text.String(), events[len(events)-2])
	}
	if !f.trtllmRequests()[0].GetStreaming() {
		t.Error("the engine was not asked to stream")
	}
}

// A client that goes away mid-stream is TensorRT-LLM's Abort of the request id.
func TestTRTLLMClosedStreamAborts(t *testing.T) {
	f := newFake("a long answer")
	f.hold = true
	tr, url := setup(t, enginegrpc.TRTLLM, f)
	resp := post(t, tr, t.Context(), url, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`)
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := f.aborts(); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("aborts = %q, want [r1]", got)
	}
}

// /generate with return_logprob over TensorRT-LLM: output_config asks for the alternatives and the
// prompt's logprobs, which the engine sends for the whole prompt; the answer shows them from
// logprob_start_len (the first prompt token null), and the output's as SGLang's HTTP server does.
func TestTRTLLMGenerateLogprobs(t *testing.T) {
	f := newFake("ok")
	tr, url := setup(t, enginegrpc.TRTLLM, f)
	type meta struct {
		Meta struct {
			In   [][]any   `json:"input_token_logprobs"`
			Out  [][]any   `json:"output_token_logprobs"`
			OTop [][][]any `json:"output_top_logprobs"`
		} `json:"meta_info"`
	}
	m := decode[meta](t, post(t, tr, t.Context(), url, "/generate", `{"text":"abc","return_logprob":true,"top_logprobs_num":1}`)).Meta
	if len(m.In) != 3 || m.In[0][0] != nil || m.In[1][0] != -0.5 || m.In[1][1] != float64('b') {
		t.Errorf("input_token_logprobs = %v", m.In)
	}
	if len(m.Out) != 2 || m.Out[0][1] != float64('o') || !close32(m.Out[1][0].(float64), -0.2) || len(m.OTop) != 2 || len(m.OTop[0]) != 1 {
		t.Errorf("output_token_logprobs = %v, top %v", m.Out, m.OTop)
	}
	if oc := f.trtllmRequests()[0].GetOutputConfig(); oc.Logprobs == nil || oc.GetLogprobs() != 1 || oc.GetPromptLogprobs() != 1 {
		t.Errorf("output config = %v", oc)
	}
	m = decode[meta](t, post(t, tr, t.Context(), url, "/generate", `{"text":"abc","return_logprob":true,"logprob_start_len":2}`)).Meta
	if len(m.In) != 1 || m.In[0][0] != -0.5 || m.In[0][1] != float64('c') {
		t.Errorf("from logprob_start_len 2: input_token_logprobs = %v", m.In)
	}
}
