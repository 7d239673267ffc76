package enginerpc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/jsonx"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// Embeddings: /v1/embeddings to an engine worker is one Embed call per input (the RPC takes one
// tokenized input, as the Rust gateway sends it), the inputs tokenized by the gateway as the engine
// would (special tokens added), and the answer the engines' HTTP servers give: OpenAI's list of
// embeddings (float or base64), usage with the prompt tokens (vLLM's adds id and created).

type embedJSON struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// embedInputs reads an embeddings input: a string, a list of strings, a list of token ids (one input)
// or a list of token id lists.
func embedInputs(raw json.RawMessage, tok *tokenizer.Tokenizer) ([][]uint32, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]uint32{tok.EncodeSpecialUint32(s)}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		out := make([][]uint32, len(ss))
		for i, x := range ss {
			out[i] = tok.EncodeSpecialUint32(x)
		}
		return out, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]uint32{ids}, nil
	}
	var lists [][]uint32
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		return lists, nil
	}
	return nil, requestError("input", "input must be a string, a list of strings, a list of token ids or a list of token id lists")
}

func (t *Transport) embed(req *http.Request, e *engineEntry, raw []byte) (*http.Response, error) {
	r, ins, answer := embedRequest(req, e, raw)
	if answer != nil {
		return answer, nil
	}
	rid := req.Header.Get("X-Request-Id")
	if rid == "" {
		rid = t.newID()
	}
	dst := t.appendEmbedHead(nil, e, rid, r.Model)
	prompt := 0
	for i, ids := range ins {
		id := rid
		if len(ins) > 1 {
			id += "-" + strconv.Itoa(i)
		}
		vec, n, err := e.client.embed(req.Context(), id, ids)
		if err != nil {
			return t.embedFailed(req, e, err)
		}
		prompt += int(n)
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"object":"embedding","index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"embedding":`...)
		if r.EncodingFormat == "base64" {
			dst = jsonx.AppendString(dst, base64Floats(vec))
		} else {
			dst = appendFloats(dst, vec)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `],"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"completion_tokens":0,"prompt_tokens_details":null}}`...)
	return jsonResponse(req, http.StatusOK, dst), nil
}

// embedRequest reads and checks an embeddings request and tokenizes its inputs; answer, when not
// nil, is the engine's answer to a bad request. The model defaults to the engine's.
func embedRequest(req *http.Request, e *engineEntry, raw []byte) (r embedJSON, ins [][]uint32, answer *http.Response) {
	bad := func(param, msg string) (embedJSON, [][]uint32, *http.Response) {
		return r, nil, errorResponse(req, http.StatusBadRequest, msg, "invalid_request_error", param, "invalid_request_error")
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return bad("", "invalid JSON body: "+err.Error())
	}
	if r.Dimensions != nil {
		return bad("dimensions", "dimensions is not carried by the engines' Embed RPC")
	}
	if r.EncodingFormat != "" && r.EncodingFormat != "float" && r.EncodingFormat != "base64" {
		return bad("encoding_format", "encoding_format must be float or base64, got "+strconv.Quote(r.EncodingFormat))
	}
	ins, err := embedInputs(r.Input, e.Tokenizer)
	if err != nil {
		return bad("input", err.Error())
	}
	for _, ids := range ins {
		if len(ids) == 0 {
			return bad("input", "an input is empty")
		}
		if e.ContextLength > 0 && len(ids) >= e.ContextLength {
			return r, nil, contextExceeded(req, &call{route: body.RouteEmbeddings, ids: ids}, e.ContextLength)
		}
	}
	if r.Model == "" {
		r.Model = e.Model
	}
	return r, ins, nil
}

// appendEmbedHead appends the answer's fields before its data: vLLM's id and created, then the
// object and model both engines give.
func (t *Transport) appendEmbedHead(dst []byte, e *engineEntry, rid, model string) []byte {
	if e.Protocol == enginegrpc.VLLM {
		dst = append(dst, `{"id":`...)
		dst = jsonx.AppendString(dst, "embd-"+rid)
		dst = append(dst, `,"created":`...)
		dst = strconv.AppendInt(dst, t.now().Unix(), 10)
		dst = append(dst, ',')
	} else {
		dst = append(dst, '{')
	}
	dst = append(dst, `"object":"list","model":`...)
	dst = jsonx.AppendString(dst, model)
	return append(dst, `,"data":[`...)
}

// embedFailed answers an Embed error as failed answers a Generate's.
func (t *Transport) embedFailed(req *http.Request, e *engineEntry, err error) (*http.Response, error) {
	if req.Context().Err() != nil {
		return nil, req.Context().Err()
	}
	if !connect.IsWireError(err) {
		return nil, errors.Join(errors.New("enginerpc: "+string(e.Protocol)+" engine Embed"), err)
	}
	code := connect.CodeOf(err)
	status, typ := statusForCode(code)
	return errorResponse(req, status, connectMessage(err), typ, "", code.String()), nil
}

func appendFloats(dst []byte, v []float32) []byte {
	dst = append(dst, '[')
	for i, f := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			dst = append(dst, '0')
			continue
		}
		dst = strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
	}
	return append(dst, ']')
}

// base64Floats is the base64 of little-endian float32s, as both engines encode "base64" embeddings.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func (s sglangClient) embed(ctx context.Context, rid string, ids []uint32) ([]float32, uint32, error) {
	resp, err := s.c.Embed(ctx, &sglangpb.EmbedRequest{RequestId: rid, Tokenized: &sglangpb.TokenizedInput{InputIds: ids}})
	if err != nil {
		return nil, 0, err
	}
	return resp.GetEmbedding(), max(resp.GetPromptTokens(), uint32(len(ids))), nil
}

func (v vllmClient) embed(ctx context.Context, rid string, ids []uint32) ([]float32, uint32, error) {
	resp, err := v.c.Embed(ctx, &vllmpb.EmbedRequest{RequestId: rid, Tokenized: &vllmpb.TokenizedInput{InputIds: ids}})
	if err != nil {
		return nil, 0, err
	}
	return resp.GetEmbedding(), max(resp.GetPromptTokens(), uint32(len(ids))), nil
}

// TensorRT-LLM's Embed is not asked yet: an UNIMPLEMENTED, answered as the engine's 501.
func (trtllmClient) embed(context.Context, string, []uint32) ([]float32, uint32, error) {
	return nil, 0, connect.NewError(connect.CodeUnimplemented, errors.New("embeddings are not served over TensorRT-LLM's gRPC yet"))
}
