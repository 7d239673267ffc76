package backend

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/google/go-cmp/cmp"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
)

// engineServer answers the given paths with fixed statuses and bodies; everything else is a 404.
func engineServer(t *testing.T, routes map[string]struct {
	status int
	body   string
}) (string, chan string) {
	t.Helper()
	hits := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Authorization")
		rt, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rt.status)
		_, _ = w.Write([]byte(rt.body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, hits
}

type route = struct {
	status int
	body   string
}

func testClient(t *testing.T) *http.Client {
	t.Helper()
	c := NewHTTPClient(HTTPClientOptions{})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestDiscoverModels(t *testing.T) {
	ctx := context.Background()
	url, _ := engineServer(t, map[string]route{
		"GET /v1/models": {200, `{"object":"list","data":[{"id":"a","object":"model"},{"id":""},{"id":"b"}]}`},
	})
	got, err := DiscoverModels(ctx, testClient(t), url+"/")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}

	bad, _ := engineServer(t, map[string]route{"GET /v1/models": {500, `boom`}})
	var se *StatusError
	if _, err := DiscoverModels(ctx, testClient(t), bad); !errors.As(err, &se) || se.Code != 500 || se.Body != "boom" {
		t.Errorf("error = %v, want StatusError 500", err)
	}
	garbage, _ := engineServer(t, map[string]route{"GET /v1/models": {200, `{"data":`}})
	if _, err := DiscoverModels(ctx, testClient(t), garbage); err == nil {
		t.Error("malformed model list accepted")
	}
	if got, err := DiscoverModels(ctx, testClient(t), "grpc://127.0.0.1:1"); got != nil || err != nil {
		t.Errorf("grpc DiscoverModels = %v, %v; want nil, nil", got, err)
	}
}

func TestServerInfoAndDetectProtocol(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		routes  map[string]route
		want    string
		wantErr bool
	}{
		{"sglang get_server_info", map[string]route{"GET /get_server_info": {200, `{"tokenizer_path":"x","disaggregation_mode":"prefill"}`}}, "sglang", false},
		{"new sglang server_info", map[string]route{"GET /server_info": {200, `{"tp_size":1}`}}, "sglang", false},
		{"simulator reports its protocol", map[string]route{"GET /get_server_info": {200, `{"protocol":"vLLM","tokenizer_path":"x"}`}}, "vllm", false},
		{"vllm-ish info", map[string]route{"GET /server_info": {200, `{"vllm_config":{}}`}}, "vllm", false},
		{"neither endpoint", map[string]route{}, "", true},
		{"server error is not a fallback", map[string]route{"GET /get_server_info": {500, `x`}, "GET /server_info": {200, `{"tp_size":1}`}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := engineServer(t, tt.routes)
			info, err := ServerInfo(ctx, testClient(t), url)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ServerInfo() = %v, want error", info)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := DetectProtocol(info); got != tt.want {
				t.Errorf("DetectProtocol(%v) = %q, want %q", info, got, tt.want)
			}
		})
	}
	if got := DetectProtocol(nil); got != "vllm" {
		t.Errorf("DetectProtocol(nil) = %q", got)
	}
}

func TestFetchLoad(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		body    string
		want    Load
		wantErr bool
	}{
		{"sglang ranks", `{"loads":[{"num_running_reqs":2,"num_waiting_reqs":1,"token_usage":0.5},{"num_running_reqs":3,"num_waiting_reqs":0,"token_usage":0.25}]}`, Load{5, 1, 0.375}, false},
		{"flat sglang keys", `{"num_running_reqs":4,"num_waiting_reqs":2,"token_usage":0.1}`, Load{4, 2, 0.1}, false},
		{"worker protocol names", `{"running_requests":1,"waiting_requests":9,"kv_usage":0.9}`, Load{1, 9, 0.9}, false},
		{"nothing recognised", `{"hello":1}`, Load{}, true},
		{"not json", `nope`, Load{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := engineServer(t, map[string]route{"GET /v1/loads": {200, tt.body}})
			got, err := FetchLoad(ctx, testClient(t), url)
			if (err != nil) != tt.wantErr {
				t.Fatalf("FetchLoad() error = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("FetchLoad() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFlushCacheAndProbeHTTP(t *testing.T) {
	ctx := context.Background()
	url, hits := engineServer(t, map[string]route{
		"POST /flush_cache":    {200, `ok`},
		"GET /health":          {200, ``},
		"GET /health_generate": {503, `busy`},
	})
	u := &Upstream{Client: testClient(t), APIKey: "k"}
	if err := u.FlushCache(ctx, url); err != nil {
		t.Fatal(err)
	}
	if got := <-hits; got != "POST /flush_cache Bearer k" {
		t.Errorf("flush request %q", got)
	}
	if err := Probe(ctx, testClient(t), url, ""); err != nil {
		t.Errorf("Probe(/health) = %v", err)
	}
	<-hits
	var se *StatusError
	if err := Probe(ctx, testClient(t), url, "/health_generate"); !errors.As(err, &se) || se.Code != 503 {
		t.Errorf("Probe(/health_generate) = %v, want 503", err)
	}
	<-hits
	if err := Probe(ctx, testClient(t), "http://"+closedAddr(t), ""); err == nil {
		t.Error("Probe of a closed port succeeded")
	}
	if err := FlushCache(ctx, testClient(t), "grpc://127.0.0.1:1"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("grpc FlushCache = %v", err)
	}
}

// grpc:// metadata calls go through NewHTTPClient's grpc:// transport (pass-through to h2c).
func TestGRPCLoadAndProbe(t *testing.T) {
	ctx := context.Background()
	f := &fakeWorker{load: func(context.Context) (*workerv1.GetLoadResponse, error) {
		return &workerv1.GetLoadResponse{RunningRequests: 3, WaitingRequests: 4, KvUsage: 0.5}, nil
	}}
	checker := grpchealth.NewStaticChecker()
	withHealth := startWorker(t, f, func(mux *http.ServeMux) { mux.Handle(grpchealth.NewHandler(checker)) })
	noHealth := startWorker(t, f)
	c := NewHTTPClient(HTTPClientOptions{})
	t.Cleanup(c.CloseIdleConnections) // closes the grpc:// transport's h2c connections too

	got, err := FetchLoad(ctx, c, "grpc://"+withHealth)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Load{Running: 3, Waiting: 4, KVUsage: 0.5}); got != want {
		t.Errorf("FetchLoad(grpc) = %+v, want %+v", got, want)
	}
	if err := Probe(ctx, c, "grpc://"+withHealth, ""); err != nil {
		t.Errorf("Probe(serving) = %v", err)
	}
	checker.SetStatus("", grpchealth.StatusNotServing)
	if err := Probe(ctx, c, "grpc://"+withHealth, ""); err == nil {
		t.Error("Probe(not serving) succeeded")
	}
	// Without the health service: LoadService answers the probe.
	if err := Probe(ctx, c, "grpc://"+noHealth, ""); err != nil {
		t.Errorf("Probe(no health service) = %v", err)
	}
	f.load = nil // now GetLoad is unimplemented too
	if err := Probe(ctx, c, "grpc://"+noHealth, ""); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("Probe(nothing) = %v, want Unimplemented", err)
	}
	if err := Probe(ctx, c, "grpc://"+closedAddr(t), ""); err == nil {
		t.Error("Probe(closed port) succeeded")
	}
	plain := &http.Client{}
	if _, err := FetchLoad(ctx, plain, "grpc://"+withHealth); err == nil {
		t.Error("a client without the grpc:// transport reached a grpc worker")
	}
}
