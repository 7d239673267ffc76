package body

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// vllmPrefillKV is the kv_transfer_params of a vLLM prefill request (NIXL connector): keep the KV
// cache for a remote decode.
const vllmPrefillKV = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,` +
	`"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// vLLM-style PD with the NIXL connector, written from vLLM's own proxy
// (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py) and the Rust gateway's vLLM PD path:
// prefill runs first with a one-token cap and asks the engine to keep the KV cache for a remote
// decode; its answer tells the decode where that cache is.

// VLLMPrefillBody derives the prefill leg's body from the client body, as toy_proxy_server.py's
// send_request_to_service does: kv_transfer_params asking for a remote decode, stream=false,
// max_tokens=1 (and max_completion_tokens=1 when the client sent it), stream_options removed, and
// min_tokens and min_completion_tokens removed ("not supported for P"). n is left as sent: n > 1
// requests never reach a vLLM prefill (the KV handoff has one consumer).
func VLLMPrefillBody(body []byte) ([]byte, error) {
	edits := []field{
		{"kv_transfer_params", []byte(vllmPrefillKV)},
		{"stream", []byte("false")},
		{"max_tokens", []byte("1")},
		{"stream_options", nil},
		{"min_tokens", nil},
		{"min_completion_tokens", nil},
	}
	if _, ok := jsonscan.FindMember(body, 0, "max_completion_tokens"); ok {
		edits = append(edits, field{"max_completion_tokens", []byte("1")})
	}
	return rewriteObject(body, edits)
}

// ErrNoKVTransferParams means a vLLM prefill response carries no kv_transfer_params. That is normal:
// the NIXL connector returns them only when the request ended on its length cap
// (nixl_connector.py request_finished), not when the one token was EOS or a stop string, and other
// connectors return none. The decode then runs without them and recomputes the prompt.
var ErrNoKVTransferParams = errors.New("prefill response has no kv_transfer_params")

// ExtractKVTransferParams returns the kv_transfer_params object of a vLLM prefill response.
func ExtractKVTransferParams(prefillResponse []byte) (json.RawMessage, error) {
	if _, err := jsonscan.CheckTopObject(prefillResponse); err != nil {
		return nil, fmt.Errorf("backend: prefill response: %w", err)
	}
	m, ok := jsonscan.FindMember(prefillResponse, 0, "kv_transfer_params")
	if !ok || jsonscan.IsNull(m.Value(prefillResponse)) {
		return nil, ErrNoKVTransferParams
	}
	v := m.Value(prefillResponse)
	if v[0] != '{' {
		return nil, fmt.Errorf("%w: kv_transfer_params is not an object", ErrNoKVTransferParams)
	}
	return json.RawMessage(append([]byte(nil), v...)), nil
}

// VLLMDecodeBody is the decode leg's body: the client body with the prefill's kv_transfer_params
// copied in unchanged, or without any when there are none (the decode recomputes). A client's own
// kv_transfer_params never reach the decode: they would point it at a host of the client's choosing.
func VLLMDecodeBody(body []byte, params json.RawMessage) ([]byte, error) {
	if len(params) == 0 {
		if _, ok := jsonscan.FindMember(body, 0, "kv_transfer_params"); !ok {
			return body, nil
		}
		return rewriteObject(body, []field{{"kv_transfer_params", nil}})
	}
	return rewriteObject(body, []field{{"kv_transfer_params", params}})
}
