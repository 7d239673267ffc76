package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestTenantHeaderShieldsQuietTenant: the operator sets only --tenant-header. One prefill slot is held,
// the queue holds 20; a flood of 40 requests from one tenant must not fill it: --tenant-max-queued
// defaults to half the queue, so the flood's overflow gets its own 429 tenant_queue_full and the quiet
// tenant's 5 requests all queue (before, they all got 429 pd_prefill_queue_full).
func TestTenantHeaderShieldsQuietTenant(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{BootstrapTimeout: time.Minute}})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--disable-retries",
		"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "20", "--prefill-queue-timeout-secs", "60",
		"--tenant-header", "X-Tenant"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	prefill := c.ByRole(sim.RolePrefill)[0]
	if err := prefill.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	chat := gw.URL + "/v1/chat/completions"
	body := `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	type res struct {
		code   int
		reason string
	}
	send := func(tenant string, out chan<- res) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, chat, strings.NewReader(body))
		if err != nil {
			out <- res{code: -1}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- res{code: -1}
			return
		}
		r := res{code: resp.StatusCode}
		if resp.StatusCode != http.StatusOK {
			r.reason = decodeError(t, resp).Error.Code
		} else {
			resp.Body.Close()
		}
		out <- r
	}
	const flood, quiet = 40, 5
	floodDone, quietDone := make(chan res, flood), make(chan res, quiet)
	floodSent, quietSent := 0, 0
	defer func() { // every client goroutine started ends with the test
		cancel()
		for range floodSent {
			<-floodDone
		}
		for range quietSent {
			<-quietDone
		}
	}()
	queued := func() map[string]int { return gw.Admission.Status().QueuedByTenant }
	for range flood {
		floodSent++
		go send("noisy", floodDone)
	}
	// The flood holds the slot and queues up to its bound (half the queue, 10); the rest is refused.
	const bound = 10
	waitFor(t, "the flood queued and refused", 10*time.Second, func() bool {
		return queued()["noisy"] == bound && len(floodDone) == flood-1-bound
	})
	refused := map[string]int{}
	for range flood - 1 - bound {
		r := <-floodDone
		floodDone <- res{} // for the deferred drain
		refused[fmt.Sprintf("%d %s", r.code, r.reason)]++
	}
	if want := map[string]int{"429 tenant_queue_full": flood - 1 - bound}; fmt.Sprint(refused) != fmt.Sprint(want) {
		t.Fatalf("flood refusals %v, want %v", refused, want)
	}
	for range quiet {
		quietSent++
		go send("quiet", quietDone)
	}
	waitFor(t, "the quiet tenant queued", 10*time.Second, func() bool {
		if len(quietDone) > 0 {
			t.Fatalf("a quiet request ended while the slot was held (queued %v)", queued())
		}
		return queued()["quiet"] == quiet
	})
}
