package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/sim"
)

// topoChat sends one chat and returns its status, error code (when refused) and the URLs of its
// decode and prefill legs.
func topoChat(gwURL string) (status int, code, decode, prefill string, err error) {
	resp, err := http.Post(gwURL+"/v1/chat/completions", "application/json", //nolint:noctx // loopback, bounded by the gateway's timeout
		strings.NewReader(`{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return 0, "", "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e.Error.Code, "", "", nil
	}
	return resp.StatusCode, "", resp.Header.Get(dispatch.HeaderWorker), resp.Header.Get(dispatch.HeaderPrefillWorker), nil
}

// topoRun sends n chats from `workers` clients at once and calls check with each pair.
func topoRun(t *testing.T, gwURL string, n, workers int, check func(decode, prefill string) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				status, code, d, p, err := topoChat(gwURL)
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("status %d %s", status, code)
				}
				if err == nil {
					err = check(d, p)
				}
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// topoArgs registers the cluster's engines as PD workers with the places given (engine index ->
// --worker-topology keys).
func topoArgs(c *sim.Cluster, places map[int]string) []string {
	args := pdArgs(c)
	for i, p := range places {
		args = append(args, "--worker-topology", c.Engines[i].URL()+"="+p)
	}
	return args
}

// TestTopologyPairsStayClose: two zones, each a prefill engine and two decode engines (one on the
// prefill's node, one elsewhere in the zone). Under 16 concurrent clients the default penalties keep
// every pair in its zone (a cross-zone pair costs 32 in-flight requests, more than the clients), most
// on the prefill's own node, and sluice_pd_pairs_total says so.
func TestTopologyPairsStayClose(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 4, Protocol: sim.ProtocolSGLang, Mode: sim.ModeInstant,
		Engine: sim.Config{Models: []string{"m"}}})
	places := map[int]string{
		0: "zone=a,node=n1", 1: "zone=b,node=n2", // prefill
		2: "zone=a,node=n1", 3: "zone=a,node=n3", 4: "zone=b,node=n2", 5: "zone=b,node=n4", // decode
	}
	zone := map[string]string{}
	for i, p := range places {
		zone[c.Engines[i].URL()] = p[5:6]
	}
	gw := startGateway(t, app.Options{}, append(topoArgs(c, places), "--pd-disaggregation", "--disable-retries")...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })

	const n = 400
	topoRun(t, gw.URL, n, 16, func(d, p string) error {
		if zone[d] == "" || zone[d] != zone[p] {
			return fmt.Errorf("paired %s (zone %q) with %s (zone %q)", p, zone[p], d, zone[d])
		}
		return nil
	})
	pairs := scrape(t, gw.URL, "sluice_pd_pairs_total")
	node, inZone := pairs["distance=node,revision="], pairs["distance=zone,revision="]
	if node+inZone != n || pairs["distance=cross_zone,revision="] != 0 {
		t.Fatalf("pairs %v: want all %d in zone", pairs, n)
	}
	if node <= inZone {
		t.Fatalf("pairs %v: want most on the prefill's node", pairs)
	}
}

// TestTopologyForbiddenZone: with --pd-topology-forbid zone, N requests over two zones make no
// cross-zone pair, with and without decode seats; a fleet whose only pairs cross zones answers 503
// pd_topology_forbidden.
func TestTopologyForbiddenZone(t *testing.T) {
	t.Parallel()
	for _, seats := range []string{"0", "4"} {
		t.Run("decode-seats="+seats, func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 2, Protocol: sim.ProtocolSGLang, Mode: sim.ModeInstant,
				Engine: sim.Config{Models: []string{"m"}}})
			places := map[int]string{0: "zone=a", 1: "zone=b", 2: "zone=a", 3: "zone=b"}
			zone := map[string]string{}
			for i, p := range places {
				zone[c.Engines[i].URL()] = p
			}
			gw := startGateway(t, app.Options{}, append(topoArgs(c, places), "--pd-disaggregation", "--disable-retries",
				"--pd-topology-forbid", "zone", "--pd-topology-penalty", "cross_zone=0",
				"--decode-max-inflight-requests-per-worker", seats)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			const n = 200
			topoRun(t, gw.URL, n, 8, func(d, p string) error {
				if zone[d] != zone[p] {
					return fmt.Errorf("paired %s (%s) with %s (%s)", p, zone[p], d, zone[d])
				}
				return nil
			})
			if pairs := scrape(t, gw.URL, "sluice_pd_pairs_total"); pairs["distance=zone,revision="] != n || len(pairs) != 1 {
				t.Fatalf("pairs %v: want %d same-zone pairs and nothing else", pairs, n)
			}

			// Only zone a's prefill and zone b's decode: every pair would cross.
			cross := startGateway(t, app.Options{}, "--pd-disaggregation", "--disable-retries", "--pd-topology-forbid", "zone",
				"--decode-max-inflight-requests-per-worker", seats,
				"--prefill", c.Engines[0].URL(), fmt.Sprint(c.Engines[0].BootstrapPort()), "--decode", c.Engines[3].URL(),
				"--worker-topology", c.Engines[0].URL()+"=zone=a", "--worker-topology", c.Engines[3].URL()+"=zone=b")
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return cross.Ready() == nil })
			status, code, _, _, err := topoChat(cross.URL)
			if err != nil || status != http.StatusServiceUnavailable || code != dispatch.CodeTopologyForbidden {
				t.Fatalf("cross-zone only: %d %q %v; want 503 %s", status, code, err, dispatch.CodeTopologyForbidden)
			}
		})
	}
}

// TestRevisionsNeverMix: a fleet of two revisions (a canary of a new engine version) pairs every
// request within one revision, with and without decode seats; the metric counts pairs by revision;
// and a model whose prefill and decode engines are of different revisions answers 503
// pd_no_same_revision_pair.
func TestRevisionsNeverMix(t *testing.T) {
	t.Parallel()
	for _, seats := range []string{"0", "4"} {
		t.Run("decode-seats="+seats, func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 3, Protocol: sim.ProtocolSGLang, Mode: sim.ModeInstant,
				Engine: sim.Config{Models: []string{"m"}}})
			places := map[int]string{0: "revision=v1", 1: "revision=v2", 2: "revision=v1", 3: "revision=v2", 4: "revision=v2"}
			rev := map[string]string{}
			for i, p := range places {
				rev[c.Engines[i].URL()] = strings.TrimPrefix(p, "revision=")
			}
			// Round robin spreads the prefills over both revisions (cache_aware would keep this test's one
			// prompt on one).
			gw := startGateway(t, app.Options{}, append(topoArgs(c, places), "--pd-disaggregation", "--disable-retries",
				"--prefill-policy", "round_robin", "--decode-max-inflight-requests-per-worker", seats)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			const n = 300
			topoRun(t, gw.URL, n, 8, func(d, p string) error {
				if rev[d] == "" || rev[d] != rev[p] {
					return fmt.Errorf("paired %s (%s) with %s (%s)", p, rev[p], d, rev[d])
				}
				return nil
			})
			pairs := scrape(t, gw.URL, "sluice_pd_pairs_total")
			v1, v2 := pairs["distance=unknown,revision=v1"], pairs["distance=unknown,revision=v2"]
			if v1+v2 != n || v1 == 0 || v2 == 0 {
				t.Fatalf("pairs %v: want %d over both revisions", pairs, n)
			}

			mixed := startGateway(t, app.Options{}, "--pd-disaggregation", "--disable-retries",
				"--decode-max-inflight-requests-per-worker", seats,
				"--prefill", c.Engines[0].URL(), fmt.Sprint(c.Engines[0].BootstrapPort()), "--decode", c.Engines[3].URL(),
				"--worker-topology", c.Engines[0].URL()+"=revision=v1", "--worker-topology", c.Engines[3].URL()+"=revision=v2")
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return mixed.Ready() == nil })
			status, code, _, _, err := topoChat(mixed.URL)
			if err != nil || status != http.StatusServiceUnavailable || code != dispatch.CodeNoSameRevisionPair {
				t.Fatalf("mixed revisions only: %d %q %v; want 503 %s", status, code, err, dispatch.CodeNoSameRevisionPair)
			}
		})
	}
}

// TestTopologyTransferCost: simulated engines in two zones whose decode engines pay 20 ms for a KV
// cache from the other zone. A gateway that knows the topology never makes them pay it; one that does
// not (random policies) does. The mean latencies are logged, not asserted: the machine is shared.
func TestTopologyTransferCost(t *testing.T) {
	t.Parallel()
	zones := []sim.Topology{{Zone: "a"}, {Zone: "b"}, {Zone: "a"}, {Zone: "b"}}
	c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 2, Protocol: sim.ProtocolSGLang, Mode: sim.ModeInstant,
		Topologies: zones, Engine: sim.Config{Models: []string{"m"}, TransferDelays: sim.TransferDelays{CrossZone: 20 * time.Millisecond}}})
	remote := func() (n int64) {
		for _, e := range c.ByRole(sim.RoleDecode) {
			n += e.Stats().RemoteTransfers
		}
		return n
	}
	run := func(name string, flags ...string) (time.Duration, int64) {
		gw := startGateway(t, app.Options{}, append(append(pdArgs(c), "--pd-disaggregation", "--disable-retries",
			"--prefill-policy", "random", "--decode-policy", "random"), flags...)...)
		waitFor(t, name+" gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
		before := remote()
		const n = 100
		start := time.Now()
		topoRun(t, gw.URL, n, 4, func(string, string) error { return nil })
		mean := time.Since(start) / n * 4
		return mean, remote() - before
	}
	blindMean, blind := run("blind")
	var flags []string
	for i, z := range zones {
		flags = append(flags, "--worker-topology", c.Engines[i].URL()+"=zone="+z.Zone)
	}
	awareMean, aware := run("aware", flags...)
	t.Logf("mean request time: topology-blind %v (%d cross-zone transfers), topology-aware %v (%d)", blindMean, blind, awareMean, aware)
	if blind == 0 || aware != 0 {
		t.Fatalf("cross-zone KV transfers: %d without topology (want some), %d with it (want none)", blind, aware)
	}
}

// TestRevisionFromAdminLabels: the admin API's worker labels set a worker's revision live: once the
// second prefill engine is labelled another revision than the one decode engine, it gets no request.
func TestRevisionFromAdminLabels(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 1, Protocol: sim.ProtocolSGLang, Mode: sim.ModeInstant,
		Engine: sim.Config{Models: []string{"m"}}})
	gw := startGateway(t, app.Options{}, append(pdArgs(c), "--pd-disaggregation", "--disable-retries", "--prefill-policy", "round_robin")...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	seen := map[string]bool{}
	var mu sync.Mutex
	topoRun(t, gw.URL, 20, 2, func(_, p string) error {
		mu.Lock()
		defer mu.Unlock()
		seen[p] = true
		return nil
	})
	if len(seen) != 2 {
		t.Fatalf("before labels, prefills used: %v; want both", seen)
	}
	// Flag workers get ids in flag order: w1, w2 the prefills, w3 the decode.
	for id, rev := range map[string]string{"w1": "v1", "w2": "v2", "w3": "v1"} {
		if st, body := adminCall(t, http.MethodPatch, gw.URL+"/workers/"+id, `{"labels":{"sluice.dev/revision":"`+rev+`"}}`); st != http.StatusAccepted {
			t.Fatalf("PATCH %s: %d %s", id, st, body)
		}
	}
	topoRun(t, gw.URL, 40, 4, func(_, p string) error {
		if p != c.Engines[0].URL() {
			return fmt.Errorf("prefill %s of revision v2 paired with the v1 decode", p)
		}
		return nil
	})
}
