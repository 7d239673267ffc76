package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/tests/testenv"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/testkit/poll"
)

// Cluster admission end to end: three gateways (in-process App instances, each with its own listeners,
// registry, admission controller and cluster state, talking to each other over loopback sockets) in front
// of shared simulated SGLang engines, with real HTTP clients. The engines' own count of concurrent
// prefills (/sim/stats prefill_peak_concurrent) is the judge. A "kill" is App.Shutdown with an expired
// context: listeners and client connections close at once and coordination stops; a "crash" (replicas.crash)
// also makes it look dead to its peers first, as a killed process would.

const (
	clusterLimit  = 2
	clusterPeriod = 100 * time.Millisecond
	clusterLease  = time.Second
)

// cutNet black-holes cluster traffic of cut-off replicas, as a network partition does: calls wait for
// their deadline. One way cuts a replica's own calls; two ways also the calls to it.
type cutNet struct {
	mu  sync.Mutex
	out map[string]bool // replica id -> its calls are lost
	in  map[string]bool // replica id -> calls to it are lost
}

func (n *cutNet) set(id string, out, in bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.out[id], n.in[id] = out, in
}

func (n *cutNet) client(t *testing.T, self string) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: cutTransport{n: n, self: self, next: tr}}
}

type cutTransport struct {
	n    *cutNet
	self string
	next http.RoundTripper
}

func (c cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.mu.Lock()
	lost := c.n.out[c.self] || c.n.in["http://"+req.URL.Host]
	c.n.mu.Unlock()
	if lost {
		if req.Body != nil {
			req.Body.Close()
		}
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return c.next.RoundTrip(req)
}

type replicas struct {
	gws []*gateway
	ids []string
	net *cutNet
}

// startReplicas starts n gateways over the engines; with coordinate, they share the limit through
// --admission-peers (each gateway's single listener serves the admin API and coordination).
func startReplicas(t *testing.T, c *sim.Cluster, n, limit int, coordinate bool, extra ...string) *replicas {
	t.Helper()
	ports := testenv.FreePorts(t, n)
	rs := &replicas{net: &cutNet{out: map[string]bool{}, in: map[string]bool{}}}
	for _, p := range ports {
		rs.ids = append(rs.ids, "http://127.0.0.1:"+strconv.Itoa(p))
	}
	for i, p := range ports {
		args := []string{"--pd-disaggregation", "--disable-retries", "--prefill-policy", "round_robin",
			"--prefill-max-inflight-requests-per-worker", strconv.Itoa(limit),
			"--prefill-queue-size", "1000", "--prefill-queue-timeout-secs", "30"}
		if coordinate {
			args = append(args, "--admission-peers", strings.Join(rs.ids, ","),
				"--admission-exchange-period-secs", fmt.Sprint(clusterPeriod.Seconds()),
				"--admission-lease-secs", fmt.Sprint(clusterLease.Seconds()))
		}
		args = append(append(append(args, pdArgs(c)...), extra...), "--admin-api-key", "fleet-secret")
		gw := startGatewayOn(t, p, app.Options{ClusterHTTP: rs.net.client(t, rs.ids[i])}, args...)
		rs.gws = append(rs.gws, gw)
	}
	for _, gw := range rs.gws {
		waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	}
	return rs
}

// startGatewayOn is startGateway on a chosen port.
func startGatewayOn(t *testing.T, port int, o app.Options, args ...string) *gateway {
	t.Helper()
	gw := startGateway(t, o, append([]string{"--port", strconv.Itoa(port)}, args...)...)
	if gw.Addr() != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("gateway on %s, want port %d", gw.Addr(), port)
	}
	return gw
}

// kill stops a gateway at once: client connections and listeners closed, coordination stopped.
func kill(gw *gateway) { gw.Kill() }

// crash is kill made to look like a crashed process: it stops calling its peers and admits nothing more,
// then its ports close and refuse them. An in-process kill differs from a dead process in two ways that
// the engines would see: the closing gateway still reports once more (its cancelled requests having freed
// their slots while the engines may still be prefilling them), and, as it cancels its requests, a slot a
// cancelled request frees can be granted to a waiter whose prefill reaches the engine before the cancelled
// one has left it (for ~10 ms; a dead process admits nothing).
func (rs *replicas) crash(i int) {
	rs.net.set(rs.ids[i], true, false)
	rs.gws[i].Admission.SetWorkerCaps(nil, 0)
	kill(rs.gws[i])
	rs.gws[i] = nil
}

// load is a closed-loop client population on one gateway: each client sends a fresh prompt (no prefix
// cache hits) as soon as its previous request finished.
type load struct {
	ok, rejected, failed atomic.Int64
	wg                   sync.WaitGroup
}

var promptSeq atomic.Int64

func startClusterLoad(ctx context.Context, t *testing.T, url string, clients int) *load {
	l := &load{}
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	words := strings.Repeat("lorem ipsum dolor sit amet ", 80) // ~400 tokens: ~50 ms of simulated prefill
	for range clients {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				body := fmt.Sprintf(`{"model":"sim-model","max_tokens":4,"messages":[{"role":"user","content":"request %d: %s"}]}`, promptSeq.Add(1), words)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						l.failed.Add(1)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
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
	return l
}

// waitIdle waits until the prefill engines have finished what a cancelled load left them: a cancelled
// request frees its gateway slot at once, while its engine may still be prefilling it.
func waitIdle(t *testing.T, c *sim.Cluster) {
	t.Helper()
	waitFor(t, "prefill engines idle", 10*time.Second, func() bool {
		for _, e := range c.ByRole(sim.RolePrefill) {
			if e.Stats().PrefillInFlight != 0 {
				return false
			}
		}
		return true
	})
}

// resetPeaks starts a measurement window.
func resetPeaks(c *sim.Cluster) {
	for _, e := range c.ByRole(sim.RolePrefill) {
		e.ResetStats()
	}
}

// peaks returns each prefill engine's largest count of concurrent prefills since the last reset.
func peaks(c *sim.Cluster) []int64 {
	var out []int64
	for _, e := range c.ByRole(sim.RolePrefill) {
		out = append(out, e.Stats().PrefillPeak)
	}
	return out
}

func prefillCluster(t *testing.T) *sim.Cluster {
	return startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 2, Protocol: sim.ProtocolSGLang, Mode: sim.ModeRealistic})
}

// skewed runs 80% of clients on the first gateway and 10% on each other for at least d, and returns the engines'
// peaks read while the load still runs: a cancelled request frees its gateway slot at once while its
// engine may still be prefilling it, so the end of a run is not measured.
func skewed(t *testing.T, rs *replicas, c *sim.Cluster, d time.Duration) ([]*load, []int64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	ls := []*load{startClusterLoad(ctx, t, rs.gws[0].URL, 16), startClusterLoad(ctx, t, rs.gws[1].URL, 2), startClusterLoad(ctx, t, rs.gws[2].URL, 2)}
	time.Sleep(d) // the measured load (load, not synchronisation)
	// With fewer units than replicas a replica waits its turn; on a loaded machine the turns run late,
	// so the load goes on until every replica has served (the callers fail the ones that never do).
	poll.Wait(20*time.Second, func() bool {
		for _, l := range ls {
			if l.ok.Load() == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("skewed load ran %v (at least %v)", time.Since(start).Round(time.Millisecond), d)
	p := peaks(c)
	cancel()
	for _, l := range ls {
		l.wg.Wait()
	}
	return ls, p
}

// TestClusterAdmissionBound is the main check, with its control: under skewed load (80% of the
// clients on one replica), three gateways each enforcing the limit on their own let the engines see more
// than the limit (so the load can break the bound), and the same three sharing it never do; every
// replica, even the lightly loaded ones, is served.
func TestClusterAdmissionBound(t *testing.T) {
	c := prefillCluster(t)

	control := startReplicas(t, c, 3, clusterLimit, false)
	resetPeaks(c)
	_, ctrl := skewed(t, control, c, 2*time.Second)
	for _, gw := range control.gws {
		kill(gw)
	}
	if max(ctrl[0], ctrl[1]) <= clusterLimit {
		t.Fatalf("control: per-replica limits kept the engines at %v <= %d: the load is too light to test the fleet's bound", ctrl, clusterLimit)
	}

	rs := startReplicas(t, c, 3, clusterLimit, true)
	waitFor(t, "a coordinator every replica follows", 10*time.Second, func() bool { return agreed(rs) != "" })
	waitIdle(t, c)
	resetPeaks(c)
	ls, got := skewed(t, rs, c, 3*time.Second)
	for i, p := range got {
		if p > clusterLimit {
			t.Errorf("prefill engine %d saw %d concurrent prefills, limit %d (control without coordination: %v)", i, p, clusterLimit, ctrl)
		}
	}
	for i, l := range ls {
		if l.ok.Load() == 0 || l.failed.Load() != 0 {
			st := rs.gws[i].ClusterStatus()
			t.Errorf("gateway %d: %d served, %d rejected, %d failed; want served and no failures (exchanges %v, last error %q)",
				i, l.ok.Load(), l.rejected.Load(), l.failed.Load(), st.Exchanges, st.LastError)
		}
	}
	t.Logf("engine peaks: %v with coordination, %v without; served per gateway %d/%d/%d", got, ctrl, ls[0].ok.Load(), ls[1].ok.Load(), ls[2].ok.Load())

	// GET /admin/v1/admission shows the shares; /metrics has them per worker.
	coord := agreed(rs)
	resp, body := get(t, rs.gws[0].URL+"/admin/v1/admission", "Authorization", "Bearer fleet-secret")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"cluster_share"`) || !strings.Contains(string(body), `"coordinator":"`+coord+`"`) {
		t.Errorf("admission status: %d %s", resp.StatusCode, body)
	}
	if m := scrape(t, rs.gws[1].URL, "sluice_cluster_admission_share"); len(m) != 2 {
		t.Errorf("share gauge series %v, want one per prefill worker", m)
	}
	// The coordination service refuses callers without the admin API key.
	resp, body = postJSON(t, rs.gws[0].URL+"/sluice.cluster.v1.AdmissionCoordinationService/Ping", `{"protocol_version":1,"replica":"x"}`)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unauthenticated ping: %d %s", resp.StatusCode, body)
	}
}

// agreed returns the coordinator every running replica follows, once it has granted them all; "" before.
func agreed(rs *replicas) string {
	coord := ""
	for _, gw := range rs.gws {
		if gw == nil {
			continue
		}
		st := gw.ClusterStatus()
		if st.Coordinator == "" || st.LeaseAge < 0 || st.Fallback || (coord != "" && st.Coordinator != coord) {
			return ""
		}
		coord = st.Coordinator
	}
	return coord
}

func postJSON(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// sharesSum is the sum over the running replicas of their shares on each prefill worker.
func sharesSum(rs *replicas, c *sim.Cluster) []int {
	var out []int
	for _, e := range c.ByRole(sim.RolePrefill) {
		sum := 0
		for _, gw := range rs.gws {
			if gw != nil {
				sum += gw.ClusterStatus().Workers[e.URL()].Share
			}
		}
		out = append(out, sum)
	}
	return out
}

// reclaimed reports whether the coordinator counts dead as dead (out of the members, raises allowed) and the
// running replicas' shares add up to the whole limit on every prefill worker.
func reclaimed(rs *replicas, c *sim.Cluster, dead string) bool {
	coord := agreed(rs)
	if coord == "" {
		return false
	}
	for _, gw := range rs.gws {
		if gw == nil {
			continue
		}
		st := gw.ClusterStatus()
		if st.IsCoordinator && (st.RaisesBlocked || slices.Contains(st.Members, dead)) {
			return false
		}
	}
	for _, s := range sharesSum(rs, c) {
		if s != clusterLimit {
			return false
		}
	}
	return true
}

// TestClusterAdmissionKills: under load, the coordinator crashes: another replica takes over and the bound
// holds; then a follower crashes: its share returns to the survivors.
func TestClusterAdmissionKills(t *testing.T) {
	c := prefillCluster(t)
	rs := startReplicas(t, c, 3, clusterLimit, true)
	waitFor(t, "a coordinator every replica follows", 10*time.Second, func() bool { return agreed(rs) != "" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ls []*load
	for _, gw := range rs.gws {
		ls = append(ls, startClusterLoad(ctx, t, gw.URL, 6))
	}
	time.Sleep(time.Second) // let the load run before measuring (load, not synchronisation)
	resetPeaks(c)
	old := agreed(rs)
	var victim int
	for i, id := range rs.ids {
		if id == old {
			victim = i
		}
	}
	killed := time.Now()
	rs.crash(victim)
	waitFor(t, "a new coordinator", 10*time.Second, func() bool { c := agreed(rs); return c != "" && c != old })
	elected := time.Since(killed)
	waitFor(t, "the dead coordinator's share back with the survivors", 10*time.Second, func() bool { return reclaimed(rs, c, old) })
	returned := time.Since(killed)
	time.Sleep(time.Second) // more load after the takeover (load, not synchronisation)
	t.Logf("coordinator killed: new one after %v, its share back after %v (lease %v); engine peaks %v", elected, returned, clusterLease, peaks(c))

	// A follower dies too; the last one gets the whole limit.
	var gone string
	for i, gw := range rs.gws {
		if gw != nil && rs.ids[i] != agreed(rs) {
			killed, gone = time.Now(), rs.ids[i]
			rs.crash(i)
			break
		}
	}
	waitFor(t, "the follower's share back with the coordinator", 10*time.Second, func() bool { return reclaimed(rs, c, gone) })
	t.Logf("follower killed: share back after %v", time.Since(killed))
	time.Sleep(500 * time.Millisecond) // more load (load, not synchronisation)
	got := peaks(c)                    // before the load is cancelled: see skewed
	cancel()
	for _, l := range ls {
		l.wg.Wait()
	}
	for i, p := range got {
		if p > clusterLimit {
			t.Errorf("prefill engine %d saw %d concurrent prefills across the kills, limit %d", i, p, clusterLimit)
		}
	}
}

// TestClusterAdmissionPartition: a replica that cannot reach the coordinator (only its own calls lost, or
// every call to and from it) keeps serving within the bound, falls back or coordinates itself within its
// even split, and rejoins when the network heals.
func TestClusterAdmissionPartition(t *testing.T) {
	for _, twoWay := range []bool{false, true} {
		name := "one way"
		if twoWay {
			name = "two ways"
		}
		t.Run(name, func(t *testing.T) {
			// A limit of 3 over 3 replicas gives each an even split of 1: the cut-off one keeps serving.
			const limit = 3
			c := prefillCluster(t)
			rs := startReplicas(t, c, 3, limit, true)
			waitFor(t, "a coordinator every replica follows", 10*time.Second, func() bool { return agreed(rs) != "" })
			coord := agreed(rs)
			victim := 0
			for i, id := range rs.ids {
				if id != coord {
					victim = i
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var ls []*load
			for _, gw := range rs.gws {
				ls = append(ls, startClusterLoad(ctx, t, gw.URL, 6))
			}
			// Its fallback never exceeds its last share: cut it off once it has one on every worker.
			waitFor(t, "the victim has a share", 10*time.Second, func() bool {
				st := rs.gws[victim].ClusterStatus()
				for _, e := range c.ByRole(sim.RolePrefill) {
					if st.Workers[e.URL()].Share == 0 {
						return false
					}
				}
				return true
			})
			resetPeaks(c)
			rs.net.set(rs.ids[victim], true, twoWay)
			waitFor(t, "the partitioned replica on its own", 10*time.Second, func() bool {
				st := rs.gws[victim].ClusterStatus()
				return st.Fallback || st.IsCoordinator
			})
			before := ls[victim].ok.Load()
			time.Sleep(2 * time.Second) // load during the partition (load, not synchronisation)
			served := ls[victim].ok.Load() - before
			rs.net.set(rs.ids[victim], false, false)
			waitFor(t, "the replica back under the coordinator", 10*time.Second, func() bool { return agreed(rs) != "" })
			got := peaks(c) // before the load is cancelled: see skewed
			cancel()
			for _, l := range ls {
				l.wg.Wait()
			}
			for i, p := range got {
				if p > limit {
					t.Errorf("prefill engine %d saw %d concurrent prefills during the partition, limit %d", i, p, limit)
				}
			}
			if served == 0 {
				t.Errorf("the partitioned replica served nothing on its own")
			}
			t.Logf("engine peaks %v; the cut-off replica served %d requests on its own", got, served)
		})
	}
}

// TestClusterAdmissionKubernetes: the Kubernetes mode end to end. Three gateways listen on 127.0.0.1, .2
// and .3 at the same port (as pods do on their own IPs), the headless Service's EndpointSlice lists them in
// client-go's fake clientset, and the coordinator is elected through a Lease in it. Under skewed load the
// engines never see more than the limit; the coordinator shuts down (releasing its Lease) and another takes
// over; then a replica's pod is deleted (its endpoint removed) and killed, and its share returns.
func TestClusterAdmissionKubernetes(t *testing.T) {
	c := prefillCluster(t)
	port := testenv.FreePort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	hosts := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	client := fake.NewClientset(endpointSliceOf("inference", "sluice-headless", hosts...))
	rs := &replicas{net: &cutNet{out: map[string]bool{}, in: map[string]bool{}}}
	for _, h := range hosts {
		id := "http://" + h + ":" + strconv.Itoa(port)
		rs.ids = append(rs.ids, id)
		args := append([]string{"--host", h, "--port", strconv.Itoa(port), "--pd-disaggregation", "--disable-retries",
			"--prefill-policy", "round_robin", "--prefill-max-inflight-requests-per-worker", strconv.Itoa(clusterLimit),
			"--prefill-queue-size", "1000", "--prefill-queue-timeout-secs", "30",
			"--admission-coordination", "kubernetes", "--admission-service", "sluice-headless", "--admission-namespace", "inference",
			"--admission-exchange-period-secs", "0.25", "--admission-lease-secs", "2"}, pdArgs(c)...)
		gw := startGateway(t, app.Options{KubeClient: client, ClusterHTTP: rs.net.client(t, id)}, args...)
		rs.gws = append(rs.gws, gw)
	}
	for _, gw := range rs.gws {
		waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	}
	waitFor(t, "a coordinator every replica follows", 15*time.Second, func() bool { return agreed(rs) != "" })
	holder := func() string {
		l, err := client.CoordinationV1().Leases("inference").Get(context.Background(), "sluice-admission", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	if got := agreed(rs); holder() != got {
		t.Fatalf("coordinator %q, Lease holder %q", got, holder())
	}
	resetPeaks(c)
	// Longer than a lease: with fewer units than replicas, a replica may wait one whole turn for its unit.
	ls, got := skewed(t, rs, c, 3500*time.Millisecond)
	for i, p := range got {
		if p > clusterLimit {
			t.Errorf("prefill engine %d saw %d concurrent prefills, limit %d", i, p, clusterLimit)
		}
	}
	for i, l := range ls {
		if l.ok.Load() == 0 || l.failed.Load() != 0 {
			st := rs.gws[i].ClusterStatus()
			t.Errorf("gateway %d: %d served, %d rejected, %d failed (status %+v)", i, l.ok.Load(), l.rejected.Load(), l.failed.Load(), st)
		}
	}

	waitIdle(t, c) // the skewed load was cancelled
	resetPeaks(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var loads []*load
	for _, gw := range rs.gws {
		loads = append(loads, startClusterLoad(ctx, t, gw.URL, 4))
	}
	old := agreed(rs)
	for i, id := range rs.ids {
		if id == old {
			rs.crash(i) // its shutdown still releases the Lease (the fake API server is not cut off)
		}
	}
	waitFor(t, "a new coordinator holding the Lease", 15*time.Second, func() bool { c := agreed(rs); return c != "" && c != old && holder() == c })
	// The old coordinator's pod goes away with it.
	var keep []string
	for i, h := range hosts {
		if rs.gws[i] != nil {
			keep = append(keep, h)
		}
	}
	if _, err := client.DiscoveryV1().EndpointSlices("inference").Update(context.Background(), endpointSliceOf("inference", "sluice-headless", keep...), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old coordinator's share back", 15*time.Second, func() bool { return reclaimed(rs, c, old) })
	got = peaks(c)
	cancel()
	for _, l := range loads {
		l.wg.Wait()
	}
	for i, p := range got {
		if p > clusterLimit {
			t.Errorf("prefill engine %d saw %d concurrent prefills across the takeover, limit %d", i, p, clusterLimit)
		}
	}
}

func endpointSliceOf(ns, svc string, ips ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, ip := range ips {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return es
}

// TestClusterAdmissionNeedsTheAdminKey: replicas authenticate to each other with --admin-api-key, so a
// replica whose admin API is guarded only by a keys file is refused at startup with a clear error.
func TestClusterAdmissionNeedsTheAdminKey(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("ops sk-0718293a4b5c6d7e admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]string{"--host", "127.0.0.1", "--port", "0", "--pd-disaggregation",
		"--prefill-max-inflight-requests-per-worker", "2", "--admission-peers", "http://127.0.0.1:1", "--api-keys-file", keys}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = app.New(context.Background(), cfg, app.Options{Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "cluster admission needs --admin-api-key") {
		t.Fatalf("app.New = %v, want the admin key error", err)
	}
}
