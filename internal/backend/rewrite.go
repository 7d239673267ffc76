package backend

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicegw/sluice/internal/jsonx"
)

// RoomMask keeps bootstrap rooms within 63 bits: SGLang (Python) and the Rust gateway treat them as
// non-negative signed 64-bit integers.
const RoomMask = 1<<63 - 1

// NewRoom returns a fresh bootstrap room from a 64-bit random source (for example
// (*math/rand/v2.Rand).Uint64); randomness is injected so tests can be deterministic.
func NewRoom(rnd func() uint64) uint64 { return rnd() & RoomMask }

// NewRooms returns count fresh rooms.
func NewRooms(rnd func() uint64, count int) []uint64 {
	rooms := make([]uint64, count)
	for i := range rooms {
		rooms[i] = NewRoom(rnd)
	}
	return rooms
}

// RoomCount is how many bootstrap rooms an SGLang PD request needs: one per backend sub-request,
// that is prompts x samples = max(BatchSize, 1) x N.
//
// Why the product: SGLang normalises a batch by expanding it to batch_size x n sub-requests
// (texts repeated n times) and then indexes bootstrap_room[i] for sub-request i; a room list it is
// given is itself repeated n times. Sending batch_size rooms (as the Rust gateway does for a batch
// with n > 1) therefore gives the n samples of a prompt the same room, which collides in the
// KV-transfer rendezvous; sending batch_size x n rooms gives every sub-request its own room (the
// repeated tail of the list is never indexed). For chat/completions with n > 1 and one prompt this is
// n rooms, as the Rust gateway sends. A count of 1 means scalar bootstrap fields.
func RoomCount(req *Request) int {
	return req.Prompts() * max(req.N, 1)
}

// InjectBootstrap adds SGLang's PD bootstrap fields to a request body (the same body goes to the
// prefill and the decode worker): bootstrap_host, bootstrap_port (port 0 becomes JSON null: the
// prefill worker has no bootstrap port configured) and bootstrap_room. With one room the three are
// scalars; with more, each is an array of len(rooms) (host and port repeated, one room each). Existing
// fields are replaced; every other byte of the body is preserved.
func InjectBootstrap(body []byte, host string, port int, rooms []uint64) ([]byte, error) {
	if len(rooms) == 0 {
		return nil, errors.New("backend: InjectBootstrap: no rooms")
	}
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("backend: InjectBootstrap: bad port %d", port)
	}
	hostJSON := jsonx.AppendString(nil, host)
	portJSON := []byte("null")
	if port > 0 {
		portJSON = strconv.AppendInt(nil, int64(port), 10)
	}
	var hostV, portV, roomV []byte
	if len(rooms) == 1 {
		hostV, portV, roomV = hostJSON, portJSON, strconv.AppendUint(nil, rooms[0], 10)
	} else {
		hostV = repeatJSON(hostJSON, len(rooms))
		portV = repeatJSON(portJSON, len(rooms))
		roomV = make([]byte, 0, len(rooms)*20+2)
		roomV = append(roomV, '[')
		for i, r := range rooms {
			if i > 0 {
				roomV = append(roomV, ',')
			}
			roomV = strconv.AppendUint(roomV, r, 10)
		}
		roomV = append(roomV, ']')
	}
	return rewriteObject(body, []field{
		{"bootstrap_host", hostV},
		{"bootstrap_port", portV},
		{"bootstrap_room", roomV},
	})
}

func repeatJSON(v []byte, n int) []byte {
	out := make([]byte, 0, n*(len(v)+1)+1)
	out = append(out, '[')
	for i := range n {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, v...)
	}
	return append(out, ']')
}

// vllmPrefillKV is the kv_transfer_params of a vLLM prefill request (NIXL connector): keep the KV
// cache for a remote decode.
const vllmPrefillKV = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,` +
	`"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// VLLMPrefillBody derives the prefill leg's body of vLLM-style PD from the client body: stream=false,
// stream_options removed, n=1, min_tokens removed, the output capped at one token
// (max_completion_tokens for chat when the client used it, else max_tokens) and kv_transfer_params
// asking the engine to keep the KV cache for a remote decode.
func VLLMPrefillBody(route Route, body []byte) ([]byte, error) {
	capKey := "max_tokens"
	if route == RouteChat {
		if _, ok := findMember(body, 0, "max_completion_tokens"); ok {
			capKey = "max_completion_tokens"
		}
	}
	return rewriteObject(body, []field{
		{"stream", []byte("false")},
		{"stream_options", nil},
		{"n", []byte("1")},
		{"min_tokens", nil},
		{capKey, []byte("1")},
		{"kv_transfer_params", []byte(vllmPrefillKV)},
	})
}

// ErrNoKVTransferParams means a vLLM prefill response lacks kv_transfer_params (the engine has no KV
// connector configured, or it is not a PD prefill engine).
var ErrNoKVTransferParams = errors.New("prefill response has no kv_transfer_params")

// ExtractKVTransferParams returns the kv_transfer_params object of a vLLM prefill response.
func ExtractKVTransferParams(prefillResponse []byte) (json.RawMessage, error) {
	if _, err := checkTopObject(prefillResponse); err != nil {
		return nil, fmt.Errorf("backend: prefill response: %w", err)
	}
	m, ok := findMember(prefillResponse, 0, "kv_transfer_params")
	if !ok || isNull(m.value(prefillResponse)) {
		return nil, ErrNoKVTransferParams
	}
	v := m.value(prefillResponse)
	if v[0] != '{' {
		return nil, fmt.Errorf("%w: kv_transfer_params is not an object", ErrNoKVTransferParams)
	}
	return json.RawMessage(append([]byte(nil), v...)), nil
}

// VLLMDecodeBody is the decode leg's body: the client body with the prefill's kv_transfer_params.
func VLLMDecodeBody(body []byte, params json.RawMessage) ([]byte, error) {
	if len(params) == 0 {
		return nil, ErrNoKVTransferParams
	}
	return rewriteObject(body, []field{{"kv_transfer_params", params}})
}

// MergeInputLogprobs merges the input logprobs of SGLang PD's two legs of a non-streaming /generate
// request: prefill computed the prompt, so meta_info.input_token_logprobs of the prefill response is
// prepended to decode's (when decode has none, prefill's are set). Responses may be one object or, for
// a batch, arrays of objects paired by index. Streaming responses are not merged (the frames are
// relayed as they come). The decode response is returned unchanged when prefill has no logprobs.
func MergeInputLogprobs(prefillResp, decodeResp []byte) ([]byte, error) {
	ps, pe, err := topValue(prefillResp)
	if err != nil {
		return nil, fmt.Errorf("backend: prefill response: %w", err)
	}
	ds, de, err := topValue(decodeResp)
	if err != nil {
		return nil, fmt.Errorf("backend: decode response: %w", err)
	}
	p, d := prefillResp[ps:pe], decodeResp[ds:de]
	switch {
	case p[0] == '{' && d[0] == '{':
		merged, err := mergeOne(p, d)
		if err != nil {
			return nil, err
		}
		return splice(decodeResp, ds, de, merged), nil
	case p[0] == '[' && d[0] == '[':
		var pItems [][]byte
		pa := newArrIter(p, 0)
		for {
			s, e, ok := pa.next()
			if !ok {
				break
			}
			pItems = append(pItems, p[s:e])
		}
		out := make([]byte, 0, len(decodeResp)+len(prefillResp))
		out = append(out, decodeResp[:ds]...)
		da := newArrIter(d, 0)
		last := 0
		for i := 0; ; i++ {
			s, e, ok := da.next()
			if !ok {
				break
			}
			out = append(out, d[last:s]...)
			item := d[s:e]
			if i < len(pItems) && item[0] == '{' && pItems[i][0] == '{' {
				if item, err = mergeOne(pItems[i], item); err != nil {
					return nil, err
				}
			}
			out = append(out, item...)
			last = e
		}
		out = append(out, d[last:]...)
		return append(out, decodeResp[de:]...), nil
	}
	return nil, errors.New("backend: MergeInputLogprobs: prefill and decode responses have different shapes")
}

// topValue validates that b is one JSON value and returns its span.
func topValue(b []byte) (int, int, error) {
	s := skipWS(b, 0)
	e, err := skipValue(b, s)
	if err != nil {
		return 0, 0, err
	}
	if skipWS(b, e) != len(b) {
		return 0, 0, syntaxErr("trailing data", e)
	}
	return s, e, nil
}

func splice(b []byte, s, e int, v []byte) []byte {
	out := make([]byte, 0, len(b)-(e-s)+len(v))
	out = append(out, b[:s]...)
	out = append(out, v...)
	return append(out, b[e:]...)
}

// mergeOne merges one prefill object's meta_info.input_token_logprobs into one decode object.
func mergeOne(prefill, decode []byte) ([]byte, error) {
	pm, ok := findMember(prefill, 0, "meta_info")
	if !ok || prefill[pm.valStart] != '{' {
		return decode, nil
	}
	pl, ok := findMember(prefill, pm.valStart, "input_token_logprobs")
	if !ok || prefill[pl.valStart] != '[' {
		return decode, nil
	}
	dm, ok := findMember(decode, 0, "meta_info")
	if !ok || decode[dm.valStart] != '{' {
		meta := append([]byte(`{"input_token_logprobs":`), pl.value(prefill)...)
		meta = append(meta, '}')
		return rewriteObject(decode, []field{{"meta_info", meta}})
	}
	metaRaw := dm.value(decode)
	merged := pl.value(prefill)
	if dl, ok := findMember(metaRaw, 0, "input_token_logprobs"); ok && metaRaw[dl.valStart] == '[' {
		merged = concatArrays(merged, dl.value(metaRaw))
	}
	newMeta, err := rewriteObject(metaRaw, []field{{"input_token_logprobs", merged}})
	if err != nil {
		return nil, err
	}
	return splice(decode, dm.valStart, dm.valEnd, newMeta), nil
}

// concatArrays joins two raw JSON arrays.
func concatArrays(a, b []byte) []byte {
	ai := trimArray(a)
	bi := trimArray(b)
	out := make([]byte, 0, len(ai)+len(bi)+3)
	out = append(out, '[')
	out = append(out, ai...)
	if len(ai) > 0 && len(bi) > 0 {
		out = append(out, ',')
	}
	out = append(out, bi...)
	return append(out, ']')
}

// trimArray returns the inside of a raw array without surrounding whitespace.
func trimArray(a []byte) []byte {
	inner := a[1 : len(a)-1]
	s := skipWS(inner, 0)
	e := len(inner)
	for e > s && isWS(inner[e-1]) {
		e--
	}
	return inner[s:e]
}
