package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// TestEngineGRPCContextLengthBeforeAdmission: with the only prefill slot held in the engine, a prompt
// longer than the model's context is answered 400 context_length_exceeded at once: it does not queue
// behind the held slot, takes none, and the admission gauges do not move. A prompt that fits still
// queues as before. (Until the check moved ahead of admission (#35), the long prompt queued and this
// test ended on its request's deadline.)
func TestEngineGRPCContextLengthBeforeAdmission(t *testing.T) {
	t.Parallel()
	for _, m := range pdModes() {
		if !m.engineGRPC {
			continue // over HTTP the engine itself refuses the prompt, after admission
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Engine: sim.Config{ContextLength: 64, BootstrapTimeout: time.Minute}})
			gw := m.startGateway(t, c, "--disable-retries", "--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "4")
			prefill := c.ByRole(sim.RolePrefill)[0]
			url := m.url(prefill)
			chat := gw.URL + "/v1/chat/completions"
			if err := prefill.SetFaults(sim.Faults{Hold: true}); err != nil {
				t.Fatal(err)
			}
			a := goPost(context.Background(), chat, shortChat)
			waitFor(t, "A holds the only prefill slot", 10*time.Second, func() bool {
				return gw.Admission.Status().Inflight[url] == 1 && prefill.Stats().InFlight == 1
			})

			long := strings.Repeat("too long ", 20)
			for path, body := range map[string]string{
				"/v1/chat/completions": `{"model":"sim-model","messages":[{"role":"user","content":"` + long + `"}],"max_tokens":4}`,
				"/v1/completions":      `{"model":"sim-model","prompt":"` + long + `","max_tokens":4}`,
				"/generate":            `{"model":"sim-model","text":"` + long + `"}`,
			} {
				// The bound only keeps a regression from hanging the test; a refusal takes far less.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := post(ctx, gw.URL+path, body)
				if err != nil {
					cancel()
					t.Fatalf("%s: %v (queued behind the held slot?)", path, err)
				}
				e := decodeError(t, resp)
				cancel()
				if resp.StatusCode != http.StatusBadRequest || e.Error.Code != "context_length_exceeded" ||
					!strings.Contains(e.Error.Message, "maximum context length is 64") {
					t.Errorf("%s: status %d, %+v; want 400 context_length_exceeded", path, resp.StatusCode, e.Error)
				}
				st := gw.Admission.Status()
				if st.QueuedTotal != 0 || st.Inflight[url] != 1 || st.Cancelled != 0 {
					t.Errorf("%s: admission moved: queued %d, inflight %d, cancelled %d", path, st.QueuedTotal, st.Inflight[url], st.Cancelled)
				}
				for k, v := range st.Rejections {
					if v != 0 {
						t.Errorf("%s: admission rejection %s = %d", path, k, v)
					}
				}
				if got := scrape(t, gw.URL, "sluice_pd_prefill_admission_queued")["queue=sim-model"]; got != 0 {
					t.Errorf("%s: queued gauge = %v, want 0", path, got)
				}
			}
			if st := prefill.Stats(); st.InFlight != 1 || st.Completed != 0 || st.Failed != 0 {
				t.Errorf("prefill engine: %d in flight, %d completed, %d failed; want A alone", st.InFlight, st.Completed, st.Failed)
			}

			// A prompt that fits queues behind the held slot as ever.
			b := goPost(context.Background(), chat, shortChat)
			waitFor(t, "B queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })
			if err := prefill.SetFaults(sim.Faults{}); err != nil {
				t.Fatal(err)
			}
			okBody(t, <-a)
			okBody(t, <-b)
			waitFor(t, "slot released", 10*time.Second, func() bool {
				st := gw.Admission.Status()
				return st.Inflight[url] == 0 && st.QueuedTotal == 0
			})
		})
	}
}
