package sim

import (
	"testing"

	"google.golang.org/grpc/codes"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// n > 1 over both servicers: every sample's chunks and its own Complete carry its index; a vLLM KV
// handoff (one consumer) still refuses n > 1.
func TestGRPCNSamples(t *testing.T) {
	t.Parallel()
	sg := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, Seed: 5})
	sc := sglangpb.NewSglangSchedulerClient(grpcConn(t, sg))
	req := sglangReq("n3", "several samples please", 4, true)
	req.SamplingParams.N, req.SamplingParams.Temperature = 3, 1
	chunks, _, err := sglangRun(t.Context(), sc, req)
	if err != nil {
		t.Fatal(err)
	}
	perIndex := map[uint32]int{}
	for _, ch := range chunks {
		perIndex[ch.GetIndex()] += len(ch.GetTokenIds())
	}
	if len(perIndex) != 3 || perIndex[0] == 0 || perIndex[2] == 0 {
		t.Errorf("sglang chunks per index %v, want 3 samples", perIndex)
	}
	completes := sglangCompletes(t, sc, func() *sglangpb.GenerateRequest {
		r := sglangReq("n2", "several samples please", 4, false)
		r.SamplingParams.N = 2
		return r
	}())
	if len(completes) != 2 || completes[0].GetIndex() != 0 || completes[1].GetIndex() != 1 || completes[1].GetCompletionTokens() != 4 {
		t.Errorf("sglang completes %v", completes)
	}

	ve := startEngine(t, Config{Protocol: ProtocolVLLM, Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true})
	vc := vllmpb.NewVllmEngineClient(grpcConn(t, ve))
	vreq := vllmReq("n2", "several samples please", 3, false)
	vreq.SamplingParams.N = 2
	stream, err := vc.Generate(t.Context(), vreq)
	if err != nil {
		t.Fatal(err)
	}
	var idx []uint32
	for {
		msg, err := stream.Recv()
		if err != nil {
			break
		}
		if d := msg.GetComplete(); d != nil {
			if len(d.GetOutputIds()) == 0 {
				t.Errorf("vllm complete %v without ids", d)
			}
			idx = append(idx, d.GetIndex())
		}
	}
	if len(idx) != 2 || idx[0] != 0 || idx[1] != 1 {
		t.Errorf("vllm completes by index %v", idx)
	}

	p := startEngine(t, Config{Protocol: ProtocolVLLM, Role: RolePrefill, GRPC: true})
	kv := `{"do_remote_decode":true}`
	vreq.KvTransferParamsJson = &kv
	_, _, err = vllmRun(t.Context(), vllmpb.NewVllmEngineClient(grpcConn(t, p)), vreq)
	wantCode(t, err, codes.Unimplemented, "PD leg")
}

func sglangCompletes(t *testing.T, c sglangpb.SglangSchedulerClient, req *sglangpb.GenerateRequest) []*sglangpb.GenerateComplete {
	t.Helper()
	stream, err := c.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out []*sglangpb.GenerateComplete
	for {
		msg, err := stream.Recv()
		if err != nil {
			return out
		}
		if d := msg.GetComplete(); d != nil {
			out = append(out, d)
		}
	}
}
