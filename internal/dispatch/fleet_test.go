package dispatch

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// persona answers the discovery routes an engine serves (engine-protocols.md §3): SGLang serves
// /get_server_info, vLLM /version; both /v1/models with their owned_by.
func persona(t *testing.T, routes map[string]string) (string, *[]string) {
	t.Helper()
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		body, ok := routes[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &auth
}

func TestDetectorComplete(t *testing.T) {
	sglangPrefill := map[string]string{
		"/v1/models":       `{"data":[{"id":"qwen","owned_by":"sglang"}]}`,
		"/get_server_info": `{"disaggregation_mode":"prefill","disaggregation_bootstrap_port":8998,"dp_size":2}`,
	}
	vllm := map[string]string{"/v1/models": `{"data":[{"id":"llama","owned_by":"vllm"}]}`, "/version": `{"version":"0.11"}`}
	tests := []struct {
		name    string
		routes  map[string]string
		spec    worker.Spec
		want    worker.Spec
		wantErr string
	}{
		{
			name:   "a vLLM engine added with only a URL and a role is vLLM",
			routes: vllm,
			spec:   worker.Spec{Role: worker.RolePrefill, APIKey: "k"},
			want:   worker.Spec{Role: worker.RolePrefill, Protocol: worker.ProtocolVLLM, ProtocolSource: worker.ProtocolFromOwnedBy, Models: []string{"llama"}, APIKey: "k"},
		},
		{
			name:   "SGLang prefill: bootstrap port and dp size filled in from server info",
			routes: sglangPrefill,
			spec:   worker.Spec{Role: worker.RolePrefill, APIKey: "k"},
			want: worker.Spec{Role: worker.RolePrefill, Protocol: worker.ProtocolSGLang, ProtocolSource: worker.ProtocolFromOwnedBy,
				Models: []string{"qwen"}, BootstrapPort: 8998, DPSize: 2, APIKey: "k"},
		},
		{
			name:   "the operator's bootstrap port wins",
			routes: sglangPrefill,
			spec:   worker.Spec{Role: worker.RolePrefill, BootstrapPort: 9000, APIKey: "k"},
			want: worker.Spec{Role: worker.RolePrefill, Protocol: worker.ProtocolSGLang, ProtocolSource: worker.ProtocolFromOwnedBy,
				Models: []string{"qwen"}, BootstrapPort: 9000, DPSize: 2, APIKey: "k"},
		},
		{
			name:    "server info saying prefill refuses a decode worker",
			routes:  sglangPrefill,
			spec:    worker.Spec{Role: worker.RoleDecode, APIKey: "k"},
			wantErr: "configured as decode, but the engine's server info says disaggregation_mode prefill",
		},
		{
			name:    "an engine not running PD cannot be a prefill worker",
			routes:  map[string]string{"/get_server_info": `{"disaggregation_mode":"null"}`},
			spec:    worker.Spec{Role: worker.RolePrefill, APIKey: "k"},
			wantErr: "does not run disaggregated",
		},
		{
			name:   "an engine that answers nothing keeps the configured runtime",
			routes: map[string]string{},
			spec:   worker.Spec{Role: worker.RoleDecode, APIKey: "k"},
			want:   worker.Spec{Role: worker.RoleDecode, Protocol: worker.ProtocolVLLM, ProtocolSource: worker.ProtocolFromDefault, Models: []string{"dflt"}, APIKey: "k"},
		},
		{
			name:   "an explicit protocol is kept",
			routes: vllm,
			spec:   worker.Spec{Role: worker.RoleDecode, Protocol: worker.ProtocolSGLang, APIKey: "k"},
			want:   worker.Spec{Role: worker.RoleDecode, Protocol: worker.ProtocolSGLang, ProtocolSource: worker.ProtocolFromConfig, Models: []string{"llama"}, APIKey: "k"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, auth := persona(t, tt.routes)
			tt.spec.URL = url
			d := &Detector{HTTP: &http.Client{}, DefaultProtocol: worker.ProtocolVLLM, DefaultModels: []string{"dflt"}}
			got, err := d.Complete(t.Context(), tt.spec)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, worker.ErrInvalidSpec) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Complete() error = %v, want ErrInvalidSpec containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.want.URL = url
			if got.URL != tt.want.URL || got.Role != tt.want.Role || got.Protocol != tt.want.Protocol ||
				got.ProtocolSource != tt.want.ProtocolSource || strings.Join(got.Models, ",") != strings.Join(tt.want.Models, ",") ||
				got.BootstrapPort != tt.want.BootstrapPort || got.DPSize != tt.want.DPSize {
				t.Errorf("Complete() = %+v\nwant %+v", got, tt.want)
			}
			for _, a := range *auth {
				if a != "Bearer k" {
					t.Errorf("a detection call carried Authorization %q, want the worker's key", a)
				}
			}
		})
	}
}

// An engine that is not listening yet (it loads for minutes) is not given the configured runtime:
// its spec is pending detection, with nothing guessed, and Given is what detection starts from later.
func TestDetectorCompleteUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	d := &Detector{HTTP: &http.Client{}, DefaultProtocol: worker.ProtocolVLLM, DefaultModels: []string{"dflt"}, Timeout: 2 * time.Second}
	for _, configured := range []worker.Protocol{"", worker.ProtocolSGLang} {
		spec := worker.Spec{URL: url, Role: worker.RolePrefill, Protocol: configured, Labels: map[string]string{"a": "b"}}
		got, err := d.Complete(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		wantSource, wantProto := worker.ProtocolPending, worker.ProtocolVLLM
		if configured != "" {
			wantSource, wantProto = worker.ProtocolFromConfig, configured
		}
		if !got.DetectPending || got.ProtocolSource != wantSource || got.Protocol != wantProto || len(got.Models) != 0 || got.KVConnector != "" {
			t.Errorf("configured %q: Complete(unreachable) = %+v; want pending, %s by %s, no models guessed", configured, got, wantProto, wantSource)
		}
		if got.Given == nil || got.Given.Protocol != configured || got.Given.DetectPending || got.Given.Labels["a"] != "b" {
			t.Errorf("configured %q: Given = %+v, want the spec as passed", configured, got.Given)
		}
	}
}
