package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// Tenant budgets across two coordinated gateways (static peers, as the cluster tests run them, and
// serial like them: they are timing-sensitive under load).

// budgetsOf is a gateway's GET /admin/v1/tenants/budgets body.
func budgetsOf(t *testing.T, gw *gateway) string {
	t.Helper()
	resp, body := get(t, gw.URL+"/admin/v1/tenants/budgets", "Authorization", "Bearer fleet-secret")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET budgets: %d %s", resp.StatusCode, body)
	}
	return string(body)
}

// budgetsState is the state part of `sluice tenants budgets get -o json`.
type budgetsState struct {
	Version       uint32             `json:"version"`
	VersionOrigin string             `json:"version_origin"`
	Fleet         bool               `json:"fleet"`
	DefaultShare  float64            `json:"default_share"`
	Shares        map[string]float64 `json:"shares"`
}

// budgetsStateOf reads gw's budgets state through the CLI.
func budgetsStateOf(t *testing.T, gw *gateway) budgetsState {
	t.Helper()
	out := runCLI(t, 0, "tenants", "budgets", "get", "--server", gw.URL, "--admin-api-key", "fleet-secret", "-o", "json")
	var resp struct {
		State budgetsState `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("budgets get -o json: %v\n%s", err, out)
	}
	return resp.State
}

// tenantHammer sends tenant's requests to url from clients clients, each at most 100 a second (the
// offered load, kept well below what would load the machine with refusals), until ctx ends, counting the
// answers by status.
type tenantHammer struct {
	ok, limited, other atomic.Int64
	wg                 sync.WaitGroup
}

func hammer(ctx context.Context, t *testing.T, url, tenantName string, clients int) *tenantHammer {
	h := &tenantHammer{}
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	for range clients {
		h.wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for ctx.Err() == nil {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				body := fmt.Sprintf(`{"model":"sim-model","max_tokens":1,"messages":[{"role":"user","content":"budget %d"}]}`, promptSeq.Add(1))
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Tenant", tenantName)
				resp, err := hc.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case ctx.Err() != nil:
				case resp.StatusCode == http.StatusOK:
					h.ok.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests:
					h.limited.Add(1)
				default:
					h.other.Add(1)
				}
			}
		})
	}
	return h
}

// TestClusterTenantBudgets: a budget set live on replica B reaches replica A through the cluster
// exchange (A answers it and enforces it); and a tenant whose traffic all goes to A is limited near its
// whole budget there, not to the half an even split over two replicas would give it.
func TestClusterTenantBudgets(t *testing.T) {
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang})
	const rpm = 600 // 10 a second
	rs := startReplicas(t, c, 2, 8, true, "--tenant-header", "X-Tenant", "--tenant-budgets", fmt.Sprintf("a=0:%d", rpm))
	waitFor(t, "a coordinator every replica follows", 10*time.Second, func() bool { return agreed(rs) != "" })
	a, b := rs.gws[0], rs.gws[1]

	put, _ := http.NewRequest(http.MethodPut, b.URL+"/admin/v1/tenants/budgets",
		strings.NewReader(fmt.Sprintf(`{"tenants":{"a":{"requests_per_minute":%d},"x":{"requests_per_minute":1}}}`, rpm)))
	put.Header.Set("Content-Type", "application/json")
	put.Header.Set("Authorization", "Bearer fleet-secret")
	resp, err := http.DefaultClient.Do(put)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT budgets on B: %v %v", err, resp)
	}
	resp.Body.Close()
	waitFor(t, "the budgets set on B answered by A", 5*time.Second, func() bool { return strings.Contains(budgetsOf(t, a), `"x"`) })
	// A says (sluice tenants budgets get, over Connect) whose change it enforces, and that the budgets
	// are the fleet's.
	if st := budgetsStateOf(t, a); !st.Fleet || st.Version == 0 || st.VersionOrigin != rs.ids[1] {
		t.Fatalf("A's budgets state after B's change: %+v", st)
	}
	// A enforces it too: x's one request a minute (A's share of it lets one through) and no more.
	xctx, xcancel := context.WithCancel(context.Background())
	hx := hammer(xctx, t, a.URL, "x", 1)
	waitFor(t, "x limited on A", 30*time.Second, func() bool { return hx.limited.Load() > 0 })
	xcancel()
	hx.wg.Wait()

	// Tenant a sends only to A. Warm up (its demand reaches the coordinator, A's share rises), then
	// count what A serves over a few seconds of 10x offered load.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := hammer(ctx, t, a.URL, "a", 2)
	// Generous bounds: the tenant's burst must be spent first, and on a loaded machine the two clients
	// send far fewer than their 200 a second.
	waitFor(t, "a limited on A", 30*time.Second, func() bool { return h.limited.Load() > 0 })
	waitFor(t, "a warmed up", 30*time.Second, func() bool { return h.limited.Load() > 50 })
	if st := budgetsStateOf(t, a); st.Shares["a"] <= 0.5 {
		t.Errorf("A enforces %v of the budget of a tenant sending only to it, want most of it (state %+v)", st.Shares["a"], st)
	}
	start, okStart := time.Now(), h.ok.Load()
	waitFor(t, "a measured for 4 s", 10*time.Second, func() bool { return time.Since(start) >= 4*time.Second })
	served, elapsed := h.ok.Load()-okStart, time.Since(start)
	cancel()
	h.wg.Wait()
	whole := rpm * elapsed.Minutes()
	t.Logf("A served %d of tenant a in %v: whole budget %.1f, even split %.1f (refused %d, other %d)",
		served, elapsed.Round(time.Millisecond), whole, whole/2, h.limited.Load(), h.other.Load())
	if float64(served) < 0.75*whole || float64(served) > 1.1*whole+2 {
		t.Fatalf("A served %d of a tenant sending only to it in %v, want near its whole budget %.1f (an even split gives %.1f)",
			served, elapsed, whole, whole/2)
	}
	if h.other.Load() != 0 {
		t.Errorf("%d answers neither 200 nor 429", h.other.Load())
	}
}
