package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

const badInputKey = "sk-bad-input-key"

// rpcResult is what a raw RPC call got: the HTTP status, the RPC code name ("ok" for none) and message.
type rpcResult struct {
	httpStatus int
	code, msg  string
}

// grpcFrame wraps a message in the 5-byte gRPC length prefix.
func grpcFrame(payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// rawRPC posts payload to an RPC procedure in one protocol: "connect" (JSON unary), "grpc" or
// "grpc-web" (protobuf, length-prefixed), and decodes the status.
func rawRPC(t *testing.T, base, procedure, protocol string, payload []byte, auth string) rpcResult {
	t.Helper()
	var body []byte
	var ctype string
	client := http.DefaultClient
	switch protocol {
	case "connect":
		body, ctype = payload, "application/json"
	case "grpc":
		body, ctype = grpcFrame(payload), "application/grpc+proto"
		client = h2cClient(t)
	case "grpc-web":
		body, ctype = grpcFrame(payload), "application/grpc-web+proto"
	}
	req, err := http.NewRequest(http.MethodPost, base+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	if protocol == "grpc" {
		req.Header.Set("Te", "trailers")
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", protocol, procedure, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	res := rpcResult{httpStatus: resp.StatusCode, code: "ok"}
	switch protocol {
	case "connect":
		if resp.StatusCode != http.StatusOK {
			var e struct{ Code, Message string }
			_ = json.Unmarshal(data, &e)
			res.code, res.msg = e.Code, e.Message
		}
	case "grpc":
		st := resp.Trailer.Get("Grpc-Status")
		msg := resp.Trailer.Get("Grpc-Message")
		if st == "" { // trailers-only response
			st, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
		}
		res.code, res.msg = codeName(st), msg
	case "grpc-web":
		st, msg := resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
		for rest := data; len(rest) >= 5; {
			n := int(binary.BigEndian.Uint32(rest[1:5]))
			if len(rest) < 5+n {
				break
			}
			if rest[0]&0x80 != 0 {
				for line := range strings.SplitSeq(string(rest[5:5+n]), "\r\n") {
					k, v, _ := strings.Cut(line, ":")
					switch strings.ToLower(strings.TrimSpace(k)) {
					case "grpc-status":
						st = strings.TrimSpace(v)
					case "grpc-message":
						msg = strings.TrimSpace(v)
					}
				}
			}
			rest = rest[5+n:]
		}
		res.code, res.msg = codeName(st), msg
	}
	return res
}

func codeName(s string) string {
	n, err := strconv.Atoi(s)
	if err != nil {
		return "missing status " + strconv.Quote(s)
	}
	if n == 0 {
		return "ok"
	}
	return connect.Code(n).String()
}

func h2cClient(t *testing.T) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func chatProto(t *testing.T, model string, n int32, content *structpb.Value) []byte {
	t.Helper()
	m := &openaiv1.CreateChatCompletionRequest{Model: model, MaxTokens: ptr[int32](2),
		Messages: []*openaiv1.ChatMessage{{Role: "user", Content: content}}}
	if n != 1 {
		m.N = ptr(n)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawChatProto builds a CreateChatCompletionRequest by hand, so that it can carry what a proto
// library refuses to encode (invalid UTF-8 in the model string).
func rawChatProto(model []byte) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType) // model
	b = protowire.AppendBytes(b, model)
	return b
}

// nestedValue is a structpb list nested depth times.
func nestedValue(depth int) *structpb.Value {
	v := structpb.NewStringValue("x")
	for range depth {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	return v
}

// TestBadInputEverySurface sends malformed, mistyped, oversized, hostile and unauthenticated requests
// through REST, Connect, gRPC and gRPC-Web. Each gets the documented status and code, no message names a
// worker or repeats the key, and afterwards no admission slot, queue entry or goroutine is left (goleak
// runs after the package).
func TestBadInputEverySurface(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--api-key", badInputKey,
		"--prefill-max-inflight-requests-per-worker", "2", "--max-payload-size", "64KiB"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	workerHosts := []string{}
	for _, e := range c.Engines {
		workerHosts = append(workerHosts, strings.TrimPrefix(e.URL(), "http://"))
	}
	noLeak := func(t *testing.T, msg string) {
		t.Helper()
		for _, h := range workerHosts {
			if strings.Contains(msg, h) {
				t.Errorf("error message names a worker (%s): %s", h, msg)
			}
		}
		if strings.Contains(msg, badInputKey) {
			t.Errorf("error message repeats the API key: %s", msg)
		}
	}

	valid := `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":2}`
	deep := `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":2,"extra":` +
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`
	t.Run("REST", func(t *testing.T) {
		tests := []struct {
			name       string
			method     string
			body       string
			header     map[string]string
			noAuth     bool
			wantStatus int
			wantCode   string
		}{
			{"valid", "POST", valid, nil, false, 200, ""},
			{"empty body", "POST", "", nil, false, 400, "invalid_request"},
			{"malformed", "POST", "{", nil, false, 400, "invalid_json"},
			{"truncated", "POST", valid[:40], nil, false, 400, "invalid_json"},
			{"not an object", "POST", `[1,2]`, nil, false, 400, "invalid_request"},
			{"trailing data", "POST", valid + ` {}`, nil, false, 400, "invalid_json"},
			{"model not a string", "POST", `{"model":1,"messages":[]}`, nil, false, 400, "invalid_request"},
			{"messages not an array", "POST", `{"model":"sim-model","messages":"x"}`, nil, false, 400, "invalid_request"},
			{"stream not a boolean", "POST", `{"model":"sim-model","messages":[],"stream":"yes"}`, nil, false, 400, "invalid_request"},
			{"n zero", "POST", `{"model":"sim-model","messages":[],"n":0}`, nil, false, 400, "invalid_request"},
			{"n huge", "POST", `{"model":"sim-model","messages":[],"n":1e12}`, nil, false, 400, "invalid_request"},
			{"deeply nested", "POST", deep, nil, false, 400, "invalid_json"},
			{"invalid UTF-8", "POST", "{\"model\":\"sim-model\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", nil, false, 400, "invalid_json"},
			{"control character", "POST", "{\"model\":\"sim-model\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x00b\"}]}", nil, false, 400, "invalid_json"},
			{"unknown model", "POST", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, nil, false, 404, "model_not_found"},
			{"no model", "POST", `{"messages":[{"role":"user","content":"x"}]}`, nil, false, 400, "invalid_request"},
			{"oversized", "POST", `{"model":"sim-model","messages":[{"role":"user","content":"` + strings.Repeat("a", 70000) + `"}]}`, nil, false, 413, "payload_too_large"},
			{"bad target header", "POST", valid, map[string]string{"X-Sluice-Target-Worker": "../etc"}, false, 400, "invalid_request"},
			{"unauthenticated", "POST", valid, nil, true, 401, "invalid_api_key"},
			{"wrong key", "POST", valid, map[string]string{"Authorization": "Bearer nope"}, false, 401, "invalid_api_key"},
			{"wrong method", "GET", "", nil, false, 405, "method_not_allowed"},
			{"form content type", "POST", valid, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, false, 415, "unsupported_media_type"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req, err := http.NewRequest(tt.method, gw.URL+"/v1/chat/completions", strings.NewReader(tt.body))
				if err != nil {
					t.Fatal(err)
				}
				if !tt.noAuth {
					req.Header.Set("Authorization", "Bearer "+badInputKey)
				}
				for k, v := range tt.header {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.wantStatus {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, data)
				}
				if tt.wantCode == "" {
					return
				}
				var e struct {
					Error struct{ Message, Type, Code string } `json:"error"`
				}
				if err := json.Unmarshal(data, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
					t.Fatalf("not an OpenAI error body: %s", data)
				}
				if e.Error.Code != tt.wantCode {
					t.Errorf("code %q, want %q (%s)", e.Error.Code, tt.wantCode, e.Error.Message)
				}
				noLeak(t, e.Error.Message)
			})
		}
	})

	const proc = "/sluice.openai.v1.OpenAIService/CreateChatCompletion"
	t.Run("Connect", func(t *testing.T) {
		tests := []struct {
			name     string
			body     string
			noAuth   bool
			wantCode string
		}{
			{"valid", valid, false, "ok"},
			{"empty body", "", false, "invalid_argument"},
			{"malformed", "{", false, "invalid_argument"},
			{"wrong type", `{"model":1}`, false, "invalid_argument"},
			{"unknown field type", `{"model":"sim-model","max_tokens":"ten"}`, false, "invalid_argument"},
			{"deeply nested", deep, false, "invalid_argument"},
			{"invalid UTF-8", "{\"model\":\"\xff\"}", false, "invalid_argument"},
			{"unknown model", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, false, "not_found"},
			{"n zero", `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"n":0}`, false, "invalid_argument"},
			{"oversized", `{"model":"sim-model","messages":[{"role":"user","content":"` + strings.Repeat("a", 70000) + `"}]}`, false, "resource_exhausted"},
			{"unauthenticated", valid, true, "unauthenticated"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				auth := badInputKey
				if tt.noAuth {
					auth = ""
				}
				r := rawRPC(t, gw.URL, proc, "connect", []byte(tt.body), auth)
				if r.code != tt.wantCode {
					t.Fatalf("code %q (HTTP %d, %q), want %q", r.code, r.httpStatus, r.msg, tt.wantCode)
				}
				noLeak(t, r.msg)
			})
		}
	})

	for _, protocol := range []string{"grpc", "grpc-web"} {
		t.Run(protocol, func(t *testing.T) {
			tests := []struct {
				name     string
				payload  []byte
				noAuth   bool
				wantCode string
			}{
				{"valid", chatProto(t, "sim-model", 1, structpb.NewStringValue("x")), false, "ok"},
				{"garbage bytes", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, false, "invalid_argument"},
				{"truncated message", chatProto(t, "sim-model", 1, structpb.NewStringValue("x"))[:5], false, "invalid_argument"},
				{"invalid UTF-8 string", rawChatProto([]byte{0xff, 0xfe}), false, "invalid_argument"},
				{"deeply nested value", chatProto(t, "sim-model", 1, nestedValue(6000)), false, "invalid_argument"},
				{"unknown model", chatProto(t, "nope", 1, structpb.NewStringValue("x")), false, "not_found"},
				{"no model", chatProto(t, "", 1, structpb.NewStringValue("x")), false, "invalid_argument"},
				{"n zero", chatProto(t, "sim-model", 0, structpb.NewStringValue("x")), false, "invalid_argument"},
				{"oversized", chatProto(t, "sim-model", 1, structpb.NewStringValue(strings.Repeat("a", 70000))), false, "resource_exhausted"},
				{"unauthenticated", chatProto(t, "sim-model", 1, structpb.NewStringValue("x")), true, "unauthenticated"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					auth := badInputKey
					if tt.noAuth {
						auth = ""
					}
					r := rawRPC(t, gw.URL, proc, protocol, tt.payload, auth)
					if r.code != tt.wantCode {
						t.Fatalf("code %q (HTTP %d, %q), want %q", r.code, r.httpStatus, r.msg, tt.wantCode)
					}
					noLeak(t, r.msg)
				})
			}
		})
	}

	// Nothing is held afterwards: no admission slot, no queued request, no in-flight worker load. With
	// --api-key alone, that key guards the admin API too.
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL,
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+badInputKey)
				return next(ctx, req)
			}
		})))
	waitFor(t, "admission idle", 10*time.Second, func() bool {
		st, err := admin.GetAdmission(context.Background(), &adminv1.GetAdmissionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		held := int32(0)
		for _, w := range st.GetStatus().GetWorkers() {
			held += w.GetInflight()
		}
		ws, err := admin.ListWorkers(context.Background(), &adminv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws.GetWorkers() {
			held += int32(w.GetLoad())
		}
		return held == 0 && st.GetStatus().GetQueued() == 0
	})
}
