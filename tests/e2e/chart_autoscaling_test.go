package e2e

import (
	"slices"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kedaScaledObject is KEDA's ScaledObject (keda.sh/v1alpha1), declared here with the fields of
// kedacore/keda apis/keda/v1alpha1/scaledobject_types.go the chart may set, because KEDA's module
// (and its dependency tree) is not in go.mod. decodeStrict's UnmarshalStrict rejects any field not
// declared here, so a misspelled or invented field fails as it would against KEDA's CRD schema.
type kedaScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			Name                   string `json:"name"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32        `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32        `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32        `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32        `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32        `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32        `json:"maxReplicaCount,omitempty"`
		Triggers              []kedaTrigger `json:"triggers"`
	} `json:"spec"`
}

// kedaTrigger is KEDA's ScaleTriggers; metricType is an HPA MetricTargetType.
type kedaTrigger struct {
	Type             string            `json:"type"`
	Name             string            `json:"name,omitempty"`
	UseCachedMetrics bool              `json:"useCachedMetrics,omitempty"`
	Metadata         map[string]string `json:"metadata"`
	MetricType       string            `json:"metricType,omitempty"`
}

// TestHelmChartAutoscaling: autoscaling.keda.enabled renders one ScaledObject per role with a
// Prometheus trigger on the recommendation; autoscaling.hpa.enabled one autoscaling/v2 HPA per role
// on the external metric; both at once is refused; neither renders nothing. Every object decodes
// strictly.
func TestHelmChartAutoscaling(t *testing.T) {
	t.Parallel()
	render := func(t *testing.T, args ...string) ([]object, error) {
		t.Helper()
		out, err := runHelm(t, append([]string{"template", "sluice", chartDir, "--namespace", "inference"}, args...)...)
		if err != nil {
			return nil, err
		}
		return decodeStrict(out)
	}
	byKind := func(objs []object, kind string) []object {
		var out []object
		for _, o := range objs {
			if o.kind == kind {
				out = append(out, o)
			}
		}
		return out
	}
	want := map[string]string{"sluice-prefill": "sglang-prefill", "sluice-decode": "sglang-decode"}

	t.Run("off by default", func(t *testing.T) {
		objs, err := render(t)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(byKind(objs, "ScaledObject")) + len(byKind(objs, "HorizontalPodAutoscaler")); n != 0 {
			t.Fatalf("%d scalers rendered by default", n)
		}
	})
	t.Run("keda", func(t *testing.T) {
		if _, err := runHelm(t, "lint", "--strict", chartDir, "--set", "autoscaling.keda.enabled=true"); err != nil {
			t.Fatalf("helm lint: %v", err)
		}
		objs, err := render(t, "--set", "autoscaling.keda.enabled=true", "--set", "autoscaling.model=m1", "--set", "autoscaling.decode.maxReplicas=12")
		if err != nil {
			t.Fatal(err)
		}
		sos := byKind(objs, "ScaledObject")
		if len(sos) != 2 {
			t.Fatalf("%d ScaledObjects, want 2", len(sos))
		}
		for _, o := range sos {
			so := o.obj.(*kedaScaledObject)
			role := strings.TrimPrefix(o.name, "sluice-")
			ref := so.Spec.ScaleTargetRef
			if ref.Name != want[o.name] || ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" {
				t.Errorf("%s targets %+v, want Deployment %s", o.name, ref, want[o.name])
			}
			if len(so.Spec.Triggers) != 1 {
				t.Fatalf("%s: %d triggers", o.name, len(so.Spec.Triggers))
			}
			tr := so.Spec.Triggers[0]
			q := `sum(sluice_capacity_recommended_workers{model="m1",role="` + role + `"})`
			if tr.Type != "prometheus" || tr.MetricType != "AverageValue" || tr.Metadata["query"] != q ||
				tr.Metadata["threshold"] != "1" || !strings.HasPrefix(tr.Metadata["serverAddress"], "http") {
				t.Errorf("%s trigger %+v, want prometheus %s at threshold 1", o.name, tr, q)
			}
			wantMax := int32(8)
			if role == "decode" {
				wantMax = 12
			}
			if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != 1 || so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount != wantMax {
				t.Errorf("%s replicas %v..%v, want 1..%d", o.name, so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount, wantMax)
			}
		}
	})
	t.Run("hpa", func(t *testing.T) {
		if _, err := runHelm(t, "lint", "--strict", chartDir, "--set", "autoscaling.hpa.enabled=true"); err != nil {
			t.Fatalf("helm lint: %v", err)
		}
		objs, err := render(t, "--set", "autoscaling.hpa.enabled=true")
		if err != nil {
			t.Fatal(err)
		}
		hpas := byKind(objs, "HorizontalPodAutoscaler")
		var names []string
		for _, o := range hpas {
			names = append(names, o.name)
			h := o.obj.(*autoscalingv2.HorizontalPodAutoscaler)
			role := strings.TrimPrefix(o.name, "sluice-")
			if h.Spec.ScaleTargetRef.Name != want[o.name] || h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.MaxReplicas != 8 {
				t.Errorf("%s: target %+v max %d", o.name, h.Spec.ScaleTargetRef, h.Spec.MaxReplicas)
			}
			if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Type != autoscalingv2.ExternalMetricSourceType {
				t.Fatalf("%s metrics %+v, want one External", o.name, h.Spec.Metrics)
			}
			ext := h.Spec.Metrics[0].External
			if ext.Metric.Name != "sluice_capacity_recommended_workers" || ext.Metric.Selector == nil ||
				ext.Metric.Selector.MatchLabels["role"] != role || ext.Metric.Selector.MatchLabels["model"] != "sim-model" {
				t.Errorf("%s metric %+v", o.name, ext.Metric)
			}
			if ext.Target.Type != autoscalingv2.AverageValueMetricType || ext.Target.AverageValue == nil || ext.Target.AverageValue.String() != "1" {
				t.Errorf("%s target %+v, want AverageValue 1", o.name, ext.Target)
			}
			if b := h.Spec.Behavior; b == nil || b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil {
				t.Errorf("%s has no scale-down stabilization", o.name)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"sluice-decode", "sluice-prefill"}) {
			t.Fatalf("HPAs %v, want one per role", names)
		}
	})
	t.Run("both refused", func(t *testing.T) {
		_, err := render(t, "--set", "autoscaling.keda.enabled=true", "--set", "autoscaling.hpa.enabled=true")
		if err == nil || !strings.Contains(err.Error(), "not both") {
			t.Fatalf("keda and hpa together: %v, want the chart to refuse", err)
		}
	})
}

// TestKEDAScaledObjectDecodesStrictly: the local ScaledObject type rejects a field KEDA does not
// have, so the chart test above can fail on a misspelling.
func TestKEDAScaledObjectDecodesStrictly(t *testing.T) {
	t.Parallel()
	good := "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: d}\n  triggers: [{type: prometheus, metadata: {query: q, threshold: \"1\"}}]\n"
	if _, err := decodeStrict([]byte(good)); err != nil {
		t.Fatalf("a valid ScaledObject: %v", err)
	}
	bad := strings.Replace(good, "  scaleTargetRef:", "  minReplicas: 1\n  scaleTargetRef:", 1) // HPA's name, not KEDA's
	if _, err := decodeStrict([]byte(bad)); err == nil || !strings.Contains(err.Error(), "minReplicas") {
		t.Fatalf("an unknown field: %v, want it rejected", err)
	}
}
