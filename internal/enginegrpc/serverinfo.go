package enginegrpc

import (
	"context"
	"fmt"
	"maps"

	"google.golang.org/grpc"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// ServerInfo is what an engine's GetServerInfo says about how it runs: what a gateway needs to
// complete a worker's spec (data-parallel size, a prefill's bootstrap port, a decode's window).
type ServerInfo struct {
	// SGLang is SGLang's server info as HTTP's GET /get_server_info has it: the server args with the
	// scheduler info merged in (http_server.py get_server_info merges them; the gRPC servicer keeps
	// them apart), so one reader serves both transports. Nil for the other protocols.
	SGLang map[string]any
	// DPSize is vLLM's data_parallel_size; 0 when not reported (and for SGLang, whose dp_size is in
	// the map).
	DPSize int
	// KVConnector is vLLM's KV connector class ("NixlConnector", "MooncakeConnector"); empty
	// without KV transfer.
	KVConnector string
	// KVRole is vLLM's kv_role ("kv_producer", "kv_consumer", "kv_both"); empty without KV transfer.
	KVRole string
}

// GetServerInfo asks the engine behind conn, which speaks protocol p, for its server info.
// TensorRT-LLM's carries nothing a gateway completes a spec with, so it is not asked: the zero
// ServerInfo. Errors are the call's gRPC status, wrapped with the protocol's name.
func GetServerInfo(ctx context.Context, conn grpc.ClientConnInterface, p Protocol) (ServerInfo, error) {
	switch p {
	case SGLang:
		r, err := sglangpb.NewSglangSchedulerClient(conn).GetServerInfo(ctx, &sglangpb.GetServerInfoRequest{})
		if err != nil {
			return ServerInfo{}, fmt.Errorf("%s GetServerInfo: %w", p, err)
		}
		info := r.GetServerArgs().AsMap()
		// The scheduler's figures win over a server arg of the same name, as in the HTTP merge.
		maps.Copy(info, r.GetSchedulerInfo().AsMap())
		if _, ok := info["max_total_num_tokens"]; !ok && r.GetMaxTotalNumTokens() > 0 {
			info["max_total_num_tokens"] = float64(r.GetMaxTotalNumTokens())
		}
		return ServerInfo{SGLang: info}, nil
	case VLLM:
		r, err := vllmpb.NewVllmEngineClient(conn).GetServerInfo(ctx, &vllmpb.GetServerInfoRequest{})
		if err != nil {
			return ServerInfo{}, fmt.Errorf("%s GetServerInfo: %w", p, err)
		}
		return ServerInfo{DPSize: int(max(r.GetDataParallelSize(), 0)), KVConnector: r.GetKvConnector(), KVRole: r.GetKvRole()}, nil
	case TRTLLM:
		return ServerInfo{}, nil
	}
	return ServerInfo{}, fmt.Errorf("unknown engine gRPC protocol %q", p)
}
