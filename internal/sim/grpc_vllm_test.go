package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// vllmRun sends a Generate and collects its chunks and its Complete.
func vllmRun(ctx context.Context, c vllmpb.VllmEngineClient, req *vllmpb.GenerateRequest) ([]*vllmpb.GenerateStreamChunk, *vllmpb.GenerateComplete, error) {
	stream, err := c.Generate(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var chunks []*vllmpb.GenerateStreamChunk
	var done *vllmpb.GenerateComplete
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

// vllmReq is a greedy request for the prompt's tokens with max_tokens set.
func vllmReq(rid, prompt string, maxTokens uint32, stream bool) *vllmpb.GenerateRequest {
	temp := float32(0)
	return &vllmpb.GenerateRequest{RequestId: rid, Stream: stream,
		SamplingParams: &vllmpb.SamplingParams{Temperature: &temp, MaxTokens: &maxTokens},
		Input:          &vllmpb.GenerateRequest_Tokenized{Tokenized: &vllmpb.TokenizedInput{InputIds: appendTokens(nil, prompt)}}}
}

func TestVLLMGRPCGenerate(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolVLLM, Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, DPSize: 2})
	client := vllmpb.NewVllmEngineClient(grpcConn(t, e))
	const prompt = "vllm speaks grpc too"
	promptLen := uint32(len(appendTokens(nil, prompt)))

	_, whole, err := vllmRun(t.Context(), client, vllmReq("whole", prompt, 5, false))
	if err != nil {
		t.Fatal(err)
	}
	if whole.GetFinishReason() != "length" || len(whole.GetOutputIds()) != 5 || whole.GetCompletionTokens() != 5 || whole.GetPromptTokens() != promptLen {
		t.Fatalf("unstreamed complete %v, want 5 ids, length, prompt %d", whole, promptLen)
	}

	t.Run("streamed deltas", func(t *testing.T) {
		chunks, done, err := vllmRun(t.Context(), client, vllmReq("streamed", prompt, 5, true))
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint32
		for i, ch := range chunks {
			if len(ch.GetTokenIds()) != 1 || ch.GetCompletionTokens() != 1 || ch.GetPromptTokens() != promptLen {
				t.Errorf("chunk %d = %v, want one id and its delta count", i, ch)
			}
			ids = append(ids, ch.GetTokenIds()...)
		}
		if !slices.Equal(ids, whole.GetOutputIds()) {
			t.Errorf("streamed ids %v, want the greedy output %v", ids, whole.GetOutputIds())
		}
		// DELTA mode: the Complete carries the last output's ids and their count.
		if done.GetFinishReason() != "length" || done.GetCompletionTokens() != 1 || !slices.Equal(done.GetOutputIds(), ids[len(ids)-1:]) {
			t.Errorf("complete %v, want length with the last delta", done)
		}
	})

	t.Run("max_tokens 0 refused", func(t *testing.T) {
		_, _, err := vllmRun(t.Context(), client, vllmReq("zero", prompt, 0, false))
		wantCode(t, err, codes.InvalidArgument, "max_tokens")
	})

	t.Run("data_parallel_rank", func(t *testing.T) {
		req := vllmReq("rank", prompt, 3, false)
		r := int32(1)
		req.DataParallelRank = &r
		if _, _, err := vllmRun(t.Context(), client, req); err != nil {
			t.Fatal(err)
		}
		if st := e.Stats(); st.Ranks[1].Requests == 0 {
			t.Errorf("rank 1 ran %d requests, want the pinned one", st.Ranks[1].Requests)
		}
		r = 2
		_, _, err := vllmRun(t.Context(), client, req)
		wantCode(t, err, codes.InvalidArgument, "data_parallel_rank 2 is out of range [0, 2).")
	})

	t.Run("loads and server info", func(t *testing.T) {
		loads, err := client.GetLoads(t.Context(), &vllmpb.GetLoadsRequest{})
		if err != nil || loads.GetDpRankCount() != 1 || len(loads.GetLoads()) != 1 {
			t.Errorf("loads %v, %v: want one entry, as vLLM's servicer reports", loads, err)
		}
		info, err := client.GetServerInfo(t.Context(), &vllmpb.GetServerInfoRequest{})
		if err != nil || info.GetServerType() != "vllm-grpc" || info.GetDataParallelSize() != 2 || info.GetKvConnector() != "" {
			t.Errorf("server info %v, %v", info, err)
		}
	})
}

func TestVLLMGRPCAbort(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolVLLM, GRPC: true, ITLBase: 5 * time.Millisecond})
	client := vllmpb.NewVllmEngineClient(grpcConn(t, e))
	stream, err := client.Generate(t.Context(), vllmReq("long", "keep talking", 5000, true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Abort(t.Context(), &vllmpb.AbortRequest{RequestIds: []string{"unknown", "long"}}); err != nil {
		t.Fatal(err)
	}
	var done *vllmpb.GenerateComplete
	for done == nil {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended with %v before its Complete", err)
		}
		done = msg.GetComplete()
	}
	if done.GetFinishReason() != "abort" {
		t.Errorf("complete %v, want abort", done)
	}
	waitIdle(t, e)
}

// TestVLLMGRPCNIXL: the prefill (max_tokens 1, do_remote_decode) answers the NIXL params in
// kv_transfer_params_json; the decode given them pulls the KV instead of recomputing, once.
func TestVLLMGRPCNIXL(t *testing.T) {
	t.Parallel()
	p := startEngine(t, Config{Protocol: ProtocolVLLM, Role: RolePrefill, GRPC: true})
	d := startEngine(t, Config{Protocol: ProtocolVLLM, Role: RoleDecode, GRPC: true})
	prefill := vllmpb.NewVllmEngineClient(grpcConn(t, p))
	decode := vllmpb.NewVllmEngineClient(grpcConn(t, d))
	const prompt = "a prompt whose kv moves between engines"

	preq := vllmReq("nixl-1", prompt, 1, false)
	asked := `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`
	preq.KvTransferParamsJson = &asked
	_, pdone, err := vllmRun(t.Context(), prefill, preq)
	if err != nil {
		t.Fatal(err)
	}
	var kv kvParams
	if err := json.Unmarshal([]byte(pdone.GetKvTransferParamsJson()), &kv); err != nil {
		t.Fatalf("prefill complete %v: kv_transfer_params_json: %v", pdone, err)
	}
	if pdone.GetFinishReason() != "length" || !kv.DoRemotePrefill || len(kv.RemoteBlockIDs) == 0 || kv.RemotePort == nil || *kv.RemotePort != p.Port() ||
		kv.RemoteEngineID == nil || *kv.RemoteEngineID != p.ID() {
		t.Fatalf("prefill complete %v, want NIXL params naming %s on port %d", pdone, p.ID(), p.Port())
	}
	if legacy := pdone.GetKvTransferParams(); legacy.GetRemoteHost() != "127.0.0.1" || legacy.GetRemotePort() != uint32(p.Port()) {
		t.Errorf("typed kv_transfer_params %v, want the host and port mirrored", legacy)
	}

	dreq := vllmReq("nixl-1", prompt, 4, true)
	given := pdone.GetKvTransferParamsJson()
	dreq.KvTransferParamsJson = &given
	chunks, ddone, err := vllmRun(t.Context(), decode, dreq)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 4 || ddone.GetFinishReason() != "length" {
		t.Errorf("decode: %d chunks, complete %v; want 4 and length", len(chunks), ddone)
	}
	if st := d.Stats(); st.RecomputedPrompts != 0 {
		t.Errorf("decode recomputed %d prompts, want the KV pulled", st.RecomputedPrompts)
	}
	// The blocks were pulled: the same params again find nothing.
	_, _, err = vllmRun(t.Context(), decode, dreq)
	wantCode(t, err, codes.Internal, "KV transfer from the prefill engine failed")

	bad := "[1,2]"
	dreq.KvTransferParamsJson = &bad
	_, _, err = vllmRun(t.Context(), decode, dreq)
	wantCode(t, err, codes.InvalidArgument, "kv_transfer_params_json must be a JSON object")
}

// TestVLLMGRPCMooncake: Mooncake's legs run at once with the same transfer_id; the decode pulls from
// the prefill's bootstrap server, and the prefill's Complete carries no parameters.
func TestVLLMGRPCMooncake(t *testing.T) {
	t.Parallel()
	p := startEngine(t, Config{Protocol: ProtocolVLLM, KVConnector: ConnectorMooncake, Role: RolePrefill, GRPC: true, EngineID: "mc"})
	d := startEngine(t, Config{Protocol: ProtocolVLLM, KVConnector: ConnectorMooncake, Role: RoleDecode, GRPC: true})
	const prompt = "mooncake moves this prompt"
	preq := vllmReq("mc-1", prompt, 1, false)
	pkv := `{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":"xfer-mc-1"}`
	preq.KvTransferParamsJson = &pkv
	dreq := vllmReq("mc-1", prompt, 3, true)
	dkv := `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":"http://127.0.0.1:` +
		strconv.Itoa(p.BootstrapPort()) + `","remote_engine_id":"mc","transfer_id":"xfer-mc-1"}`
	dreq.KvTransferParamsJson = &dkv

	var wg sync.WaitGroup
	var pdone *vllmpb.GenerateComplete
	var perr error
	wg.Go(func() { _, pdone, perr = vllmRun(t.Context(), vllmpb.NewVllmEngineClient(grpcConn(t, p)), preq) })
	chunks, ddone, derr := vllmRun(t.Context(), vllmpb.NewVllmEngineClient(grpcConn(t, d)), dreq)
	wg.Wait()
	if perr != nil || derr != nil {
		t.Fatalf("prefill %v, decode %v", perr, derr)
	}
	if pdone.KvTransferParamsJson != nil || len(chunks) != 3 || ddone.GetFinishReason() != "length" {
		t.Errorf("prefill %v; decode %d chunks, %v", pdone, len(chunks), ddone)
	}
	if st := d.Stats(); st.MooncakeTransfers != 1 || st.RecomputedPrompts != 0 {
		t.Errorf("decode stats: %d transfers, %d recomputed; want the KV pulled once", st.MooncakeTransfers, st.RecomputedPrompts)
	}
}
