package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestTenantFairShareEndToEnd: two tenants named by their API keys (keys file ids) share one prefill
// slot through the real gateway, with the official Go SDK as the client. The noisy tenant floods: past
// --tenant-max-queued it gets its own 429 tenant_queue_full while the quiet tenant's requests still
// queue. Then the slot is freed one request at a time (each admitted request hangs in the engine until
// its client goes away), and the order in which the tenants are admitted is read from admission's
// per-tenant queue counts. With the round robin the quiet tenant is admitted every other turn although
// it arrived after the whole flood; in share mode (the default) too, since no grant has been measured
// when the quiet requests arrive: the first goes to the round robin's head (noisy), and from there
// each goes to the tenant of the lower recent rate (under its share), which alternates. With
// --tenant-fairness off the flood goes first, in arrival order.
func TestTenantFairShareEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		fairness string
		want     []string
	}{
		{"share", []string{"noisy", "quiet", "noisy", "quiet", "noisy"}},
		{"round-robin", []string{"noisy", "quiet", "noisy", "quiet", "noisy"}},
		{"off", []string{"noisy", "noisy", "noisy", "quiet", "quiet"}},
	} {
		t.Run("fairness "+tt.fairness, func(t *testing.T) {
			t.Parallel()
			got := runTenantFlood(t, tt.fairness, 0, 2)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("admission order by tenant %v, want %v", got, tt.want)
			}
		})
	}
}

// TestTenantQuietBurstEndToEnd: the flood of TestTenantFairShareEndToEnd is served for six turns
// first (it keeps three waiting), so that its rate is measured; then the quiet tenant sends a burst of
// three. In share mode (the default) the quiet tenant is under its share, its rate well below the
// flood's: its three requests all go before the flood's next. The round robin interleaves them, one a
// turn.
func TestTenantQuietBurstEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		fairness string
		want     []string
	}{
		{"share", []string{"quiet", "quiet", "quiet", "noisy", "noisy", "noisy"}},
		{"round-robin", []string{"quiet", "noisy", "quiet", "noisy", "quiet", "noisy"}},
	} {
		t.Run("fairness "+tt.fairness, func(t *testing.T) {
			t.Parallel()
			got := runTenantFlood(t, tt.fairness, 6, 3)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("admission order by tenant after the quiet burst %v, want %v", got, tt.want)
			}
		})
	}
}

// runTenantFlood runs the flood with the --tenant-fairness value given: the noisy tenant holds the
// slot and keeps three waiting for warm turns, then quiet requests arrive; it returns the tenants in
// the order they were admitted from then on.
func runTenantFlood(t *testing.T, fairness string, warm, quiet int) []string {
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{BootstrapTimeout: time.Minute}})
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("noisy sk-noisy-0123456789\nquiet sk-quiet-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--disable-retries",
		"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "20", "--prefill-queue-timeout-secs", "60",
		"--api-keys-file", keys, "--tenant-api-key-ids", "--tenant-max-queued", "3", "--tenant-fairness", fairness}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	prefill := c.ByRole(sim.RolePrefill)[0]
	if err := prefill.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	client := func(key string) openai.Client {
		return openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	}
	noisy, quietC := client("sk-noisy-0123456789"), client("sk-quiet-0123456789")
	params := openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}

	type call struct {
		tenant string
		cancel context.CancelFunc
		done   chan error
	}
	start := func(cl openai.Client, tenant string) *call {
		ctx, cancel := context.WithCancel(context.Background())
		k := &call{tenant: tenant, cancel: cancel, done: make(chan error, 1)}
		go func() {
			_, err := cl.Chat.Completions.New(ctx, params)
			k.done <- err
		}()
		return k
	}
	var calls []*call
	defer func() { // every client goroutine ends with the test
		for _, k := range calls {
			k.cancel()
			<-k.done
		}
	}()
	queued := func() map[string]int { return gw.Admission.Status().QueuedByTenant }

	// The noisy tenant's first request holds the slot; three more queue, the fourth is refused.
	holder := start(noisy, "noisy")
	calls = append(calls, holder)
	waitFor(t, "the slot held", 10*time.Second, func() bool { return gw.Admission.Status().Inflight[prefill.URL()] == 1 })
	waiting := map[string][]*call{}
	for i := 1; i <= 3; i++ {
		k := start(noisy, "noisy")
		calls = append(calls, k)
		waiting["noisy"] = append(waiting["noisy"], k)
		waitFor(t, fmt.Sprintf("noisy #%d queued", i), 10*time.Second, func() bool { return queued()["noisy"] == i })
	}
	_, err := noisy.Chat.Completions.New(context.Background(), params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "tenant_queue_full" {
		t.Fatalf("noisy over its bound: %v, want 429 tenant_queue_full", err)
	}
	// next frees the slot held by cur and returns the tenant admitted to it (whichever tenant's queue
	// count drops; within a tenant it is the oldest waiter, FIFO) and its call; "" once nobody waits.
	next := func(cur *call) (string, *call) {
		before := queued()
		cur.cancel()
		if err := <-cur.done; err == nil {
			t.Fatal("a hung request answered")
		}
		cur.done <- nil // for the deferred drain
		if len(before) == 0 {
			return "", nil
		}
		var admitted string
		waitFor(t, "the next admission", 10*time.Second, func() bool {
			now := queued()
			for tn, n := range before {
				if now[tn] == n-1 && gw.Admission.Status().Inflight[prefill.URL()] == 1 {
					admitted = tn
					return true
				}
			}
			return false
		})
		k := waiting[admitted][0]
		waiting[admitted] = waiting[admitted][1:]
		return admitted, k
	}
	// Warm turns: the noisy tenant is served and queues another each time.
	cur := holder
	for i := range warm {
		var tenant string
		if tenant, cur = next(cur); tenant != "noisy" {
			t.Fatalf("warm turn %d admitted %q, want noisy", i, tenant)
		}
		k := start(noisy, "noisy")
		calls = append(calls, k)
		waiting["noisy"] = append(waiting["noisy"], k)
		waitFor(t, "noisy back to 3 queued", 10*time.Second, func() bool { return queued()["noisy"] == 3 })
	}
	// The quiet tenant still queues: the flood's refusal is its own.
	for i := 1; i <= quiet; i++ {
		k := start(quietC, "quiet")
		calls = append(calls, k)
		waiting["quiet"] = append(waiting["quiet"], k)
		waitFor(t, fmt.Sprintf("quiet #%d queued", i), 10*time.Second, func() bool { return queued()["quiet"] == i })
	}
	if rej := scrape(t, gw.URL, "sluice_pd_prefill_admission_rejections_total"); rej["queue=sim-model,reason=tenant_queue_full"] != 1 {
		t.Errorf("rejections %v, want one tenant_queue_full", rej)
	}

	var order []string
	for tenant := ""; ; order = append(order, tenant) {
		if tenant, cur = next(cur); cur == nil {
			return order
		}
	}
}
