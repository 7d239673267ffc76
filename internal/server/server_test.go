package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/server"
)

// fakeAdmin knows one worker, w1; every other id is NotFound.
type fakeAdmin struct {
	adminv1.UnimplementedAdminServiceServer
}

var w1 = &adminv1.Worker{Id: "w1", Url: "http://10.0.0.5:30000", Role: "regular", Protocol: "sglang", Health: "ready"}

func (fakeAdmin) ListWorkers(context.Context, *adminv1.ListWorkersRequest) (*adminv1.ListWorkersResponse, error) {
	return &adminv1.ListWorkersResponse{Workers: []*adminv1.Worker{w1}}, nil
}

func (fakeAdmin) GetWorker(_ context.Context, req *adminv1.GetWorkerRequest) (*adminv1.GetWorkerResponse, error) {
	if req.GetId() != "w1" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("worker "+req.GetId()+" not found"))
	}
	return &adminv1.GetWorkerResponse{Worker: w1}, nil
}

func (fakeAdmin) AddWorker(_ context.Context, req *adminv1.AddWorkerRequest) (*adminv1.AddWorkerResponse, error) {
	return &adminv1.AddWorkerResponse{Worker: &adminv1.Worker{Id: "w2", Url: req.GetWorker().GetUrl()}}, nil
}

const adminKey = "admin-secret"

// bearer mirrors the gateway's auth check: the error is a classified 401.
func bearer(key string) func(*http.Request) (context.Context, error) {
	return func(r *http.Request) (context.Context, error) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			return nil, apierror.New(http.StatusUnauthorized, apierror.CodeUnauthorized, "missing or invalid admin API key", nil)
		}
		return r.Context(), nil
	}
}

func newServer(t *testing.T, o server.Options) (*server.Handlers, *httptest.Server) {
	t.Helper()
	hs, err := server.NewHandlers(o)
	if err != nil {
		t.Fatalf("NewHandlers: %v", err)
	}
	srv := httptest.NewServer(hs.Main)
	t.Cleanup(srv.Close)
	return hs, srv
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, c *http.Client, method, url, body string, header http.Header) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// openAIError decodes an OpenAI-shaped error body, failing the test when the shape is wrong.
func openAIError(t *testing.T, r response) (code, typ, message string) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var b struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || b.Error == nil {
		t.Fatalf("body %q is not an OpenAI error (%v)", r.body, err)
	}
	return b.Error.Code, b.Error.Type, b.Error.Message
}

func TestHealth(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, server.Options{})
	r := do(t, srv.Client(), http.MethodGet, srv.URL+"/health", "", nil)
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"status":"ok"}` {
		t.Errorf("GET /health = %d %q, want 200 {\"status\":\"ok\"}", r.status, r.body)
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		ready      func() error
		wantStatus int
		want       map[string]string
	}{
		{name: "no ready check", ready: nil, wantStatus: 200, want: map[string]string{"status": "ready"}},
		{name: "ready", ready: func() error { return nil }, wantStatus: 200, want: map[string]string{"status": "ready"}},
		{
			name:       "not ready gives the reason",
			ready:      func() error { return errors.New(`no healthy "prefill" worker`) },
			wantStatus: 503,
			want:       map[string]string{"status": "not_ready", "reason": `no healthy "prefill" worker`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, srv := newServer(t, server.Options{Ready: tt.ready})
			r := do(t, srv.Client(), http.MethodGet, srv.URL+"/readiness", "", nil)
			if r.status != tt.wantStatus {
				t.Errorf("status = %d, want %d", r.status, tt.wantStatus)
			}
			var got map[string]string
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatalf("body %q is not JSON: %v", r.body, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("body mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadinessReasonIsValidJSON(t *testing.T) {
	t.Parallel()
	reason := "worker http://a answered \x7f\xff"
	_, srv := newServer(t, server.Options{Ready: func() error { return errors.New(reason) }})
	r := do(t, srv.Client(), http.MethodGet, srv.URL+"/readiness", "", nil)
	var got map[string]string
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
}

func TestUnknownPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, path string
	}{
		{http.MethodGet, "/nope"},
		{http.MethodPost, "/v2/chat/completions"},
		{http.MethodDelete, "/"},
	}
	_, srv := newServer(t, server.Options{Admin: fakeAdmin{}})
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := do(t, srv.Client(), tt.method, srv.URL+tt.path, "", nil)
			if r.status != http.StatusNotFound {
				t.Errorf("status = %d, want 404", r.status)
			}
			code, typ, msg := openAIError(t, r)
			if code != apierror.CodeNotFound || typ != "not_found_error" || msg != "no route for "+tt.method+" "+tt.path {
				t.Errorf("error = %s %s %q", code, typ, msg)
			}
		})
	}
}

func TestAdminREST(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantCode   string // error code; "" for success
		wantJSON   string // substring of a successful body
	}{
		{name: "get known worker", method: "GET", path: "/admin/v1/workers/w1", wantStatus: 200, wantJSON: `"url":"http://10.0.0.5:30000"`},
		{name: "list uses proto names", method: "GET", path: "/admin/v1/workers", wantStatus: 200, wantJSON: `"bootstrap_port":0`},
		{name: "connect NotFound becomes 404", method: "GET", path: "/admin/v1/workers/w9", wantStatus: 404, wantCode: apierror.CodeNotFound},
		{name: "add worker", method: "POST", path: "/admin/v1/workers", body: `{"url":"http://10.0.0.6:30000","role":"decode"}`, wantStatus: 200, wantJSON: `"id":"w2"`},
		{name: "malformed JSON body", method: "POST", path: "/admin/v1/workers", body: `{"url":`, wantStatus: 400, wantCode: apierror.CodeInvalidRequest},
		{name: "unknown field", method: "POST", path: "/admin/v1/workers", body: `{"uri":"http://x"}`, wantStatus: 400, wantCode: apierror.CodeInvalidRequest},
		{name: "unimplemented method", method: "GET", path: "/admin/v1/admission", wantStatus: 501, wantCode: apierror.CodeUnimplemented},
		{name: "unknown admin route", method: "GET", path: "/admin/v1/nothing", wantStatus: 404, wantCode: apierror.CodeNotFound},
	}
	_, srv := newServer(t, server.Options{Admin: fakeAdmin{}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, srv.Client(), tt.method, srv.URL+tt.path, tt.body, http.Header{"Content-Type": {"application/json"}})
			if r.status != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %s)", r.status, tt.wantStatus, r.body)
			}
			if tt.wantCode == "" {
				if !strings.Contains(string(r.body), tt.wantJSON) {
					t.Errorf("body %s does not contain %s", r.body, tt.wantJSON)
				}
				return
			}
			if code, _, _ := openAIError(t, r); code != tt.wantCode {
				t.Errorf("code = %q, want %q", code, tt.wantCode)
			}
		})
	}
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, server.Options{Admin: fakeAdmin{}, AdminAuth: bearer(adminKey)})
	authed := http.Header{"Authorization": {"Bearer " + adminKey}}

	t.Run("REST", func(t *testing.T) {
		tests := []struct {
			name       string
			header     http.Header
			wantStatus int
		}{
			{name: "no key", header: nil, wantStatus: 401},
			{name: "wrong key", header: http.Header{"Authorization": {"Bearer nope"}}, wantStatus: 401},
			{name: "right key", header: authed, wantStatus: 200},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := do(t, srv.Client(), http.MethodGet, srv.URL+"/admin/v1/workers", "", tt.header)
				if r.status != tt.wantStatus {
					t.Fatalf("status = %d, want %d", r.status, tt.wantStatus)
				}
				if tt.wantStatus == 401 {
					if code, typ, _ := openAIError(t, r); code != apierror.CodeUnauthorized || typ != "authentication_error" {
						t.Errorf("error = %s %s, want %s authentication_error", code, typ, apierror.CodeUnauthorized)
					}
				}
			})
		}
	})

	t.Run("Connect", func(t *testing.T) {
		client := adminv1connect.NewAdminServiceClient(srv.Client(), srv.URL)
		tests := []struct {
			name     string
			key      string
			wantCode connect.Code // 0 for success
		}{
			{name: "no key", wantCode: connect.CodeUnauthenticated},
			{name: "wrong key", key: "nope", wantCode: connect.CodeUnauthenticated},
			{name: "right key", key: adminKey},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := t.Context()
				if tt.key != "" {
					var info connect.CallInfo
					ctx, info = connect.NewClientContext(ctx)
					info.RequestHeader().Set("Authorization", "Bearer "+tt.key)
				}
				resp, err := client.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
				if tt.wantCode == 0 {
					if err != nil {
						t.Fatalf("ListWorkers: %v", err)
					}
					if len(resp.GetWorkers()) != 1 || resp.GetWorkers()[0].GetId() != "w1" {
						t.Errorf("ListWorkers = %v, want [w1]", resp.GetWorkers())
					}
					return
				}
				if connect.CodeOf(err) != tt.wantCode {
					t.Fatalf("ListWorkers error = %v, want code %v", err, tt.wantCode)
				}
				if got := apierror.CodeString(err); got != apierror.CodeUnauthorized {
					t.Errorf("error detail code = %q, want %q", got, apierror.CodeUnauthorized)
				}
			})
		}
	})

	t.Run("health is not guarded", func(t *testing.T) {
		if r := do(t, srv.Client(), http.MethodGet, srv.URL+"/health", "", nil); r.status != 200 {
			t.Errorf("GET /health = %d, want 200", r.status)
		}
	})
}

func TestInferenceAuthGuardsREST(t *testing.T) {
	t.Parallel()
	rest := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok "+r.URL.Path) })
	_, srv := newServer(t, server.Options{REST: rest, InferenceAuth: bearer("k")})
	tests := []struct {
		name       string
		path       string
		header     http.Header
		wantStatus int
		wantBody   string
	}{
		{name: "models without key", path: "/v1/models", wantStatus: 401},
		{name: "generate without key", path: "/generate", wantStatus: 401},
		{name: "models with key", path: "/v1/models", header: http.Header{"Authorization": {"Bearer k"}}, wantStatus: 200, wantBody: "ok /v1/models"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, srv.Client(), http.MethodGet, srv.URL+tt.path, "", tt.header)
			if r.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d", r.status, tt.wantStatus)
			}
			if tt.wantStatus == 401 {
				openAIError(t, r)
			} else if string(r.body) != tt.wantBody {
				t.Errorf("body = %q, want %q", r.body, tt.wantBody)
			}
		})
	}
}

func TestGRPCHealth(t *testing.T) {
	t.Parallel()
	notReady := errors.New("no healthy decode worker")
	tests := []struct {
		name     string
		ready    func() error
		service  string
		want     healthv1.HealthCheckResponse_ServingStatus
		wantCode connect.Code // non-zero: the call fails with it
	}{
		{name: "server as a whole", ready: func() error { return notReady }, service: "", want: healthv1.HealthCheckResponse_SERVING},
		{name: "admin service", ready: func() error { return notReady }, service: adminv1connect.AdminServiceName, want: healthv1.HealthCheckResponse_SERVING},
		{name: "openai service not ready", ready: func() error { return notReady }, service: openaiv1connect.OpenAIServiceName, want: healthv1.HealthCheckResponse_NOT_SERVING},
		{name: "openai service ready", ready: func() error { return nil }, service: openaiv1connect.OpenAIServiceName, want: healthv1.HealthCheckResponse_SERVING},
		{name: "openai service without ready check", ready: nil, service: openaiv1connect.OpenAIServiceName, want: healthv1.HealthCheckResponse_SERVING},
		{name: "unknown service", ready: func() error { return nil }, service: "acme.Nope", wantCode: connect.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, srv := newServer(t, server.Options{Ready: tt.ready})
			client := connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](
				srv.Client(), srv.URL+"/grpc.health.v1.Health/Check")
			resp, err := client.CallUnary(t.Context(), connect.NewRequest(&healthv1.HealthCheckRequest{Service: tt.service}))
			if tt.wantCode != 0 {
				if connect.CodeOf(err) != tt.wantCode {
					t.Fatalf("Check error = %v, want code %v", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if got := resp.Msg.GetStatus(); got != tt.want {
				t.Errorf("status = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSeparateAdmin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		separate      bool
		wantMainAdmin int // status of GET /admin/v1/workers on Main
	}{
		{name: "shared port", separate: false, wantMainAdmin: 200},
		{name: "separate admin port", separate: true, wantMainAdmin: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, mainSrv := newServer(t, server.Options{Admin: fakeAdmin{}, SeparateAdmin: tt.separate, Pprof: true})
			if (hs.Admin != nil) != tt.separate {
				t.Fatalf("Handlers.Admin set = %v, want %v", hs.Admin != nil, tt.separate)
			}
			c := mainSrv.Client()
			if r := do(t, c, http.MethodGet, mainSrv.URL+"/admin/v1/workers", "", nil); r.status != tt.wantMainAdmin {
				t.Errorf("Main GET /admin/v1/workers = %d, want %d", r.status, tt.wantMainAdmin)
			}
			if r := do(t, c, http.MethodGet, mainSrv.URL+"/debug/pprof/cmdline", "", nil); r.status != tt.wantMainAdmin {
				t.Errorf("Main GET /debug/pprof/cmdline = %d, want %d", r.status, tt.wantMainAdmin)
			}
			_, err := adminv1connect.NewAdminServiceClient(c, mainSrv.URL).ListWorkers(t.Context(), &adminv1.ListWorkersRequest{})
			if tt.separate {
				// The main port's catch-all answers 404, which Connect reports as Unimplemented.
				if connect.CodeOf(err) != connect.CodeUnimplemented {
					t.Errorf("Main Connect ListWorkers error = %v, want Unimplemented", err)
				}
			} else if err != nil {
				t.Errorf("Main Connect ListWorkers: %v", err)
			}
			if r := do(t, c, http.MethodGet, mainSrv.URL+"/health", "", nil); r.status != 200 {
				t.Errorf("Main GET /health = %d, want 200", r.status)
			}
			if !tt.separate {
				return
			}

			adminSrv := httptest.NewServer(hs.Admin)
			defer adminSrv.Close()
			ac := adminSrv.Client()
			if r := do(t, ac, http.MethodGet, adminSrv.URL+"/admin/v1/workers", "", nil); r.status != 200 {
				t.Errorf("Admin GET /admin/v1/workers = %d, want 200", r.status)
			}
			if r := do(t, ac, http.MethodGet, adminSrv.URL+"/debug/pprof/cmdline", "", nil); r.status != 200 {
				t.Errorf("Admin GET /debug/pprof/cmdline = %d, want 200", r.status)
			}
			resp, err := adminv1connect.NewAdminServiceClient(ac, adminSrv.URL).ListWorkers(t.Context(), &adminv1.ListWorkersRequest{})
			if err != nil || len(resp.GetWorkers()) != 1 {
				t.Errorf("Admin Connect ListWorkers = %v, %v; want one worker", resp, err)
			}
			if r := do(t, ac, http.MethodGet, adminSrv.URL+"/health", "", nil); r.status == 200 {
				t.Error("Admin port serves /health; only admin routes belong there")
			}
		})
	}
}
