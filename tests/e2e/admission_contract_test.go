package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// The seed's admission contract for split samples and retries (reference/seed-prefill-admission.md),
// one body per case run in every PD mode: over HTTP and over the engines' own gRPC (#35).

// TestSplitSamplesHoldTheSlotUntilTheLast: an n = 3 request split into single-sample PD requests holds
// one slot; two samples finish their prefill while the third is held in the engine, and the slot stays
// taken (a second request queues behind it) until the last sample's prefill ends. The first finished
// sample must not give the shared slot back.
func TestSplitSamplesHoldTheSlotUntilTheLast(t *testing.T) {
	t.Parallel()
	for _, m := range splitModes() {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Engine: sim.Config{BootstrapTimeout: time.Minute}})
			gw := m.startGateway(t, c, "--disable-retries", "--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "4")
			prefill := c.ByRole(sim.RolePrefill)[0]
			url := m.url(prefill)
			chat := gw.URL + "/v1/chat/completions"
			// Two of the three samples run; the third waits in the prefill engine.
			if err := prefill.SetFaults(sim.Faults{Hold: true, HoldSkip: 2}); err != nil {
				t.Fatal(err)
			}
			a := goPost(context.Background(), chat, `{"model":"sim-model","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":4,"n":3}`)
			waitFor(t, "two samples prefilled, one held", 10*time.Second, func() bool {
				st := prefill.Stats()
				return st.Completed == 2 && st.InFlight == 1
			})
			if n := gw.Admission.Status().Inflight[url]; n != 1 {
				t.Fatalf("slots held with one sample's prefill unfinished = %d, want 1", n)
			}
			b := goPost(context.Background(), chat, shortChat)
			waitFor(t, "B queued behind the unfinished sample", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })
			if n := gw.Admission.Status().Inflight[url]; n != 1 {
				t.Fatalf("slots held = %d while B waits, want 1", n)
			}

			if err := prefill.SetFaults(sim.Faults{}); err != nil {
				t.Fatal(err)
			}
			var got struct {
				Choices []json.RawMessage `json:"choices"`
			}
			if body := okBody(t, <-a); json.Unmarshal(body, &got) != nil || len(got.Choices) != 3 {
				t.Fatalf("A: %s; want 3 choices", body)
			}
			okBody(t, <-b)
			waitFor(t, "slot released", 10*time.Second, func() bool {
				st := gw.Admission.Status()
				return st.Inflight[url] == 0 && st.QueuedTotal == 0
			})
		})
	}
}

// TestRetryReleasesBeforeBackoffAndIsReadmitted: a prefill that fails the first attempt gives the slot
// back before the retry's backoff (another request takes it meanwhile), the other leg ends with it, and
// the retry goes through admission again: it waits in the queue behind that request, then succeeds.
func TestRetryReleasesBeforeBackoffAndIsReadmitted(t *testing.T) {
	t.Parallel()
	for _, m := range pdModes() {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Engine: sim.Config{BootstrapTimeout: time.Minute}})
			// The backoff is the window the test acts in, not a wait it relies on ending: the retry is
			// only observed once it is queued. 20 s, because on a loaded CI machine 5 s did not always
			// cover the steps before B holds the slot.
			gw := m.startGateway(t, c, "--prefill-max-inflight-requests-per-worker", "1", "--retry-max-retries", "2",
				"--retry-initial-backoff-ms", "20000", "--retry-jitter-factor", "0")
			prefill, decode := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
			url := m.url(prefill)
			chat := gw.URL + "/v1/chat/completions"
			if err := prefill.SetFaults(sim.Faults{ErrorRate: 1, ErrorStatus: 503}); err != nil {
				t.Fatal(err)
			}
			a := goPost(context.Background(), chat, shortChat)
			waitFor(t, "A's first attempt failed", 10*time.Second, func() bool { return prefill.Stats().Failed == 1 })
			waitFor(t, "the failed attempt released its slot and its decode leg", 10*time.Second, func() bool {
				return gw.Admission.Status().Inflight[url] == 0 && decode.Stats().InFlight == 0
			})

			// B takes the free slot during A's backoff and is held in the engine.
			if err := prefill.SetFaults(sim.Faults{Hold: true}); err != nil {
				t.Fatal(err)
			}
			b := goPost(context.Background(), chat, shortChat)
			waitFor(t, "B holds the slot", 10*time.Second, func() bool { return gw.Admission.Status().Inflight[url] == 1 })
			select {
			case r := <-a:
				b, _ := io.ReadAll(r.resp.Body)
				t.Fatalf("A ended during its backoff: %d %s", r.resp.StatusCode, b)
			default:
			}
			waitFor(t, "A's retry queued in admission", 40*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })

			if err := prefill.SetFaults(sim.Faults{}); err != nil {
				t.Fatal(err)
			}
			okBody(t, <-b)
			ra := <-a
			okBody(t, ra)
			if p := ra.resp.Header.Get("X-Sluice-Prefill-Worker"); p != url {
				t.Errorf("A's retry prefilled on %q, want %q", p, url)
			}
			if n := scrape(t, gw.URL, "sluice_retries_total")[""]; n != 1 {
				t.Errorf("sluice_retries_total = %v, want 1", n)
			}
			waitFor(t, "slot released", 10*time.Second, func() bool {
				st := gw.Admission.Status()
				return st.Inflight[url] == 0 && st.QueuedTotal == 0
			})
		})
	}
}

// okBody reads a 200 response's body; anything else fails the test.
func okBody(t *testing.T, r result) []byte {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.resp.Body.Close()
	b, err := io.ReadAll(r.resp.Body)
	if err != nil || r.resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s (%v)", r.resp.StatusCode, b, err)
	}
	return b
}
