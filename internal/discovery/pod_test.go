package discovery

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/worker"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	pd := classifier{
		pd:              true,
		prefillSelector: map[string]string{"app": "sglang", "role": "prefill"},
		decodeSelector:  map[string]string{"app": "sglang", "role": "decode"},
		port:            30000,
		modelFrom:       config.ModelIDSource{Kind: config.ModelFromLabel, Key: "model"},
	}
	now := metav1.Now()
	grace := int64(7)
	tests := []struct {
		name      string
		pod       *corev1.Pod
		c         classifier
		state     podState
		role      worker.Role
		url       string
		bootstrap int
		model     string
		grace     time.Duration
		refusal   error
	}{
		{name: "deleted", pod: nil, state: stateGone},
		{name: "ready prefill with annotation and model label", pod: mkPod("p", prefillLabels("m1"), "10.0.0.1", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{BootstrapPortAnnotation: "8998"}
			p.Spec.TerminationGracePeriodSeconds = &grace
		}), state: stateServe, role: worker.RolePrefill, url: "http://10.0.0.1:30000", bootstrap: 8998, model: "m1", grace: 7 * time.Second},
		{name: "ready decode, no model label", pod: mkPod("d", decodeLabels(""), "10.0.0.2", true), state: stateServe, role: worker.RoleDecode, url: "http://10.0.0.2:30000", grace: defaultGrace},
		{name: "ipv6 pod", pod: mkPod("d", decodeLabels(""), "fd00::5", true), state: stateServe, role: worker.RoleDecode, url: "http://[fd00::5]:30000", grace: defaultGrace},
		{name: "not ready", pod: mkPod("d", decodeLabels(""), "10.0.0.2", false), state: stateUnready, role: worker.RoleDecode, grace: defaultGrace},
		{name: "no IP yet", pod: mkPod("d", decodeLabels(""), "", true), state: stateUnready, role: worker.RoleDecode, grace: defaultGrace},
		{name: "pending phase", pod: mkPod("d", decodeLabels(""), "10.0.0.2", true, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), state: stateUnready, role: worker.RoleDecode, grace: defaultGrace},
		{name: "terminating", pod: mkPod("d", decodeLabels(""), "10.0.0.2", true, func(p *corev1.Pod) { p.DeletionTimestamp = &now }), state: stateGone, role: worker.RoleDecode, grace: defaultGrace},
		{name: "failed", pod: mkPod("d", decodeLabels(""), "10.0.0.2", false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), state: stateGone, role: worker.RoleDecode, grace: defaultGrace},
		{name: "labels no longer match", pod: mkPod("x", map[string]string{"app": "sglang"}, "10.0.0.2", true), state: stateGone, grace: defaultGrace},
		{name: "matches both roles", c: classifier{pd: true, prefillSelector: map[string]string{"app": "a"}, decodeSelector: map[string]string{"tier": "t"}, port: 1},
			pod: mkPod("x", map[string]string{"app": "a", "tier": "t"}, "10.0.0.2", true), state: stateGone, grace: defaultGrace, refusal: ErrAmbiguousRole},
		{name: "bad bootstrap annotation", pod: mkPod("p", prefillLabels(""), "10.0.0.1", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{BootstrapPortAnnotation: "eighty"}
		}), state: stateGone, role: worker.RolePrefill, grace: defaultGrace, refusal: ErrBadAnnotation},
		{name: "bad dp size annotation", pod: mkPod("p", prefillLabels(""), "10.0.0.1", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{DPSizeAnnotation: "0"}
		}), state: stateGone, role: worker.RolePrefill, grace: defaultGrace, refusal: ErrBadAnnotation},
		{name: "bad kv connector annotation", pod: mkPod("d", decodeLabels(""), "10.0.0.2", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{KVConnectorAnnotation: "p2p"}
		}), state: stateGone, role: worker.RoleDecode, grace: defaultGrace, refusal: ErrBadAnnotation},
		{name: "bad kv role annotation", pod: mkPod("d", decodeLabels(""), "10.0.0.2", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{KVRoleAnnotation: "kv_consumer"}
		}), state: stateGone, role: worker.RoleDecode, grace: defaultGrace, refusal: ErrBadAnnotation},
		{name: "kv role annotation on a prefill pod", pod: mkPod("p", prefillLabels(""), "10.0.0.1", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{KVRoleAnnotation: "kv_both"}
		}), state: stateGone, role: worker.RolePrefill, grace: defaultGrace, refusal: ErrBadAnnotation},
		{name: "regular mode", c: classifier{selector: map[string]string{"app": "vllm"}, port: 8000, modelFrom: config.ModelIDSource{Kind: config.ModelFromNamespace}},
			pod: mkPod("r", map[string]string{"app": "vllm"}, "10.0.0.9", true), state: stateServe, role: worker.RoleRegular, url: "http://10.0.0.9:8000", model: "inference", grace: defaultGrace},
		{name: "engines in grpc mode", c: classifier{selector: map[string]string{"app": "vllm"}, port: 50051, scheme: "grpc", modelFrom: config.ModelIDSource{Kind: config.ModelFromNamespace}},
			pod: mkPod("r", map[string]string{"app": "vllm"}, "10.0.0.9", true), state: stateServe, role: worker.RoleRegular, url: "grpc://10.0.0.9:50051", model: "inference", grace: defaultGrace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			if c.port == 0 {
				c = pd
			}
			v := c.view(tt.pod)
			if v.state != tt.state || v.role != tt.role || v.url != tt.url || v.bootstrapPort != tt.bootstrap || v.model != tt.model {
				t.Errorf("view = state %d role %q url %q bootstrap %d model %q; want %d %q %q %d %q",
					v.state, v.role, v.url, v.bootstrapPort, v.model, tt.state, tt.role, tt.url, tt.bootstrap, tt.model)
			}
			if tt.pod != nil && v.grace != tt.grace {
				t.Errorf("grace = %v, want %v", v.grace, tt.grace)
			}
			if !errors.Is(v.refusal, tt.refusal) || (tt.refusal == nil) != (v.refusal == nil) {
				t.Errorf("refusal = %v, want %v", v.refusal, tt.refusal)
			}
		})
	}
	// What an engine cannot be asked comes from annotations into the spec.
	v := pd.view(mkPod("d", decodeLabels("m"), "10.0.0.3", true, func(p *corev1.Pod) {
		p.Annotations = map[string]string{DPSizeAnnotation: "4", KVConnectorAnnotation: "mooncake", DecodeWindowAnnotation: "16", KVRoleAnnotation: " kv_both "}
	}))
	if s := v.spec(); s.DPSize != 4 || s.KVConnector != worker.KVConnectorMooncake || s.DecodeWindow != 16 || s.KVRole != worker.KVRoleBoth {
		t.Errorf("spec from annotations = dp %d connector %q window %d kv role %q", s.DPSize, s.KVConnector, s.DecodeWindow, s.KVRole)
	}
}

func TestListSelector(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    classifier
		want string
	}{
		{"regular", classifier{selector: map[string]string{"app": "x", "tier": "y"}}, "app=x,tier=y"},
		{"pd common pairs", classifier{pd: true, prefillSelector: map[string]string{"app": "s", "role": "p"}, decodeSelector: map[string]string{"app": "s", "role": "d"}}, "app=s"},
		{"pd nothing shared", classifier{pd: true, prefillSelector: map[string]string{"a": "1"}, decodeSelector: map[string]string{"b": "2"}}, ""},
		{"pd one role only", classifier{pd: true, decodeSelector: map[string]string{"role": "d"}}, "role=d"},
	}
	for _, tt := range tests {
		if got := config.FormatSelector(tt.c.listSelector()); got != tt.want {
			t.Errorf("%s: list selector = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestKnownModels(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		models []string
		want   bool
	}{{nil, false}, {[]string{"m"}, true}, {[]string{"unknown"}, false}, {[]string{"m", "Unknown"}, false}, {[]string{" "}, false}} {
		if got := knownModels(tt.models); got != tt.want {
			t.Errorf("knownModels(%q) = %v, want %v", tt.models, got, tt.want)
		}
	}
}

// TestKVEventsAnnotation: the events endpoint of a pod, with the engine's own bind hosts ("*" or none)
// resolved to the pod's IP; a bad one refuses the pod.
func TestKVEventsAnnotation(t *testing.T) {
	t.Parallel()
	c := classifier{selector: map[string]string{"app": "vllm"}, port: 8000}
	for _, tt := range []struct{ raw, want string }{
		{"tcp://*:5557?replay=tcp://*:5558", "tcp://10.0.0.9:5557?replay=tcp://10.0.0.9:5558"},
		{"tcp://:5557", "tcp://10.0.0.9:5557"},
		{"tcp://events.example:5557?dp=2", "tcp://events.example:5557?dp=2"},
		{"tcp://*:5557?dp=2&replay=tcp://*:5558", "tcp://10.0.0.9:5557?replay=tcp://10.0.0.9:5558&dp=2"},
	} {
		v := c.view(mkPod("r", map[string]string{"app": "vllm"}, "10.0.0.9", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{KVEventsAnnotation: tt.raw}
		}))
		if v.state != stateServe || v.spec().KVEvents != tt.want {
			t.Errorf("%s: state %d, spec %q; want served with %q (refusal %v)", tt.raw, v.state, v.spec().KVEvents, tt.want, v.refusal)
		}
	}
	for _, raw := range []string{"5557", "tcp://*:x", "ipc:///tmp/e", "tcp://*:5557?dp=0"} {
		v := c.view(mkPod("r", map[string]string{"app": "vllm"}, "10.0.0.9", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{KVEventsAnnotation: raw}
		}))
		if v.state != stateGone || !errors.Is(v.refusal, ErrBadAnnotation) {
			t.Errorf("%s: state %d refusal %v, want refused", raw, v.state, v.refusal)
		}
	}
}
