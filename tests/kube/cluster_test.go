package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/tests/testenv"
)

// clusterView is the cluster part of a gateway's GET /admin/v1/admission.
type clusterView struct {
	Replica     string   `json:"replica"`
	Coordinator string   `json:"coordinator"`
	Fallback    bool     `json:"fallback"`
	LeaseAge    *string  `json:"lease_age"`
	FleetLimit  int      `json:"fleet_limit"`
	Members     []string `json:"members"`
}

func admissionView(g *gateway) (clusterView, error) {
	req, _ := http.NewRequest(http.MethodGet, g.url()+"/admin/v1/admission", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return clusterView{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Cluster *clusterView `json:"cluster"`
	}
	if resp.StatusCode != http.StatusOK {
		return clusterView{}, fmt.Errorf("GET /admin/v1/admission: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return clusterView{}, err
	}
	if body.Cluster == nil {
		return clusterView{}, fmt.Errorf("no cluster admission in /admin/v1/admission")
	}
	return *body.Cluster, nil
}

// agreedCoordinator returns the coordinator every gateway follows once each has a live grant over exactly
// the members, and that coordinator is the holder of the real Lease.
func agreedCoordinator(cp *controlPlane, ns string, gws []*gateway, members []string) error {
	coord := ""
	for _, g := range gws {
		v, err := admissionView(g)
		if err != nil {
			return err
		}
		slices.Sort(v.Members)
		switch {
		case v.Coordinator == "" || v.LeaseAge == nil || v.Fallback:
			return fmt.Errorf("%s: no live grant (%+v)", g.pod, v)
		case coord != "" && v.Coordinator != coord:
			return fmt.Errorf("%s follows %s, another %s", g.pod, v.Coordinator, coord)
		case !slices.Equal(v.Members, members):
			return fmt.Errorf("%s: members %v, want %v", g.pod, v.Members, members)
		}
		coord = v.Coordinator
	}
	l, err := cp.Admin.CoordinationV1().Leases(ns).Get(context.Background(), "sluice-admission", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != coord {
		return fmt.Errorf("gateways follow %s, Lease held by %v", coord, l.Spec.HolderIdentity)
	}
	return nil
}

// clientLoad is closed-loop clients on one gateway, each sending a fresh prompt when the last finished.
type clientLoad struct {
	ok, rejected, failed atomic.Int64
	finishing            atomic.Bool
	wg                   sync.WaitGroup
	cancel               context.CancelFunc
}

var promptSeq atomic.Int64

func startLoad(t *testing.T, g *gateway, clients int) *clientLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &clientLoad{cancel: cancel}
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	hc := &http.Client{Transport: tr}
	words := strings.Repeat("lorem ipsum dolor sit amet ", 80) // ~400 tokens: tens of ms of simulated prefill
	for range clients {
		l.wg.Go(func() {
			for ctx.Err() == nil && !l.finishing.Load() {
				body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"request %d: %s"}]}`, model, promptSeq.Add(1), words)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url()+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+apiKey)
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						l.failed.Add(1)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK:
					l.ok.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests:
					l.rejected.Add(1)
				case ctx.Err() == nil:
					l.failed.Add(1)
				}
			}
		})
	}
	t.Cleanup(func() { l.stop(); tr.CloseIdleConnections() })
	return l
}

func (l *clientLoad) stop() { l.cancel(); l.wg.Wait() }

// finish sends no new request and waits for the ones in flight to complete. A cancelled request would
// free its gateway slot at once while its engine may still be prefilling it, which the engine's peak
// would count against the next holder of the slot.
func (l *clientLoad) finish() { l.finishing.Store(true); l.wg.Wait() }

// TestClusterAdmissionOnAPIServer runs three gateway replicas from the chart with cluster admission: they
// find each other through the headless Service's EndpointSlices, elect a coordinator through the real
// Lease, keep every prefill engine at or under the fleet limit under skewed load, and hand over when the
// coordinator's pod is deleted (the kubelet's SIGTERM; the old coordinator releases the Lease).
func TestClusterAdmissionOnAPIServer(t *testing.T) {
	cp := startControlPlane(t, planeOptions{})
	const ns = "inference"
	cp.createNamespace(ns)
	createKeys(t, cp, ns)
	const limit = 4 // the example values' prefill-max-inflight-requests-per-worker, now the fleet's
	prefills := []string{"127.13.4.2", "127.13.4.3"}
	const decode = "127.13.4.4"
	engines := startEngines(t, sim.ModeRealistic, map[string]sim.Role{prefills[0]: sim.RolePrefill, prefills[1]: sim.RolePrefill, decode: sim.RoleDecode})
	gwIPs := []string{"127.13.5.1", "127.13.5.2", "127.13.5.3"}
	port := testenv.FreePort(t, gwIPs...)
	objs := renderChart(t, ns, "deploy/examples/values-pd.yaml", "serviceMonitor.enabled=false",
		"config.port="+strconv.Itoa(port), "config.service-discovery-port="+strconv.Itoa(enginePort(engines)),
		"config.admission-coordination=kubernetes", "headlessService.enabled=true",
		"config.admission-lease-secs=2", "config.prefill-policy=round_robin", "config.health-check-interval-secs=1")
	rel := install(t, cp, ns, objs)
	k := &kubelet{t: t, c: cp.Admin, ns: ns}
	k.run(enginePod("prefill-0", "prefill"), prefills[0], true)
	k.run(enginePod("prefill-1", "prefill"), prefills[1], true)
	k.run(enginePod("decode-0", "decode"), decode, true)

	var gws []*gateway
	var eps []endpoint
	var members []string
	for i, ip := range gwIPs {
		name := "sluice-" + strconv.Itoa(i)
		gws = append(gws, rel.startGateway(t, k, name, ip, port))
		eps = append(eps, endpoint{pod: name, ip: ip, ready: true})
		members = append(members, "http://"+ip+":"+strconv.Itoa(port))
	}
	ports := []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(port))}}
	k.syncEndpointSlice("sluice-headless", ports, eps)
	for _, g := range gws {
		g.waitHealthy(t)
		k.setReady(g.pod, true)
	}
	eventually(t, time.Minute, "one coordinator, the Lease holder, over the three members", func() error {
		return agreedCoordinator(cp, ns, gws, members)
	})
	resetPeaks := func() {
		for _, ip := range prefills {
			engines[ip].ResetStats()
		}
	}
	checkPeaks := func(when string) {
		for _, ip := range prefills {
			if p := engines[ip].Stats().PrefillPeak; p > limit {
				t.Errorf("%s: prefill engine %s saw %d concurrent prefills, fleet limit %d", when, ip, p, limit)
			} else {
				t.Logf("%s: prefill engine %s peak %d (fleet limit %d)", when, ip, p, limit)
			}
		}
	}

	// Skewed load: most clients on one replica, which must not take more than the fleet's limit.
	resetPeaks()
	loads := []*clientLoad{startLoad(t, gws[0], 16), startLoad(t, gws[1], 2), startLoad(t, gws[2], 2)}
	eventually(t, time.Minute, "every replica served under load", func() error {
		for i, l := range loads {
			if l.ok.Load() < 20 {
				return fmt.Errorf("gateway %d served %d", i, l.ok.Load())
			}
		}
		return nil
	})
	checkPeaks("skewed load")

	// Handover: delete the coordinator's pod while the others keep their load.
	v, err := admissionView(gws[0])
	if err != nil {
		t.Fatal(err)
	}
	old := slices.Index(members, v.Coordinator)
	if old < 0 {
		t.Fatalf("coordinator %s is no member", v.Coordinator)
	}
	loads[old].finish()
	k.terminate(gws[old].pod)
	gws[old].proc.stop() // the kubelet's SIGTERM to the container
	if gws[old].proc.err != nil {
		t.Errorf("coordinator did not shut down cleanly: %v\n%s", gws[old].proc.err, gws[old].proc.tail())
	}
	k.finish(gws[old].pod)
	eps = slices.Delete(eps, old, old+1)
	k.syncEndpointSlice("sluice-headless", ports, eps) // the EndpointSlice controller drops the pod
	rest := slices.Delete(slices.Clone(gws), old, old+1)
	restMembers := slices.Delete(slices.Clone(members), old, old+1)
	for _, l := range loads {
		l.ok.Store(0)
	}
	eventually(t, time.Minute, "a new coordinator, the new Lease holder, over the two left", func() error {
		return agreedCoordinator(cp, ns, rest, restMembers)
	})
	eventually(t, time.Minute, "the two left serve after the handover", func() error {
		for i, l := range loads {
			if i != old && l.ok.Load() < 20 {
				return fmt.Errorf("gateway %d served %d since the handover", i, l.ok.Load())
			}
		}
		return nil
	})
	checkPeaks("skewed load and handover")
	for i, l := range loads {
		l.stop()
		if l.failed.Load() != 0 {
			t.Errorf("gateway %d: %d requests failed (served %d, rejected %d)", i, l.failed.Load(), l.ok.Load(), l.rejected.Load())
		}
	}
}
