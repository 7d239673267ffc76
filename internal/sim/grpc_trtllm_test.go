package sim

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
)

// trtllmRun sends a Generate and collects its chunks and its Complete.
func trtllmRun(ctx context.Context, c trtllmpb.TrtllmServiceClient, req *trtllmpb.GenerateRequest) ([]*trtllmpb.GenerateStreamChunk, *trtllmpb.GenerateComplete, error) {
	stream, err := c.Generate(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var chunks []*trtllmpb.GenerateStreamChunk
	var done *trtllmpb.GenerateComplete
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, done, nil
		}
		if err != nil {
			return chunks, done, err
		}
		if ch := msg.GetChunk(); ch != nil {
			chunks = append(chunks, ch)
		}
		if c := msg.GetComplete(); c != nil {
			done = c
		}
	}
}

// trtllmReq is a greedy request for the prompt's tokens.
func trtllmReq(rid, prompt string, maxTokens uint32, stream bool) *trtllmpb.GenerateRequest {
	temp := float32(0)
	return &trtllmpb.GenerateRequest{RequestId: rid, Streaming: stream, MaxTokens: maxTokens,
		SamplingConfig: &trtllmpb.SamplingConfig{BeamWidth: 1, NumReturnSequences: 1, Temperature: &temp},
		Tokenized:      &trtllmpb.TokenizedInput{InputTokenIds: appendTokens(nil, prompt)}}
}

func TestTRTLLMGRPCGenerate(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolTRTLLM, Mode: ModeInstant, InstantOutputTokens: 32, DefaultMaxTokens: 12,
		GRPC: true, Models: []string{"trt-sim"}, ContextLength: 2048})
	client := trtllmpb.NewTrtllmServiceClient(grpcConn(t, e))
	const prompt = "tensorrt speaks grpc"
	promptLen := uint32(len(appendTokens(nil, prompt)))

	_, whole, err := trtllmRun(t.Context(), client, trtllmReq("whole", prompt, 5, false))
	if err != nil {
		t.Fatal(err)
	}
	if whole.GetFinishReason() != "length" || len(whole.GetOutputTokenIds()) != 5 || whole.GetCompletionTokens() != 5 ||
		whole.GetPromptTokens() != promptLen || whole.GetMatchedStop() != nil {
		t.Fatalf("unstreamed complete %v, want 5 ids, length, prompt %d", whole, promptLen)
	}

	t.Run("streamed, cumulative counts, cumulative complete", func(t *testing.T) {
		chunks, done, err := trtllmRun(t.Context(), client, trtllmReq("streamed", prompt, 5, true))
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint32
		for i, ch := range chunks {
			if len(ch.GetTokenIds()) != 1 || ch.GetCompletionTokens() != uint32(i+1) || ch.GetPromptTokens() != promptLen {
				t.Errorf("chunk %d = %v, want one new id and the count so far", i, ch)
			}
			ids = append(ids, ch.GetTokenIds()...)
		}
		if !slices.Equal(ids, whole.GetOutputTokenIds()) {
			t.Errorf("streamed ids %v, want the greedy output %v", ids, whole.GetOutputTokenIds())
		}
		if done.GetFinishReason() != "length" || done.GetCompletionTokens() != 5 || !slices.Equal(done.GetOutputTokenIds(), ids) {
			t.Errorf("complete %v, want every output id", done)
		}
	})

	t.Run("a cap past the model's answer ends at its EOS", func(t *testing.T) {
		_, done, err := trtllmRun(t.Context(), client, trtllmReq("long", prompt, 2000, false))
		if err != nil {
			t.Fatal(err)
		}
		if done.GetFinishReason() != "stop" || len(done.GetOutputTokenIds()) != 12 || done.GetMatchedStop() != nil {
			t.Errorf("complete %v, want stop after the model's 12 tokens, no matched stop (the end id)", done)
		}
		req := trtllmReq("ignore", prompt, 20, false)
		req.IgnoreEos = true
		if _, done, err = trtllmRun(t.Context(), client, req); err != nil || done.GetFinishReason() != "length" || done.GetCompletionTokens() != 20 {
			t.Errorf("ignore_eos: %v, %v; want 20 tokens and length", done, err)
		}
	})

	t.Run("unset temperature is 1.0, not proto3's 0", func(t *testing.T) {
		a := trtllmReq("t1", prompt, 8, false)
		a.SamplingConfig.Temperature = nil
		seed := uint64(7)
		a.SamplingConfig.Seed = &seed
		b := trtllmReq("t2", prompt, 8, false)
		_, sampled, err1 := trtllmRun(t.Context(), client, a)
		_, greedy, err2 := trtllmRun(t.Context(), client, b)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if slices.Equal(sampled.GetOutputTokenIds(), greedy.GetOutputTokenIds()) {
			t.Errorf("an unset temperature answered the greedy output %v", greedy.GetOutputTokenIds())
		}
	})

	t.Run("refusals", func(t *testing.T) {
		_, _, err := trtllmRun(t.Context(), client, &trtllmpb.GenerateRequest{RequestId: "none", MaxTokens: 3})
		wantCode(t, err, codes.InvalidArgument, "Missing tokenized input")
		req := trtllmReq("beams", prompt, 3, false)
		req.SamplingConfig.BeamWidth = 2
		_, _, err = trtllmRun(t.Context(), client, req)
		wantCode(t, err, codes.Unimplemented, "beam_width")
		req = trtllmReq("ctx", prompt, 1, false)
		req.DisaggregatedParams = &trtllmpb.DisaggregatedParams{RequestType: trtllmpb.DisaggregatedParams_REQUEST_TYPE_CONTEXT_ONLY}
		_, _, err = trtllmRun(t.Context(), client, req)
		wantCode(t, err, codes.Unimplemented, "REQUEST_TYPE_CONTEXT_ONLY")
	})

	t.Run("model, server info, health", func(t *testing.T) {
		info, err := client.GetModelInfo(t.Context(), &trtllmpb.GetModelInfoRequest{})
		if err != nil || info.GetModelId() != "trt-sim" || info.GetMaxSeqLen() != 2048 {
			t.Errorf("model info %v, %v", info, err)
		}
		si, err := client.GetServerInfo(t.Context(), &trtllmpb.GetServerInfoRequest{})
		if err != nil || si.GetBackend() != "tensorrt-llm" || si.GetWorldSize() != 1 {
			t.Errorf("server info %v, %v", si, err)
		}
		h, err := client.HealthCheck(t.Context(), &trtllmpb.HealthCheckRequest{})
		if err != nil || h.GetStatus() != "OK" {
			t.Errorf("health %v, %v", h, err)
		}
	})
}

// A stop string cuts the output and is reported as matched.
func TestTRTLLMGRPCStop(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolTRTLLM, Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, ByteTokenIDs: true})
	client := trtllmpb.NewTrtllmServiceClient(grpcConn(t, e))
	_, whole, err := trtllmRun(t.Context(), client, trtllmReq("w", "stop me", 10, false))
	if err != nil {
		t.Fatal(err)
	}
	text := string(toBytes(whole.GetOutputTokenIds()))
	if len(text) < 4 {
		t.Fatalf("output %q too short to cut", text)
	}
	stop := text[2:4]
	req := trtllmReq("s", "stop me", 10, false)
	req.Stop = []string{stop}
	_, done, err := trtllmRun(t.Context(), client, req)
	if err != nil {
		t.Fatal(err)
	}
	got := string(toBytes(done.GetOutputTokenIds()))
	if done.GetFinishReason() != "stop" || done.GetMatchedStopStr() != stop || strings.Contains(got, stop) || !strings.HasPrefix(text, got) {
		t.Errorf("complete %v (text %q), want %q cut at %q", done, got, text, stop)
	}
}

func toBytes(ids []uint32) []byte {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return b
}

// An Abort ends a running Generate: the stream completes "cancelled" and the engine frees the request.
func TestTRTLLMGRPCAbort(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolTRTLLM, GRPC: true, ITLBase: 5 * time.Millisecond})
	client := trtllmpb.NewTrtllmServiceClient(grpcConn(t, e))
	stream, err := client.Generate(t.Context(), trtllmReq("long", "keep talking", 5000, true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if r, err := client.Abort(t.Context(), &trtllmpb.AbortRequest{RequestId: "long"}); err != nil || !r.GetSuccess() {
		t.Fatalf("abort %v, %v", r, err)
	}
	var done *trtllmpb.GenerateComplete
	for done == nil {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended with %v before its Complete", err)
		}
		done = msg.GetComplete()
	}
	if done.GetFinishReason() != "cancelled" {
		t.Errorf("complete %v, want cancelled", done)
	}
	if r, err := client.Abort(t.Context(), &trtllmpb.AbortRequest{RequestId: "long"}); err != nil || r.GetSuccess() || r.GetMessage() != "Request long not found" {
		t.Errorf("second abort %v, %v; want not found", r, err)
	}
	waitIdle(t, e)
}

// TensorRT-LLM's protocol is gRPC-only and regular-only in the simulator.
func TestTRTLLMConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Protocol: ProtocolTRTLLM}, {Protocol: ProtocolTRTLLM, GRPC: true, Role: RolePrefill}} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "trtllm") {
			t.Errorf("%+v: error %v, want a refusal naming trtllm", cfg, err)
		}
	}
}

// n > 1 and logprobs as TensorRT-LLM's servicer sends them: every chunk tagged with its
// sequence_index and carrying its tokens' TokenLogprobs; then, after every chunk, one Complete per
// sequence with all of its ids and logprobs and the prompt's (the first prompt token without one).
func TestTRTLLMGRPCSamplesAndLogprobs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolTRTLLM, Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, Seed: 3})
	client := trtllmpb.NewTrtllmServiceClient(grpcConn(t, e))
	const prompt = "three ways to say it"
	promptIDs := appendTokens(nil, prompt)
	req := trtllmReq("n3", prompt, 4, true)
	temp, k := float32(1), int32(2)
	req.SamplingConfig.Temperature, req.SamplingConfig.NumReturnSequences = &temp, 3
	req.OutputConfig = &trtllmpb.OutputConfig{ExcludeInputFromOutput: true, Logprobs: &k, PromptLogprobs: &k}
	stream, err := client.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	streamed := map[uint32][]uint32{}
	streamedLP := map[uint32][]*trtllmpb.TokenLogprob{}
	var completes []*trtllmpb.GenerateComplete
	for {
		msg, err := stream.Recv()
		if err != nil {
			break
		}
		if ch := msg.GetChunk(); ch != nil {
			if len(completes) > 0 {
				t.Errorf("chunk %v after a Complete: the servicer sends the Completes once every sequence has finished", ch)
			}
			streamed[ch.GetSequenceIndex()] = append(streamed[ch.GetSequenceIndex()], ch.GetTokenIds()...)
			streamedLP[ch.GetSequenceIndex()] = append(streamedLP[ch.GetSequenceIndex()], ch.GetLogprobs()...)
		}
		if d := msg.GetComplete(); d != nil {
			completes = append(completes, d)
		}
	}
	if len(completes) != 3 || len(streamed) != 3 {
		t.Fatalf("%d completes, chunks of %d sequences; want 3 and 3", len(completes), len(streamed))
	}
	for i, d := range completes {
		idx := d.GetSequenceIndex()
		if idx != uint32(i) || d.GetFinishReason() != "length" || !slices.Equal(d.GetOutputTokenIds(), streamed[idx]) {
			t.Errorf("complete %d = %v, want sequence %d with the streamed ids %v", i, d, i, streamed[idx])
		}
		lps := d.GetLogprobs()
		if len(lps) != len(d.GetOutputTokenIds()) || len(streamedLP[idx]) != len(lps) {
			t.Fatalf("sequence %d: %d logprobs in the Complete, %d streamed, for %d ids", idx, len(lps), len(streamedLP[idx]), len(d.GetOutputTokenIds()))
		}
		for j, l := range lps {
			top := l.GetTopLogprobs()
			if l.GetTokenId() != d.GetOutputTokenIds()[j] || l.GetLogprob() >= 0 || len(top) != 2 || top[0].GetTokenId() != l.GetTokenId() ||
				top[0].GetLogprob() != l.GetLogprob() || streamedLP[idx][j].GetLogprob() != l.GetLogprob() {
				t.Errorf("sequence %d logprob %d = %v (streamed %v)", idx, j, l, streamedLP[idx][j])
			}
		}
		pl := d.GetPromptLogprobs()
		if len(pl) != len(promptIDs) || pl[0].GetLogprob() != 0 || len(pl[0].GetTopLogprobs()) != 0 || pl[1].GetLogprob() >= 0 || pl[1].GetTokenId() != promptIDs[1] {
			t.Errorf("sequence %d prompt logprobs %v", idx, pl)
		}
	}
	if slices.Equal(streamed[0], streamed[1]) && slices.Equal(streamed[1], streamed[2]) {
		t.Errorf("three sampled sequences are equal: %v", streamed[0])
	}

	// logprobs 0: the sampled token's alone, which is the dictionary's one entry; no prompt logprobs
	// unless asked.
	zero := int32(0)
	req = trtllmReq("k0", prompt, 3, false)
	req.OutputConfig = &trtllmpb.OutputConfig{Logprobs: &zero}
	_, done, err := trtllmRun(t.Context(), client, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(done.GetLogprobs()) != 3 || len(done.GetLogprobs()[0].GetTopLogprobs()) != 1 || done.GetPromptLogprobs() != nil {
		t.Errorf("logprobs 0: %v", done)
	}
	// Not asked: none.
	if _, done, err = trtllmRun(t.Context(), client, trtllmReq("none", prompt, 3, false)); err != nil || done.GetLogprobs() != nil {
		t.Errorf("no logprobs asked: %v, %v", done, err)
	}
}
