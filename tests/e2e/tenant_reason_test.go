package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/testkit/poll"
)

// TestTenantRejectionReasonMatchesAdmission: a request refused by a full prefill queue is counted with
// the same reason in the tenant metrics as in the admission metrics (queue_full), so the two can be
// joined; the client still reads the code pd_prefill_queue_full.
func TestTenantRejectionReasonMatchesAdmission(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{BootstrapTimeout: time.Minute}})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--disable-retries",
		"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "1", "--prefill-queue-timeout-secs", "60",
		"--tenant-header", "X-Tenant", "--tenant-max-queued", "off"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	prefill := c.ByRole(sim.RolePrefill)[0]
	if err := prefill.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	send := func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant", "a")
		return http.DefaultClient.Do(req)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	defer func() {
		cancel()
		<-done
		<-done
	}()
	for range 2 { // one holds the slot, one waits
		go func() {
			if resp, err := send(ctx); err == nil {
				resp.Body.Close()
			}
			done <- struct{}{}
		}()
	}
	waitFor(t, "the slot held and the queue full", 10*time.Second, func() bool {
		s := gw.Admission.Status()
		return s.Inflight[prefill.URL()] == 1 && s.QueuedByTenant["a"] == 1
	})
	resp, err := send(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if e := decodeError(t, resp); resp.StatusCode != http.StatusTooManyRequests || e.Error.Code != "pd_prefill_queue_full" {
		t.Fatalf("overflow: %d %s, want 429 pd_prefill_queue_full", resp.StatusCode, e.Error.Code)
	}
	if rej := scrape(t, gw.URL, "sluice_pd_prefill_admission_rejections_total"); rej["queue=sim-model,reason=queue_full"] != 1 {
		t.Errorf("admission rejections %v, want one queue_full", rej)
	}
	// The tenant metrics count the request when it ends, which may be just after its answer was read.
	var rej map[string]float64
	poll.Wait(5*time.Second, func() bool { rej = scrape(t, gw.URL, "sluice_tenant_rejections_total"); return len(rej) > 0 })
	if len(rej) != 1 || rej["reason=queue_full,tenant=a"] != 1 {
		t.Errorf("tenant rejections %v, want one with admission's reason queue_full", rej)
	}
}
