package backend

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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
	t.Parallel()
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

// Detection follows the Rust gateway's detect_backend.rs: owned_by, then /version, then server info.
// Each row's engine answers only what that engine serves (engine-protocols.md §3).
func TestDetect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sglangInfo := `{"model_path":"m","tp_size":1,"dp_size":4,"disaggregation_mode":"prefill","disaggregation_bootstrap_port":8998}`
	tests := []struct {
		name   string
		routes map[string]route
		want   Detection
	}{
		{
			name: "sglang by owned_by, server info read for the PD fields",
			routes: map[string]route{
				"GET /v1/models":       {200, `{"data":[{"id":"m","owned_by":"sglang"}]}`},
				"GET /get_server_info": {200, sglangInfo},
			},
			want: Detection{Reached: true, Protocol: "sglang", Source: DetectedByOwnedBy, Models: []string{"m"},
				Info: &ServerInfoFields{DisaggregationMode: "prefill", BootstrapPort: 8998, DPSize: 4}},
		},
		{
			name: "vllm by owned_by: no server info asked",
			routes: map[string]route{
				"GET /v1/models": {200, `{"data":[{"id":"m","owned_by":"vllm"}]}`},
				"GET /version":   {200, `{"version":"0.11.0"}`},
			},
			want: Detection{Reached: true, Protocol: "vllm", Source: DetectedByOwnedBy, Models: []string{"m"}},
		},
		{
			name: "vllm by /version when owned_by names no engine, even if it serves /server_info",
			routes: map[string]route{
				"GET /v1/models":   {200, `{"data":[{"id":"m","owned_by":"self_hosted"}]}`},
				"GET /version":     {200, `{"version":"0.11.0"}`},
				"GET /server_info": {200, `{"vllm_config":"..."}`},
			},
			want: Detection{Reached: true, Protocol: "vllm", Source: DetectedByVersion, Models: []string{"m"}},
		},
		{
			name: "older sglang by /server_info",
			routes: map[string]route{
				"GET /server_info": {200, `{"tp_size":1,"disaggregation_mode":"null"}`},
			},
			want: Detection{Reached: true, Protocol: "sglang", Source: DetectedByServerInfo, Info: &ServerInfoFields{DisaggregationMode: "null"}},
		},
		{
			name: "nvidia-branded sglang",
			routes: map[string]route{
				"GET /v1/models":       {200, `{"data":[{"id":"m","owned_by":"nvidia"}]}`},
				"GET /get_server_info": {200, `{"dp_size":"2"}`},
			},
			want: Detection{Reached: true, Protocol: "sglang", Source: DetectedByOwnedBy, Models: []string{"m"}, Info: &ServerInfoFields{DPSize: 2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, hits := engineServer(t, tt.routes)
			got := (&Upstream{Client: testClient(t), APIKey: "k"}).Detect(ctx, url)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Detect (-want +got):\n%s", diff)
			}
			close(hits)
			for h := range hits {
				if !strings.HasSuffix(h, " Bearer k") {
					t.Errorf("%s: a detection call without the worker's API key", h)
				}
			}
		})
	}
	t.Run("an engine that answers nothing", func(t *testing.T) {
		got := (&Upstream{Client: testClient(t)}).Detect(ctx, "http://"+closedAddr(t))
		if got.Protocol != "" || got.Err == nil || got.Reached {
			t.Errorf("Detect(closed) = %+v, want no protocol, an error, and not reached", got)
		}
	})
	t.Run("an engine that answers with errors only", func(t *testing.T) {
		url, hits := engineServer(t, map[string]route{})
		got := (&Upstream{Client: testClient(t)}).Detect(ctx, url)
		close(hits)
		if got.Protocol != "" || got.Err == nil || !got.Reached {
			t.Errorf("Detect(404 everywhere) = %+v, want no protocol, an error, and reached (the configured runtime applies)", got)
		}
	})
	t.Run("grpc scheme", func(t *testing.T) {
		if got := (&Upstream{}).Detect(ctx, "grpc://127.0.0.1:1"); got.Protocol != "grpc" || got.Source != DetectedByURLScheme {
			t.Errorf("Detect(grpc://) = %+v", got)
		}
	})
}

func TestFetchLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		body    string
		want    Load
		wantErr bool
	}{
		{"sglang ranks", `{"loads":[{"dp_rank":0,"num_running_reqs":2,"num_waiting_reqs":1,"token_usage":0.5},{"dp_rank":1,"num_running_reqs":3,"num_waiting_reqs":0,"token_usage":0.25}]}`,
			Load{Running: 5, Waiting: 1, KVUsage: 0.375, Ranks: []RankLoad{{0, 2, 1, 0.5}, {1, 3, 0, 0.25}}}, false},
		{"flat sglang keys", `{"num_running_reqs":4,"num_waiting_reqs":2,"token_usage":0.1}`, Load{Running: 4, Waiting: 2, KVUsage: 0.1}, false},
		{"worker protocol names", `{"running_requests":1,"waiting_requests":9,"kv_usage":0.9}`, Load{Running: 1, Waiting: 9, KVUsage: 0.9}, false},
		{"nothing recognised", `{"hello":1}`, Load{}, true},
		{"not json", `nope`, Load{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := engineServer(t, map[string]route{"GET /v1/loads": {200, tt.body}})
			got, err := FetchLoad(ctx, testClient(t), url, "sglang")
			if (err != nil) != tt.wantErr {
				t.Fatalf("FetchLoad() error = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FetchLoad() (-want +got):\n%s", diff)
			}
		})
	}
}

// Older SGLang has no /v1/loads: GET /get_load answers a list per data-parallel rank whose num_reqs
// counts running and waiting requests (io_struct.py GetLoadReqOutput).
func TestFetchLoadGetLoadFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, hits := engineServer(t, map[string]route{
		"GET /get_load": {200, `[{"dp_rank":0,"num_reqs":5,"num_waiting_reqs":2,"num_tokens":100},{"dp_rank":1,"num_reqs":1,"num_waiting_reqs":0,"num_tokens":7}]`},
	})
	got, err := FetchLoad(ctx, testClient(t), url, "sglang")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Load{Running: 4, Waiting: 2, Ranks: []RankLoad{{Rank: 0, Running: 3, Waiting: 2}, {Rank: 1, Running: 1}}}); !cmp.Equal(got, want) {
		t.Errorf("FetchLoad(/get_load) = %+v, want %+v", got, want)
	}
	if a, b := <-hits, <-hits; !strings.HasPrefix(a, "GET /v1/loads") || !strings.HasPrefix(b, "GET /get_load") {
		t.Errorf("calls %q, %q; want /v1/loads then /get_load", a, b)
	}
	failing, _ := engineServer(t, map[string]route{"GET /v1/loads": {500, `x`}, "GET /get_load": {200, `[{"num_reqs":1}]`}})
	if _, err := FetchLoad(ctx, testClient(t), failing, "sglang"); err == nil {
		t.Error("a failing /v1/loads fell back to /get_load: only a missing route should")
	}
}

// vLLM reports its load only as Prometheus gauges (vllm/v1/metrics/loggers.py); they are read with the
// Prometheus text parser and summed over series.
func TestFetchLoadVLLMMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const exposition = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
`
	url, _ := engineServer(t, map[string]route{"GET /metrics": {200, exposition}})
	got, err := FetchLoad(ctx, testClient(t), url, "vllm")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Load{Running: 4, Waiting: 2, KVUsage: 0.375}); !cmp.Equal(got, want) {
		t.Errorf("FetchLoad(vllm) = %+v, want %+v", got, want)
	}
	noGauges, _ := engineServer(t, map[string]route{"GET /metrics": {200, "# TYPE up gauge\nup 1\n"}})
	if _, err := FetchLoad(ctx, testClient(t), noGauges, "vllm"); err == nil {
		t.Error("metrics without vLLM's gauges read as an idle engine")
	}
	garbage, _ := engineServer(t, map[string]route{"GET /metrics": {200, "vllm:num_requests_running{ 3"}})
	if _, err := FetchLoad(ctx, testClient(t), garbage, "vllm"); err == nil {
		t.Error("a malformed exposition was accepted")
	}
}

func TestFlushCacheAndProbeHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, hits := engineServer(t, map[string]route{
		"POST /flush_cache":    {200, `ok`},
		"GET /health":          {200, ``},
		"GET /health_generate": {503, `busy`},
	})
	u := &Upstream{Client: testClient(t), APIKey: "k"}
	if err := u.FlushCache(ctx, url, "sglang"); err != nil {
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
	if _, err := (&Upstream{Client: testClient(t)}).FetchLoad(ctx, "grpc://127.0.0.1:1", "trtllm"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("trtllm FetchLoad = %v, want ErrNotSupported (TensorRT-LLM's service has no GetLoads)", err)
	}
	if err := FlushCache(ctx, testClient(t), "grpc://127.0.0.1:1", "grpc"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("grpc FlushCache = %v", err)
	}
	if err := FlushCache(ctx, testClient(t), url, "vllm"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("vllm FlushCache = %v, want ErrNotSupported (vLLM serves no /flush_cache)", err)
	}
}

// grpc:// metadata calls go through NewHTTPClient's grpc:// transport (pass-through to h2c).
func TestGRPCLoadAndProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &fakeWorker{load: func(context.Context) (*workerv1.GetLoadResponse, error) {
		return &workerv1.GetLoadResponse{RunningRequests: 3, WaitingRequests: 4, KvUsage: 0.5}, nil
	}}
	checker := grpchealth.NewStaticChecker()
	withHealth := startWorker(t, f, func(mux *http.ServeMux) { mux.Handle(grpchealth.NewHandler(checker)) })
	noHealth := startWorker(t, f)
	c := NewHTTPClient(HTTPClientOptions{})
	t.Cleanup(c.CloseIdleConnections) // closes the grpc:// transport's h2c connections too

	got, err := FetchLoad(ctx, c, "grpc://"+withHealth, "grpc")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Load{Running: 3, Waiting: 4, KVUsage: 0.5}); !cmp.Equal(got, want) {
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
	if _, err := FetchLoad(ctx, plain, "grpc://"+withHealth, "grpc"); err == nil {
		t.Error("a client without the grpc:// transport reached a grpc worker")
	}
}
