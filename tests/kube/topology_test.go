package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/tests/testenv"
)

// TestTopologyLabelsOnAPIServer: discovery reads each engine pod's zone from its
// topology.kubernetes.io/zone label on a real API server (the chart's default --topology-zone-label),
// the admin API shows it as the worker's sluice.dev/zone, and with --pd-topology-forbid zone every
// request pairs the decode with the prefill of its own zone, although another prefill is ready.
func TestTopologyLabelsOnAPIServer(t *testing.T) {
	cp := startControlPlane(t, planeOptions{})
	const ns = "inference"
	cp.createNamespace(ns)
	createKeys(t, cp, ns)
	const pa, pb, db = "127.15.0.2", "127.15.0.3", "127.15.0.4"
	engines := startEngines(t, sim.ModeInstant, map[string]sim.Role{pa: sim.RolePrefill, pb: sim.RolePrefill, db: sim.RoleDecode})
	enginePort := enginePort(engines)
	eurl := func(ip string) string { return "http://" + net.JoinHostPort(ip, strconv.Itoa(enginePort)) }
	const gwIP = "127.15.1.1"
	gwPort := testenv.FreePort(t, gwIP)
	objs := renderChart(t, ns, "deploy/examples/values-pd.yaml", "serviceMonitor.enabled=false",
		"config.port="+strconv.Itoa(gwPort), "config.service-discovery-port="+strconv.Itoa(enginePort),
		"config.health-check-interval-secs=1", "config.admission-coordination=off", "config.pd-topology-forbid=zone")
	rel := install(t, cp, ns, objs)
	k := &kubelet{t: t, c: cp.Admin, ns: ns}
	inZone := func(name, role, zone string) {
		pod := enginePod(name, role)
		pod.Labels["topology.kubernetes.io/zone"] = zone
		k.run(pod, map[string]string{"prefill-a": pa, "prefill-b": pb, "decode-b": db}[name], true)
	}
	inZone("prefill-a", "prefill", "zone-a")
	inZone("prefill-b", "prefill", "zone-b")
	inZone("decode-b", "decode", "zone-b")
	g := rel.startGateway(t, k, "sluice-0", gwIP, gwPort)
	g.waitHealthy(t)
	waitWorkers(t, g, "the three pods are workers", map[string]string{eurl(pa): "ready", eurl(pb): "ready", eurl(db): "ready"})
	zones, err := workerZones(g)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{eurl(pa): "zone-a", eurl(pb): "zone-b", eurl(db): "zone-b"}; fmt.Sprint(zones) != fmt.Sprint(want) {
		t.Fatalf("worker zones %v, want %v (from the pods' topology.kubernetes.io/zone)", zones, want)
	}
	for i := range 8 {
		if got := chat(t, g); got != eurl(pb) {
			t.Fatalf("request %d paired decode-b (zone-b) with prefill %s: want the same zone's %s", i, got, eurl(pb))
		}
	}
}

// workerZones is each worker's sluice.dev/zone label from the admin REST API.
func workerZones(g *gateway) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url()+"/admin/v1/workers", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Workers []struct {
			URL    string
			Labels map[string]string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, w := range body.Workers {
		out[w.URL] = w.Labels["sluice.dev/zone"]
	}
	return out, nil
}
