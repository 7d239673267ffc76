package body

import (
	"github.com/sluicegw/sluice/internal/jsonx"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// vLLM-style PD with the Mooncake connector, written from vLLM's own proxy
// (examples/disaggregated/mooncake_connector/mooncake_connector_proxy.py) and its usage guide
// (docs/features/mooncake_connector_usage.md): both legs go at once; the prefill keeps the KV cache
// under a transfer id, and the decode is told where to fetch it — the prefill's bootstrap server, its
// engine id for the chosen data-parallel rank, and the same transfer id.

// MooncakeTransferID is the transfer id both legs of a request carry (the proxy's "xfer-<request id>").
func MooncakeTransferID(requestID string) string { return "xfer-" + requestID }

// MooncakePrefillBody is the prefill leg's body, as the proxy's send_request_to_service builds it:
// kv_transfer_params asking to keep the KV for a remote decode under the transfer id, stream=false,
// max_tokens=1 (and max_completion_tokens=1 when the client sent it), stream_options removed.
func MooncakePrefillBody(body []byte, transferID string) ([]byte, error) {
	params := `{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":` + string(jsonx.AppendString(nil, transferID)) + `}`
	edits := []field{
		{"kv_transfer_params", []byte(params)},
		{"stream", []byte("false")},
		{"max_tokens", []byte("1")},
		{"stream_options", nil},
	}
	if _, ok := jsonscan.FindMember(body, 0, "max_completion_tokens"); ok {
		edits = append(edits, field{"max_completion_tokens", []byte("1")})
	}
	return rewriteObject(body, edits)
}

// MooncakeDecodeBody is the decode leg's body, as the proxy's stream_service_response builds it: the
// client's body with kv_transfer_params naming the prefill's bootstrap address, its engine id and the
// transfer id.
func MooncakeDecodeBody(body []byte, bootstrapAddr, engineID, transferID string) ([]byte, error) {
	p := make([]byte, 0, 160)
	p = append(p, `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":`...)
	p = jsonx.AppendString(p, bootstrapAddr)
	p = append(p, `,"remote_engine_id":`...)
	p = jsonx.AppendString(p, engineID)
	p = append(p, `,"transfer_id":`...)
	p = jsonx.AppendString(p, transferID)
	p = append(p, '}')
	return rewriteObject(body, []field{{"kv_transfer_params", p}})
}
