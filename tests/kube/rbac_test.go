package kube

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sluicegw/sluice/tests/testenv"
)

// dropVerb removes verb from the rules of the named Role that grant it on resource.
func dropVerb(t *testing.T, objs []*unstructured.Unstructured, role, resource, verb string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Role" || o.GetName() != role {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			rule := r.(map[string]any)
			if !slices.Contains(rule["resources"].([]any), any(resource)) {
				continue
			}
			verbs := rule["verbs"].([]any)
			i := slices.Index(verbs, any(verb))
			if i < 0 {
				t.Fatalf("Role %s grants no %s on %s: the chart changed, update the test", role, verb, resource)
			}
			rule["verbs"] = slices.Delete(verbs, i, i+1)
			if err := unstructured.SetNestedSlice(o.Object, rules, "rules"); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no Role %s with a rule on %s", role, resource)
}

// TestChartRoleMissingVerb installs the chart with one verb removed from one of its Roles: the gateway,
// holding the chart's ServiceAccount token, must refuse to start and say which permission is missing.
func TestChartRoleMissingVerb(t *testing.T) {
	cp := startControlPlane(t, planeOptions{})
	for i, tc := range []struct {
		role, resource, verb, group string
	}{
		{role: "sluice-discovery", resource: "pods", verb: "watch", group: `"" (core)`},
		{role: "sluice-admission", resource: "leases", verb: "update", group: "coordination.k8s.io"},
		{role: "sluice-admission", resource: "endpointslices", verb: "list", group: "discovery.k8s.io"},
	} {
		t.Run(tc.role+"-"+tc.resource+"-"+tc.verb, func(t *testing.T) {
			ns := "rbac-" + strconv.Itoa(i)
			cp.createNamespace(ns)
			createKeys(t, cp, ns)
			ip := "127.13.2." + strconv.Itoa(i+1)
			port := testenv.FreePort(t, ip)
			objs := renderChart(t, ns, "deploy/examples/values-pd.yaml", "serviceMonitor.enabled=false",
				"config.service-discovery-namespace="+ns, "config.port="+strconv.Itoa(port),
				"config.admission-coordination=kubernetes", "headlessService.enabled=true")
			dropVerb(t, objs, tc.role, tc.resource, tc.verb)
			rel := install(t, cp, ns, objs)
			g := rel.startGateway(t, &kubelet{t: t, c: cp.Admin, ns: ns}, "sluice-0", ip, port)
			if err := g.proc.wait(2 * time.Minute); err == nil {
				t.Fatalf("gateway exited 0 without %s on %s\n%s", tc.verb, tc.resource, g.proc.tail())
			} else if !g.proc.exited() {
				t.Fatalf("gateway kept running without %s on %s\n%s", tc.verb, tc.resource, g.proc.tail())
			}
			out := g.proc.output()
			for _, want := range []string{
				`verb "` + tc.verb + `" on resource "` + tc.resource + `" of apiGroup ` + tc.group,
				`in namespace "` + ns + `"`,
			} {
				if !strings.Contains(out, want) {
					t.Errorf("gateway's error does not say %s:\n%s", want, g.proc.tail())
				}
			}
		})
	}
}
