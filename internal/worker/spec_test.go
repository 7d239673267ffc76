package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRoleProtocol(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"regular", "prefill", "decode"} {
		if r, err := ParseRole(s); err != nil || string(r) != s {
			t.Errorf("ParseRole(%q) = %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"sglang", "vllm", "grpc", "trtllm"} {
		if p, err := ParseProtocol(s); err != nil || string(p) != s {
			t.Errorf("ParseProtocol(%q) = %q, %v", s, p, err)
		}
	}
	if _, err := ParseRole("Prefil"); err == nil || !strings.Contains(err.Error(), `"Prefil"`) {
		t.Errorf("ParseRole(bad) error = %v, want it to name the value", err)
	}
	if _, err := ParseProtocol("tgi"); err == nil || !strings.Contains(err.Error(), `"tgi"`) {
		t.Errorf("ParseProtocol(bad) error = %v, want it to name the value", err)
	}
}

// A TensorRT-LLM worker is a regular grpc:// worker: it has no KV handoff.
func TestTRTLLMSpec(t *testing.T) {
	t.Parallel()
	ok := Spec{URL: "grpc://h:50051", Protocol: ProtocolTRTLLM, Role: RoleRegular}
	if err := ok.Validate(); err != nil {
		t.Errorf("regular trtllm worker: %v", err)
	}
	if h := ok.Handoff(); h != HandoffNone {
		t.Errorf("trtllm handoff = %s, want none", h)
	}
	for _, s := range []Spec{
		{URL: "http://h:8000", Protocol: ProtocolTRTLLM, Role: RoleRegular},
		{URL: "grpc://h:50051", Protocol: ProtocolTRTLLM, Role: RolePrefill},
		{URL: "grpc://h:50051", Protocol: ProtocolTRTLLM, Role: RoleDecode},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%s %s at %s: valid, want refused", s.Role, s.Protocol, s.URL)
		}
	}
	if err := (Spec{URL: "grpc://h:1", Protocol: ProtocolTRTLLM, Role: RoleDecode}).Validate(); !errors.Is(err, ErrTRTLLMRole) {
		t.Errorf("decode trtllm: %v, want ErrTRTLLMRole", err)
	}
}

func TestSpecNormalized(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      Spec
		want    Spec
		wantErr string
	}{
		{
			name: "defaults and trailing slash",
			in:   Spec{URL: "HTTP://Worker-1:30000/", Models: []string{"b", "a", "b"}},
			want: Spec{URL: "http://worker-1:30000", Role: RoleRegular, Protocol: ProtocolSGLang, Models: []string{"a", "b"}},
		},
		{
			name: "grpc scheme defaults protocol",
			in:   Spec{URL: "grpc://10.0.0.1:50051", Role: RoleDecode},
			want: Spec{URL: "grpc://10.0.0.1:50051", Role: RoleDecode, Protocol: ProtocolGRPC},
		},
		{
			name: "prefill with bootstrap port and path",
			in:   Spec{URL: "https://h/engine/", Role: RolePrefill, Protocol: ProtocolVLLM, BootstrapPort: 8998},
			want: Spec{URL: "https://h/engine", Role: RolePrefill, Protocol: ProtocolVLLM, BootstrapPort: 8998, KVConnector: KVConnectorNIXL},
		},
		{name: "empty url", in: Spec{}, wantErr: "empty worker URL"},
		{name: "kv_both on sglang decode", in: Spec{URL: "http://h:1", Role: RoleDecode, Protocol: ProtocolSGLang, KVRole: KVRoleBoth}, wantErr: "only vllm engines can prefill on their own"},
		{name: "kv_both on vllm prefill", in: Spec{URL: "http://h:1", Role: RolePrefill, Protocol: ProtocolVLLM, KVRole: KVRoleBoth}, wantErr: "only decode workers"},
		{name: "unknown kv role", in: Spec{URL: "http://h:1", Role: RoleDecode, Protocol: ProtocolVLLM, KVRole: "kv_consumer"}, wantErr: "unknown kv role"},
		{
			name: "kv_both on vllm decode",
			in:   Spec{URL: "http://h:1", Role: RoleDecode, Protocol: ProtocolVLLM, KVRole: KVRoleBoth},
			want: Spec{URL: "http://h:1", Role: RoleDecode, Protocol: ProtocolVLLM, KVConnector: KVConnectorNIXL, KVRole: KVRoleBoth},
		},
		{name: "bad scheme", in: Spec{URL: "ftp://h:1"}, wantErr: "scheme"},
		{name: "no host", in: Spec{URL: "http://:8000"}, wantErr: "no host"},
		{name: "bad port", in: Spec{URL: "http://h:70000"}, wantErr: "bad port"},
		{name: "user info", in: Spec{URL: "http://u:p@h:1"}, wantErr: "user info"},
		{name: "query", in: Spec{URL: "http://h:1/?a=b"}, wantErr: "query"},
		{name: "bad role", in: Spec{URL: "http://h:1", Role: "boss"}, wantErr: `"boss"`},
		{name: "bad protocol", in: Spec{URL: "http://h:1", Protocol: "tgi"}, wantErr: `"tgi"`},
		{name: "grpc protocol on http url", in: Spec{URL: "http://h:1", Protocol: ProtocolGRPC}, wantErr: "does not match"},
		{name: "bootstrap on decode", in: Spec{URL: "http://h:1", Role: RoleDecode, BootstrapPort: 9}, wantErr: "only prefill"},
		{name: "bootstrap out of range", in: Spec{URL: "http://h:1", Role: RolePrefill, BootstrapPort: 65536}, wantErr: "out of range"},
		{name: "empty model", in: Spec{URL: "http://h:1", Models: []string{" "}}, wantErr: "empty model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.Normalized()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Normalized() error = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Normalized() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Normalized() mismatch (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate(normalized) = %v", err)
			}
		})
	}
}

func TestSpecCloneIsDeep(t *testing.T) {
	t.Parallel()
	s := Spec{URL: "http://h:1", Models: []string{"m"}, Labels: map[string]string{"k": "v"}}
	c := s.Clone()
	c.Models[0] = "x"
	c.Labels["k"] = "x"
	if s.Models[0] != "m" || s.Labels["k"] != "v" {
		t.Fatalf("Clone shares memory: %+v", s)
	}
}
