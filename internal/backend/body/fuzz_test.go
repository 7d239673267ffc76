package body_test

// Fuzz targets for the parsers at the gateway's trust boundaries: client request bodies (inspection,
// bootstrap injection, vLLM rewrites, worker-protocol conversion) and engine responses (kv transfer
// parameters, logprob merge, SSE, loads). Seeds are real request and response shapes; crashers found are
// kept under testdata/fuzz. .ci/run fuzzes each target for a bounded time (scripts/fuzz.sh).

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/body/bodytest"
)

func lastValue(in []byte, key string) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(in, &m) != nil {
		return nil, false
	}
	v, ok := m[key]
	return v, ok
}

// FuzzParseRequest: request inspection never panics; a body it accepts is JSON an engine accepts, and
// the routing fields it extracts are the ones the engine will read (no gateway/engine disagreement on
// model or stream, which would let a client be routed as one request and served as another).
func FuzzParseRequest(f *testing.F) {
	bodytest.AddRequestSeeds(f)
	f.Fuzz(func(t *testing.T, r uint8, in []byte) {
		route := bodytest.FuzzRoute(r)
		req, err := body.ParseRequest(route, in)
		if err != nil {
			var re *body.RequestError
			if !errors.As(err, &re) || !errors.Is(err, body.ErrInvalidRequest) {
				t.Fatalf("error %v (%T) is not a *RequestError", err, err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted a body encoding/json rejects: %q", in)
		}
		if !bytes.Equal(req.Body, in) {
			t.Fatal("request body was modified")
		}
		if req.N < 1 {
			t.Fatalf("n = %d", req.N)
		}
		if raw, ok := lastValue(in, "model"); ok {
			var model string
			if json.Unmarshal(raw, &model) == nil && model != req.Model {
				t.Fatalf("gateway routes model %q, engine reads %q", req.Model, model)
			}
		}
		if raw, ok := lastValue(in, "stream"); ok {
			var stream bool
			if json.Unmarshal(raw, &stream) == nil && stream != req.Stream {
				t.Fatalf("gateway sees stream=%v, engine reads %v", req.Stream, stream)
			}
		}
		if route == body.RouteGenerate {
			return
		}
		// What the engine reads of an accepted request is within the ranges reqcheck promises.
		for key, ok := range map[string]func(float64) bool{
			"temperature": func(v float64) bool { return v >= 0 },
			"top_p":       func(v float64) bool { return v > 0 && v <= 1 },
			"max_tokens":  func(v float64) bool { return v >= 1 },
		} {
			raw, has := lastValue(in, key)
			if !has || body.IsNull(bytes.TrimSpace(raw)) {
				continue
			}
			var v float64
			if json.Unmarshal(raw, &v) != nil || !ok(v) {
				t.Fatalf("accepted %s = %s", key, raw)
			}
		}
		if raw, has := lastValue(in, "messages"); has && route == body.RouteChat {
			var msgs []struct {
				Role *string `json:"role"`
			}
			if json.Unmarshal(raw, &msgs) != nil {
				t.Fatalf("accepted messages %s", raw)
			}
			for i, m := range msgs {
				if m.Role == nil {
					t.Fatalf("accepted messages[%d] without a string role: %s", i, raw)
				}
			}
		}
	})
}

// FuzzInjectBootstrap: the SGLang bootstrap rewrite yields valid JSON carrying exactly the injected
// host, port and room(s), whatever the client sent (including its own bootstrap_* fields), and the
// parsed request's append (Request.InjectBootstrap) gives the same bytes as the rewrite.
func FuzzInjectBootstrap(f *testing.F) {
	bodytest.AddRequestSeeds(f)
	f.Fuzz(func(t *testing.T, r uint8, in []byte) {
		req, err := body.ParseRequest(bodytest.FuzzRoute(r), in)
		if err != nil {
			return
		}
		count, asList := body.SGLangRooms(req)
		rooms := make([]uint64, count)
		for i := range rooms {
			rooms[i] = uint64(i + 1)
		}
		out, err := body.InjectBootstrap(in, "10.0.0.7", 8998, rooms, asList)
		appended, aerr := req.InjectBootstrap(in, "10.0.0.7", 8998, rooms, asList)
		if (err == nil) != (aerr == nil) || !bytes.Equal(out, appended) {
			t.Fatalf("the parsed request's append gives %q (%v), the rewrite %q (%v)", appended, aerr, out, err)
		}
		if err != nil {
			return
		}
		// Numbers as json.Number: a client's 1E01000 is valid JSON that no float64 holds.
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil || !json.Valid(out) {
			t.Fatalf("rewritten body is not JSON: %v\n%s", err, out)
		}
		if m["bootstrap_host"] != "10.0.0.7" && !isList(m["bootstrap_host"]) {
			t.Fatalf("bootstrap_host = %v", m["bootstrap_host"])
		}
		if _, ok := m["bootstrap_room"]; !ok {
			t.Fatal("no bootstrap_room")
		}
	})
}

func isList(v any) bool { _, ok := v.([]any); return ok }

// FuzzVLLMRewrites: the vLLM prefill rewrite and the decode rewrite keep the body valid JSON.
func FuzzVLLMRewrites(f *testing.F) {
	for _, s := range bodytest.RequestSeeds {
		f.Add(uint8(s.Route), []byte(s.Body), []byte(`{"do_remote_decode":false,"do_remote_prefill":true,"remote_engine_id":"e1","remote_block_ids":[1,2],"remote_host":"10.0.0.1","remote_port":5600}`))
	}
	f.Fuzz(func(t *testing.T, r uint8, in, params []byte) {
		route := bodytest.FuzzRoute(r)
		if _, err := body.ParseRequest(route, in); err != nil {
			return
		}
		if out, err := body.VLLMPrefillBody(in); err == nil && !json.Valid(out) {
			t.Fatalf("prefill body is not JSON: %s", out)
		}
		if !json.Valid(params) {
			return
		}
		if out, err := body.VLLMDecodeBody(in, params); err == nil && !json.Valid(out) {
			t.Fatalf("decode body is not JSON: %s", out)
		}
	})
}

// FuzzExtractKVTransferParams: reading a (possibly hostile) prefill response never panics, and what it
// extracts is JSON.
func FuzzExtractKVTransferParams(f *testing.F) {
	f.Add([]byte(`{"id":"cmpl-1","choices":[{"text":"a"}],"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":1}}`))
	f.Add([]byte(`{"kv_transfer_params":null}`))
	f.Add([]byte(`{"kv_transfer_params":"x"}`))
	f.Add([]byte(`[{"kv_transfer_params":{}}]`))
	f.Fuzz(func(t *testing.T, resp []byte) {
		p, err := body.ExtractKVTransferParams(resp)
		if err == nil && p != nil && !json.Valid(p) {
			t.Fatalf("extracted params are not JSON: %s", p)
		}
	})
}

// FuzzMergeInputLogprobs: merging prefill logprobs into a decode response yields JSON or an error.
func FuzzMergeInputLogprobs(f *testing.F) {
	f.Add([]byte(`{"text":"","meta_info":{"input_token_logprobs":[[-0.1,1,null],[-0.2,2,null]]}}`),
		[]byte(`{"text":" Paris","meta_info":{"input_token_logprobs":[[null,1,null]],"output_token_logprobs":[[-0.5,3,null]]}}`))
	f.Add([]byte(`[{"meta_info":{"input_token_logprobs":[]}},{"meta_info":{}}]`), []byte(`[{"text":"a","meta_info":{}},{"text":"b","meta_info":{}}]`))
	f.Add([]byte(`{}`), []byte(`{"meta_info":null}`))
	f.Fuzz(func(t *testing.T, prefill, decode []byte) {
		out, err := body.MergeInputLogprobs(prefill, decode)
		if err == nil && !json.Valid(out) {
			t.Fatalf("merged response is not JSON: %s", out)
		}
	})
}

// FuzzMergeSampleResponses: merging the answers of a split n > 1 request (possibly hostile engine
// bodies) yields JSON or an error, and a chat merge has one choice per sample answer's choices.
func FuzzMergeSampleResponses(f *testing.F) {
	f.Add(uint8(body.RouteChat), []byte(`{"id":"a","choices":[{"index":0,"message":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`),
		[]byte(`{"id":"b","choices":[{"index":0,"message":{"content":"y"}}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`))
	f.Add(uint8(body.RouteGenerate), []byte(`{"text":"a","meta_info":{}}`), []byte(`{"text":"b"}`))
	f.Add(uint8(body.RouteCompletions), []byte(`{"choices":[{"text":"a"},{"text":"b"}],"usage":null}`), []byte(`{"choices":[]}`))
	f.Fuzz(func(t *testing.T, r uint8, a, b []byte) {
		out, err := body.MergeSampleResponses(bodytest.FuzzRoute(r), [][]byte{a, b})
		if err == nil && !json.Valid(out) {
			t.Fatalf("merged answer is not JSON: %s", out)
		}
	})
}

// FuzzSampleStreamMerger: rewriting stream frames of split samples yields JSON for JSON input, holds
// back only [DONE] and usage-only chunks, and the merged usage chunk is JSON.
func FuzzSampleStreamMerger(f *testing.F) {
	f.Add(uint8(body.RouteChat), []byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"x"}}]}`), []byte(`{"id":"d","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	f.Add(uint8(body.RouteGenerate), []byte(`{"text":"a","meta_info":{"id":"1"}}`), []byte(`[DONE]`))
	f.Add(uint8(body.RouteCompletions), []byte(`{"choices":[{"text":"a"}]}`), []byte(`{"error":{"message":"x"}}`))
	f.Fuzz(func(t *testing.T, r uint8, a, b []byte) {
		m := body.NewSampleStreamMerger(bodytest.FuzzRoute(r))
		for k, frame := range [][]byte{a, b} {
			out, err := m.Frame(k, frame)
			if err != nil || out == nil {
				continue
			}
			if json.Valid(frame) && !json.Valid(out) {
				t.Fatalf("frame %s became invalid JSON %s", frame, out)
			}
		}
		if u, err := m.UsageFrame(); err == nil && u != nil && !json.Valid(u) {
			t.Fatalf("usage frame is not JSON: %s", u)
		}
	})
}

// FuzzMergeStreamInputLogprobs: prepending a prefill frame's input logprobs to a decode frame yields
// JSON for JSON frames.
func FuzzMergeStreamInputLogprobs(f *testing.F) {
	f.Add([]byte(`{"text":"","meta_info":{"input_token_logprobs":[[-1,1,null]]}}`), []byte(`{"text":"a","meta_info":{"input_token_logprobs":[]},"index":0}`))
	f.Add([]byte(`{"meta_info":{}}`), []byte(`[DONE]`))
	f.Fuzz(func(t *testing.T, prefill, decode []byte) {
		out, err := body.MergeStreamInputLogprobs(prefill, decode)
		if err == nil && json.Valid(prefill) && json.Valid(decode) && !json.Valid(out) {
			t.Fatalf("merged frame is not JSON: %s", out)
		}
		_ = body.FrameIndex(decode)
		_ = body.HasInputLogprobs(decode)
	})
}

// FuzzSSEReader: the SSE reader terminates on any upstream byte stream, never returns more payload
// bytes than it read, and round-trips what it returns through body.AppendSSE.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("event: ping\r\ndata: a\r\ndata: b\r\n\r\n: comment\n\nid: 7\nretry: 10\ndata:x\n\n"))
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\"}}\n\n"))
	f.Add([]byte("data: " + strings.Repeat("x", 70000) + "\n\n"))
	f.Add([]byte("data: unterminated"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := body.NewSSEReader(bytes.NewReader(in))
		total := 0
		for range len(in) + 2 {
			data, err := r.Next()
			if err != nil {
				return // io.EOF or a framing error; both end the stream
			}
			total += len(data)
			if total > len(in) {
				t.Fatalf("returned %d payload bytes from %d input bytes", total, len(in))
			}
			if bytes.ContainsAny(data, "\r\n") && !bytes.Contains(data, []byte("\n")) {
				t.Fatalf("payload with a bare CR: %q", data)
			}
			frame := body.AppendSSE(nil, data)
			again, err := body.NewSSEReader(bytes.NewReader(frame)).Next()
			if err != nil || !bytes.Equal(again, data) {
				t.Fatalf("AppendSSE(%q) = %q does not read back (%q, %v)", data, frame, again, err)
			}
		}
		if _, err := r.Next(); err == nil {
			t.Fatal("reader still returning frames after more calls than input bytes")
		} else if !errors.Is(err, io.EOF) && err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}
