package server_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/httpapi"
	"github.com/sluicegw/sluice/internal/server"
)

// A known path with the wrong method is a 405 in OpenAI's shape with code method_not_allowed and an
// Allow header naming the path's methods, on every kind of route: probes, metrics, the OpenAI REST
// surface, the admin REST API.
func TestMethodNotAllowedEverywhere(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("# metrics\n")) })
	_, srv := newServer(t, server.Options{Admin: fakeAdmin{}, REST: httpapi.New(httpapi.Options{}), Metrics: metrics})
	cases := []struct{ method, path, allow string }{
		{"POST", "/health", "GET, HEAD"},
		{"DELETE", "/readiness", "GET, HEAD"},
		{"POST", "/metrics", "GET, HEAD"},
		{"GET", "/v1/chat/completions", "POST"},
		{"PUT", "/v1/embeddings", "POST"},
		{"DELETE", "/rerank", "POST"},
		{"POST", "/v1/models", "GET, HEAD"},
		{"DELETE", "/admin/v1/workers", "GET, POST"},
		{"PUT", "/admin/v1/workers/w1", "GET, PATCH, DELETE"},
		{"GET", "/admin/v1/cache:flush", "POST"},
		{"POST", "/admin/v1/admission", "GET, PATCH"},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := do(t, srv.Client(), tc.method, srv.URL+tc.path, "", http.Header{"Content-Type": {"application/json"}})
			if r.status != http.StatusMethodNotAllowed {
				t.Fatalf("status %d, want 405 (%s)", r.status, r.body)
			}
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			if code, typ, _ := openAIError(t, r); code != apierror.CodeMethodNotAllowed || typ != "invalid_request_error" {
				t.Errorf("error %s %s, want method_not_allowed invalid_request_error", code, typ)
			}
		})
	}
}

// A body declared as anything but JSON on a JSON route is a 415; JSON with parameters, a +json type
// and no Content-Type at all reach the route.
func TestJSONRoutesRefuseOtherMediaTypes(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, server.Options{Admin: fakeAdmin{}})
	for _, tc := range []struct {
		ct     string
		status int
	}{
		{"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"text/plain", http.StatusUnsupportedMediaType},
		{"multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"not a media type;;", http.StatusUnsupportedMediaType},
		{"application/json", http.StatusOK},
		{"application/json; charset=utf-8", http.StatusOK},
		{"application/merge-patch+json", http.StatusOK},
		{"", http.StatusOK},
	} {
		t.Run(tc.ct, func(t *testing.T) {
			h := http.Header{}
			if tc.ct != "" {
				h.Set("Content-Type", tc.ct)
			}
			r := do(t, srv.Client(), "POST", srv.URL+"/admin/v1/workers", `{"url":"http://10.0.0.6:30000","role":"decode"}`, h)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d (%s)", r.status, tc.status, r.body)
			}
			if tc.status != http.StatusOK {
				if code, _, _ := openAIError(t, r); code != apierror.CodeUnsupportedMediaType {
					t.Errorf("code %s, want unsupported_media_type", code)
				}
			}
		})
	}
}

// Admin REST parse errors are in the client's terms: no "proto:", no "(line 1:18)", the field's API
// name in param.
func TestAdminParseErrorsInPlainLanguage(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, server.Options{Admin: fakeAdmin{}})
	cases := []struct{ body, param, message string }{
		{`{"uri":"http://x"}`, "uri", `unknown field "uri" (line 1, column 2)`},
		{`{"url":"http://x","bootstrap_port":-1}`, "bootstrap_port", "field bootstrap_port must be a non-negative integer, got -1 (line 1, column 36)"},
		{`{"url":1}`, "url", "field url must be a string, got 1 (line 1, column 8)"},
		{`{"models":"m"}`, "", `the request body is not valid JSON for this call: unexpected token "m" (line 1, column 11)`},
		{`{"url":`, "", "the request body is not complete JSON: it ends early"},
	}
	for _, tc := range cases {
		t.Run(tc.body, func(t *testing.T) {
			r := do(t, srv.Client(), "POST", srv.URL+"/admin/v1/workers", tc.body, http.Header{"Content-Type": {"application/json"}})
			if r.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400 (%s)", r.status, r.body)
			}
			var b struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(r.body, &b); err != nil {
				t.Fatal(err)
			}
			param := ""
			if b.Error.Param != nil {
				param = *b.Error.Param
			}
			if b.Error.Message != tc.message || param != tc.param || b.Error.Code != apierror.CodeInvalidRequest {
				t.Errorf("got %q param %q code %s, want %q param %q", b.Error.Message, param, b.Error.Code, tc.message, tc.param)
			}
		})
	}
}
