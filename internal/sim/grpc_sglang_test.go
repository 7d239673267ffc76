package sim

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
)

// sglangRun sends a Generate and collects its chunks and its Complete.
func sglangRun(ctx context.Context, c sglangpb.SglangSchedulerClient, req *sglangpb.GenerateRequest) ([]*sglangpb.GenerateStreamChunk, *sglangpb.GenerateComplete, error) {
	stream, err := c.Generate(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var chunks []*sglangpb.GenerateStreamChunk
	var done *sglangpb.GenerateComplete
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

// sglangReq is a greedy request for the prompt's tokens; maxNew < 0 leaves max_new_tokens unset.
func sglangReq(rid, prompt string, maxNew int, stream bool) *sglangpb.GenerateRequest {
	sp := &sglangpb.SamplingParams{Temperature: 0, TopP: 1, TopK: -1, RepetitionPenalty: 1}
	if maxNew >= 0 {
		m := uint32(maxNew)
		sp.MaxNewTokens = &m
	}
	return &sglangpb.GenerateRequest{RequestId: rid, Stream: stream, SamplingParams: sp,
		Tokenized: &sglangpb.TokenizedInput{OriginalText: prompt, InputIds: appendTokens(nil, prompt)}}
}

func TestSGLangGRPCGenerate(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, Seed: 5})
	client := sglangpb.NewSglangSchedulerClient(grpcConn(t, e))
	const prompt = "the quick brown fox jumps over"
	promptLen := uint32(len(appendTokens(nil, prompt)))

	// Not streamed: one Complete with every id, as the reference for the runs below (greedy).
	_, whole, err := sglangRun(t.Context(), client, sglangReq("whole", prompt, 6, false))
	if err != nil {
		t.Fatal(err)
	}
	if whole.GetFinishReason() != "length" || len(whole.GetOutputIds()) != 6 || whole.GetCompletionTokens() != 6 || whole.GetPromptTokens() != promptLen {
		t.Fatalf("unstreamed complete %v, want 6 ids, length, prompt %d", whole, promptLen)
	}

	t.Run("streamed", func(t *testing.T) {
		chunks, done, err := sglangRun(t.Context(), client, sglangReq("streamed", prompt, 6, true))
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint32
		for i, ch := range chunks {
			if len(ch.GetTokenIds()) != 1 || ch.GetCompletionTokens() != uint32(i+1) || ch.GetPromptTokens() != promptLen {
				t.Errorf("chunk %d = %v, want one id, cumulative count %d", i, ch, i+1)
			}
			ids = append(ids, ch.GetTokenIds()...)
		}
		if !slices.Equal(ids, whole.GetOutputIds()) {
			t.Errorf("streamed ids %v, want the greedy output %v", ids, whole.GetOutputIds())
		}
		if done.GetFinishReason() != "length" || done.GetCompletionTokens() != 6 || done.GetPromptTokens() != promptLen ||
			!slices.Equal(done.GetOutputIds(), ids[len(ids)-1:]) {
			t.Errorf("complete %v, want length, 6 tokens, the last chunk's ids", done)
		}
	})

	t.Run("natural stop", func(t *testing.T) {
		_, done, err := sglangRun(t.Context(), client, sglangReq("eos", prompt, -1, false))
		if err != nil {
			t.Fatal(err)
		}
		if done.GetFinishReason() != "stop" || done.GetMatchedTokenId() != eosTokenID || done.GetCompletionTokens() != uint32(e.Config().DefaultMaxTokens) {
			t.Errorf("complete %v, want stop on the EOS after %d tokens", done, e.Config().DefaultMaxTokens)
		}
	})

	t.Run("stop token", func(t *testing.T) {
		ids := whole.GetOutputIds()
		k := 1
		for k < len(ids) && slices.Contains(ids[:k], ids[k]) {
			k++
		}
		if k == len(ids) {
			t.Fatalf("no fresh id in %v", ids)
		}
		req := sglangReq("stop", prompt, 6, false)
		req.SamplingParams.StopTokenIds = []uint32{ids[k]}
		_, done, err := sglangRun(t.Context(), client, req)
		if err != nil {
			t.Fatal(err)
		}
		if done.GetFinishReason() != "stop" || done.GetMatchedTokenId() != ids[k] || !slices.Equal(done.GetOutputIds(), ids[:k+1]) {
			t.Errorf("complete %v, want stop at %d with ids %v", done, ids[k], ids[:k+1])
		}
	})

	t.Run("proto zero top_p is refused", func(t *testing.T) {
		req := sglangReq("zero", prompt, 4, false)
		req.SamplingParams.TopP = 0
		_, _, err := sglangRun(t.Context(), client, req)
		wantCode(t, err, codes.InvalidArgument, "top_p")
	})

	t.Run("no tokenized input", func(t *testing.T) {
		_, _, err := sglangRun(t.Context(), client, &sglangpb.GenerateRequest{RequestId: "none"})
		wantCode(t, err, codes.InvalidArgument, "Tokenized input must be provided")
	})
}

// TestSGLangGRPCAbort: an Abort RPC and a cancelled stream both end the engine's request.
func TestSGLangGRPCAbort(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{GRPC: true, ITLBase: 5 * time.Millisecond})
	client := sglangpb.NewSglangSchedulerClient(grpcConn(t, e))

	t.Run("abort rpc", func(t *testing.T) {
		stream, err := client.Generate(t.Context(), sglangReq("long-1", "a long answer please", 5000, true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		if st := e.Stats(); st.Running != 1 {
			t.Fatalf("running %d during the generation, want 1", st.Running)
		}
		ab, err := client.Abort(t.Context(), &sglangpb.AbortRequest{RequestId: "long-1"})
		if err != nil || !ab.GetSuccess() {
			t.Fatalf("abort = %v, %v", ab, err)
		}
		var done *sglangpb.GenerateComplete
		for done == nil {
			msg, err := stream.Recv()
			if err != nil {
				t.Fatalf("stream ended with %v before its Complete", err)
			}
			done = msg.GetComplete()
		}
		if done.GetFinishReason() != "abort" || done.GetCompletionTokens() == 0 || done.GetCompletionTokens() >= 5000 {
			t.Errorf("complete %v, want abort with the tokens so far", done)
		}
		waitIdle(t, e)
		if ab, _ := client.Abort(t.Context(), &sglangpb.AbortRequest{RequestId: "long-1"}); ab.GetSuccess() {
			t.Errorf("abort of a finished request = %v, want not found", ab)
		}
	})

	t.Run("cancelled stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stream, err := client.Generate(ctx, sglangReq("long-2", "another long answer", 5000, true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel()
		waitIdle(t, e)
	})
}

// TestSGLangGRPCPD: both legs at once with the same bootstrap params pair over the rendezvous; a
// decode whose prefill never comes times out as over HTTP; a PD engine refuses a request without a room.
func TestSGLangGRPCPD(t *testing.T) {
	t.Parallel()
	p := startEngine(t, Config{Role: RolePrefill, GRPC: true, Seed: 3})
	d := startEngine(t, Config{Role: RoleDecode, GRPC: true, Seed: 3})
	prefill := sglangpb.NewSglangSchedulerClient(grpcConn(t, p))
	decode := sglangpb.NewSglangSchedulerClient(grpcConn(t, d))
	const prompt = "disaggregated over grpc"
	bs := func(room int32) *sglangpb.DisaggregatedParams {
		return &sglangpb.DisaggregatedParams{BootstrapHost: "127.0.0.1", BootstrapPort: int32(p.BootstrapPort()), BootstrapRoom: room}
	}

	t.Run("pair", func(t *testing.T) {
		dreq := sglangReq("pd-1", prompt, 5, true)
		dreq.DisaggregatedParams = bs(4242)
		// The decode leg goes first and waits in the transfer queue, as GetLoads reports.
		var wg sync.WaitGroup
		var chunks []*sglangpb.GenerateStreamChunk
		var ddone *sglangpb.GenerateComplete
		var derr error
		wg.Go(func() { chunks, ddone, derr = sglangRun(t.Context(), decode, dreq) })
		waitFor(t, "the decode to wait for its KV", func() bool {
			loads, err := decode.GetLoads(t.Context(), &sglangpb.GetLoadsRequest{})
			return err == nil && loads.GetLoads()[0].GetDisaggregation().GetDecodeTransferQueueReqs() == 1
		})
		preq := sglangReq("pd-1", prompt, 5, false)
		preq.DisaggregatedParams = bs(4242)
		_, pdone, perr := sglangRun(t.Context(), prefill, preq)
		wg.Wait()
		if perr != nil || derr != nil {
			t.Fatalf("prefill %v, decode %v", perr, derr)
		}
		if pdone.GetCompletionTokens() != 1 || len(pdone.GetOutputIds()) != 1 {
			t.Errorf("prefill complete %v, want the one token SGLang's prefill runs", pdone)
		}
		if len(chunks) != 5 || ddone.GetFinishReason() != "length" || ddone.GetCompletionTokens() != 5 {
			t.Errorf("decode: %d chunks, complete %v; want 5 and length", len(chunks), ddone)
		}
		if st := d.Stats(); st.RecomputedPrompts != 0 || st.BootstrapWaits != 1 {
			t.Errorf("decode stats %+v, want the KV received over the rendezvous", st)
		}
		loads, err := decode.GetLoads(t.Context(), &sglangpb.GetLoadsRequest{Include: []string{"disagg"}})
		if err != nil || loads.GetLoads()[0].GetDisaggregation().GetMode() != "decode" || loads.GetLoads()[0].GetQueues() != nil {
			t.Errorf("loads %v, %v: want the decode's disaggregation section only", loads, err)
		}
	})

	t.Run("decode without its prefill", func(t *testing.T) {
		d2 := startEngine(t, Config{Role: RoleDecode, GRPC: true, BootstrapTimeout: 150 * time.Millisecond})
		req := sglangReq("lonely", prompt, 5, true)
		req.DisaggregatedParams = bs(99)
		_, _, err := sglangRun(t.Context(), sglangpb.NewSglangSchedulerClient(grpcConn(t, d2)), req)
		wantCode(t, err, codes.Internal, "KVPoll.WaitingForInput")
		if st := d2.Stats(); st.BootstrapTimeouts != 1 {
			t.Errorf("bootstrap timeouts %d, want 1", st.BootstrapTimeouts)
		}
	})

	t.Run("no room", func(t *testing.T) {
		_, _, err := sglangRun(t.Context(), decode, sglangReq("roomless", prompt, 5, false))
		wantCode(t, err, codes.InvalidArgument, "without bootstrap room id")
	})
}
