package backend_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/sim"
)

// These tests drive the simulator's engines through this package's rewrites and transports, as
// dispatch will: SGLang-style PD with bootstrap rooms (both legs in parallel) and vLLM-style PD with
// kv_transfer_params (prefill, then decode), over HTTP and over the worker gRPC protocol.

func startCluster(t *testing.T, proto sim.Protocol) (prefill, decode *sim.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sim.StartCluster(ctx, sim.ClusterConfig{
		Prefill: 1, Decode: 1, Protocol: proto, Mode: sim.ModeInstant,
		Engine: sim.Config{GRPC: true, BootstrapTimeout: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
}

func workerURL(t *testing.T, e *sim.Engine, grpc bool) string {
	t.Helper()
	if !grpc {
		return e.URL()
	}
	u, err := url.Parse(e.URL())
	if err != nil {
		t.Fatal(err)
	}
	return "grpc://" + u.Host
}

func call(t *testing.T, up *backend.Upstream, role, target, path string, body []byte) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := up.Do(ctx, http.MethodPost, target+path, body, http.Header{workerrpc.RoleHeader: {role}})
	if err != nil {
		t.Errorf("%s leg: %v", role, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s leg body: %v", role, err)
	}
	return resp.StatusCode, string(b)
}

func TestSimSGLangPD(t *testing.T) {
	t.Parallel()
	prefill, decode := startCluster(t, sim.ProtocolSGLang)
	client := backend.NewHTTPClient(backend.HTTPClientOptions{})
	t.Cleanup(client.CloseIdleConnections)
	up := &backend.Upstream{Client: client}
	seq := uint64(0x9e3779b97f4a7c15)
	rnd := func() uint64 { seq = seq*6364136223846793005 + 1442695040888963407; return seq }

	for _, grpc := range []bool{false, true} {
		for _, tc := range []struct {
			name  string
			route body.Route
			body  string
		}{
			{"chat", body.RouteChat, `{"model":"sim-model","messages":[{"role":"user","content":"hello there"}],"max_tokens":4}`},
			{"chat stream", body.RouteChat, `{"model":"sim-model","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`},
			{"completions batch", body.RouteCompletions, `{"model":"sim-model","prompt":["a b c","d e f"],"max_tokens":2}`},
			{"generate", body.RouteGenerate, `{"text":"the quick brown fox","sampling_params":{"max_new_tokens":3}}`},
		} {
			name := tc.name
			if grpc {
				name += "/grpc"
			}
			t.Run(name, func(t *testing.T) {
				req, err := body.ParseRequest(tc.route, []byte(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				count, asList := body.SGLangRooms(req)
				if grpc {
					count, asList = body.WorkerRPCRooms(req)
				}
				body, err := body.InjectBootstrap(req.Body, "127.0.0.1", prefill.BootstrapPort(), body.NewRooms(rnd, count), asList)
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				var pStatus int
				var pBody string
				wg.Go(func() {
					pStatus, pBody = call(t, up, workerrpc.RolePrefill, workerURL(t, prefill, grpc), tc.route.Path(), body)
				})
				dStatus, dBody := call(t, up, workerrpc.RoleDecode, workerURL(t, decode, grpc), tc.route.Path(), body)
				wg.Wait()
				if pStatus != 200 || dStatus != 200 {
					t.Fatalf("prefill %d %s\ndecode %d %s", pStatus, pBody, dStatus, dBody)
				}
				if req.Stream && !strings.HasSuffix(dBody, "data: [DONE]\n\n") {
					t.Errorf("decode stream does not end with [DONE]: %s", dBody)
				}
				if !req.Stream && len(dBody) == 0 {
					t.Error("empty decode body")
				}
			})
		}
	}
}

func TestSimVLLMPD(t *testing.T) {
	t.Parallel()
	prefill, decode := startCluster(t, sim.ProtocolVLLM)
	client := backend.NewHTTPClient(backend.HTTPClientOptions{})
	t.Cleanup(client.CloseIdleConnections)
	up := &backend.Upstream{Client: client}
	for _, grpc := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "grpc"}[grpc], func(t *testing.T) {
			orig := []byte(`{"model":"sim-model","messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":true}`)
			pbody, err := body.VLLMPrefillBody(orig)
			if err != nil {
				t.Fatal(err)
			}
			status, presp := call(t, up, workerrpc.RolePrefill, workerURL(t, prefill, grpc), body.RouteChat.Path(), pbody)
			if status != 200 {
				t.Fatalf("prefill %d %s", status, presp)
			}
			params, err := body.ExtractKVTransferParams([]byte(presp))
			if err != nil {
				t.Fatalf("prefill response %s: %v", presp, err)
			}
			dbody, err := body.VLLMDecodeBody(orig, params)
			if err != nil {
				t.Fatal(err)
			}
			status, dresp := call(t, up, workerrpc.RoleDecode, workerURL(t, decode, grpc), body.RouteChat.Path(), dbody)
			if status != 200 || !strings.HasSuffix(dresp, "data: [DONE]\n\n") {
				t.Fatalf("decode %d %s", status, dresp)
			}
		})
	}
}
