package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DiscoveryConfig holds Kubernetes service discovery: workers come and go with
// the pods that match a label selector. The flag names follow the Rust
// gateway's (smg) so its users can switch without renaming.
type DiscoveryConfig struct {
	// Enabled turns discovery on (--service-discovery, default false).
	Enabled bool
	// Selector picks regular-mode worker pods (--selector k=v, repeatable;
	// every pair must match).
	Selector map[string]string
	// PrefillSelector picks PD prefill pods (--prefill-selector k=v, repeatable).
	PrefillSelector map[string]string
	// DecodeSelector picks PD decode pods (--decode-selector k=v, repeatable).
	DecodeSelector map[string]string
	// Namespace is the one namespace watched (--service-discovery-namespace,
	// default "" = every namespace the RBAC allows).
	Namespace string
	// Port is the engine's port on each pod (--service-discovery-port,
	// default 80, as in smg).
	Port int
	// Protocol is how the engines on the pods are spoken to
	// (--service-discovery-protocol, as in smg): "http" (default) or "grpc",
	// the engines' own gRPC (SGLang --grpc-mode, vLLM's gRPC server), which
	// mid-stream migration needs.
	Protocol string
	// ModelIDFrom says where a pod's model id comes from
	// (--model-id-from, default none = ask the engine).
	ModelIDFrom ModelIDSource
	// InferencePool names an InferencePool (inference.networking.k8s.io/v1)
	// in Namespace whose selector and target port pick the worker pods
	// (--inference-pool, default "" = the selectors and port above).
	InferencePool string
}

// Where a discovered worker's model id is read from.
const (
	ModelFromNamespace  = "namespace"
	ModelFromLabel      = "label"
	ModelFromAnnotation = "annotation"
)

// ModelIDSource is a parsed --model-id-from: "namespace", "label:KEY" or
// "annotation:KEY". The zero value means "ask the engine".
type ModelIDSource struct {
	// Kind is "", ModelFromNamespace, ModelFromLabel or ModelFromAnnotation.
	Kind string
	// Key is the label or annotation key (empty for namespace).
	Key string
}

// String returns the flag form.
func (m ModelIDSource) String() string {
	if m.Key == "" {
		return m.Kind
	}
	return m.Kind + ":" + m.Key
}

// ParseModelIDSource parses the --model-id-from syntax.
func ParseModelIDSource(s string) (ModelIDSource, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return ModelIDSource{}, nil
	}
	if strings.EqualFold(s, ModelFromNamespace) {
		return ModelIDSource{Kind: ModelFromNamespace}, nil
	}
	kind, key, ok := strings.Cut(s, ":")
	if ok && (kind == ModelFromLabel || kind == ModelFromAnnotation) {
		if key == "" {
			return ModelIDSource{}, fmt.Errorf("%s: needs a key, e.g. %s:app.kubernetes.io/model", kind, kind)
		}
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return ModelIDSource{}, fmt.Errorf("%s key %q: %s", kind, key, strings.Join(errs, "; "))
		}
		return ModelIDSource{Kind: kind, Key: key}, nil
	}
	return ModelIDSource{}, fmt.Errorf("want namespace, label:KEY or annotation:KEY, got %q", s)
}

// modelIDSourceValue is the --model-id-from flag.
type modelIDSourceValue struct{ p *ModelIDSource }

func (v modelIDSourceValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v modelIDSourceValue) Set(s string) error {
	m, err := ParseModelIDSource(s)
	if err != nil {
		return err
	}
	*v.p = m
	return nil
}

// selectorValue is a repeatable label selector flag. One value is "k=v" or
// several pairs separated by commas ("app=sglang,role=prefill"); the pairs of
// every value add up and all must match. Only equality is supported: a
// set-based expression ("app in (a,b)", "!key", "k!=v") is rejected rather
// than misread.
type selectorValue struct{ p *map[string]string }

func (v selectorValue) String() string {
	if v.p == nil {
		return ""
	}
	return FormatSelector(*v.p)
}

func (v selectorValue) Set(s string) error {
	pairs, err := parseSelector(s)
	if err != nil {
		return err
	}
	if *v.p == nil {
		*v.p = map[string]string{}
	}
	for k, val := range pairs {
		if old, ok := (*v.p)[k]; ok && old != val {
			return fmt.Errorf("label %q given twice with different values (%q, %q): a pod has one value per label", k, old, val)
		}
		(*v.p)[k] = val
	}
	return nil
}

func parseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.ContainsAny(part, "!()") || strings.Contains(part, " in ") || strings.Contains(part, " notin ") {
			return nil, fmt.Errorf("%q: only key=value pairs are supported (no set-based selectors)", part)
		}
		k, val, ok := strings.Cut(part, "=")
		val = strings.TrimPrefix(val, "=") // "k==v" is equality too, as in kubectl
		k = strings.TrimSpace(k)
		val = strings.TrimSpace(val)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value", part)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
			return nil, fmt.Errorf("label value %q: %s", val, strings.Join(errs, "; "))
		}
		if old, dup := out[k]; dup && old != val {
			return nil, fmt.Errorf("label %q given twice with different values", k)
		}
		out[k] = val
	}
	if len(out) == 0 {
		return nil, errors.New("empty selector: want key=value")
	}
	return out, nil
}

// FormatSelector writes a selector as sorted "k=v,k2=v2" (the Kubernetes
// label selector syntax).
func FormatSelector(sel map[string]string) string {
	keys := slices.Sorted(maps.Keys(sel))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return strings.Join(parts, ",")
}

// validateDiscovery checks the discovery settings against each other and the
// routing mode.
func (c *Config) validateDiscovery(p *problems) {
	d := c.Discovery
	if !d.Enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"selector", len(d.Selector) > 0},
			{"prefill-selector", len(d.PrefillSelector) > 0},
			{"decode-selector", len(d.DecodeSelector) > 0},
			{"service-discovery-namespace", d.Namespace != ""},
			{"service-discovery-port", c.explicit["service-discovery-port"]},
			{"service-discovery-protocol", c.explicit["service-discovery-protocol"]},
			{"model-id-from", d.ModelIDFrom.Kind != ""},
			{"inference-pool", d.InferencePool != ""},
		} {
			if f.set {
				p.add("--%s needs --service-discovery", f.name)
			}
		}
		return
	}
	if c.Mode() == ModePD {
		if len(d.Selector) > 0 {
			p.add("--selector picks regular workers; with --pd-disaggregation use --prefill-selector and --decode-selector")
		}
		switch {
		case len(d.PrefillSelector) == 0 && len(d.DecodeSelector) == 0:
			p.add("--service-discovery with --pd-disaggregation needs --prefill-selector and/or --decode-selector")
		case maps.Equal(d.PrefillSelector, d.DecodeSelector):
			p.add("--prefill-selector and --decode-selector are equal (%s): every pod would match both roles", FormatSelector(d.PrefillSelector))
		}
	} else {
		if len(d.PrefillSelector) > 0 || len(d.DecodeSelector) > 0 {
			p.add("--prefill-selector/--decode-selector need --pd-disaggregation")
		}
		if len(d.Selector) == 0 && d.InferencePool == "" {
			p.add("--service-discovery needs --selector k=v or --inference-pool (which pods are workers)")
		}
	}
	c.validateInferencePool(p)
	if d.Port < 1 || d.Port > 65535 {
		p.add("--service-discovery-port must be between 1 and 65535, got %d", d.Port)
	}
	if d.Protocol != "http" && d.Protocol != "grpc" {
		p.add("--service-discovery-protocol must be http or grpc, got %q", d.Protocol)
	}
	if ns := d.Namespace; ns != "" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			p.add("--service-discovery-namespace %q: %s", ns, strings.Join(msgs, "; "))
		}
	}
}

// validateInferencePool checks --inference-pool: a pool selects pods in its
// own namespace and names their port, so it needs the one namespace and
// excludes a port flag that it would silently override.
func (c *Config) validateInferencePool(p *problems) {
	d := c.Discovery
	if d.InferencePool == "" {
		return
	}
	if msgs := validation.IsDNS1123Subdomain(d.InferencePool); len(msgs) > 0 {
		p.add("--inference-pool %q: %s", d.InferencePool, strings.Join(msgs, "; "))
	}
	if d.Namespace == "" {
		p.add("--inference-pool needs --service-discovery-namespace (the pool's namespace: a pool selects pods only there)")
	}
	if c.explicit["service-discovery-port"] {
		p.add("--service-discovery-port and --inference-pool conflict: the pool's spec.targetPorts is the engine port")
	}
}
