package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicegw/sluice/internal/sim"
)

func post(ctx context.Context, url, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, resp *http.Response) errorBody {
	t.Helper()
	defer resp.Body.Close()
	var e errorBody
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body is not OpenAI-shaped JSON: %v: %s", err, b)
	}
	return e
}

// scrape returns the value of every sample of a metric family, keyed by its label set.
func scrape(t *testing.T, gwURL, family string) map[string]float64 {
	t.Helper()
	_, body := get(t, gwURL+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	f, ok := families[family]
	if !ok {
		return out
	}
	for _, m := range f.GetMetric() {
		var key []string
		for _, l := range m.GetLabel() {
			key = append(key, l.GetName()+"="+l.GetValue())
		}
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		out[strings.Join(key, ",")] = v
	}
	return out
}

type result struct {
	resp *http.Response
	err  error
}

func goPost(ctx context.Context, url, body string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := post(ctx, url, body)
		ch <- result{resp, err}
	}()
	return ch
}

// TestAdmissionEndToEnd drives prefill admission through the REST surface with limit 1: a held prefill
// fills the slot, requests queue, the overflow gets 429 pd_prefill_queue_full, a short timeout gets 429
// pd_prefill_queue_timeout, a cancelled client leaves the queue, the slot frees when prefill ends while
// decode still streams, and the gauges return to 0.
// It runs in every PD mode: over HTTP and over the engines' gRPC.
func TestAdmissionEndToEnd(t *testing.T) {
	t.Parallel()
	for _, m := range pdModes() {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			admissionEndToEnd(t, m)
		})
	}
}

func admissionEndToEnd(t *testing.T, m pdMode) {
	// F's decode must outlast the test's checks: a long output needs a context to match.
	c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1,
		Engine: sim.Config{BootstrapTimeout: time.Minute, ContextLength: 1 << 20}})
	gw := m.startGateway(t, c, "--disable-retries",
		"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "2", "--prefill-queue-timeout-secs", "60")
	prefill := c.ByRole(sim.RolePrefill)[0]
	prefillURL := m.url(prefill)
	chat := gw.URL + "/v1/chat/completions"
	short := `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`

	// A holds the only slot: its prefill hangs inside the engine.
	if err := prefill.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	a := goPost(ctxA, chat, short)
	waitFor(t, "A holds the slot", 10*time.Second, func() bool { return gw.Admission.Status().Inflight[prefillURL] == 1 })

	// B and C queue.
	b := goPost(context.Background(), chat, short)
	waitFor(t, "B queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })
	ctxC, cancelC := context.WithCancel(context.Background())
	cch := goPost(ctxC, chat, short)
	waitFor(t, "C queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 2 })
	if got := scrape(t, gw.URL, "sluice_pd_prefill_admission_queued")["queue=sim-model"]; got != 2 {
		t.Errorf("queued gauge = %v, want 2", got)
	}

	// D overflows the queue: a real HTTP 429 with the code and a Retry-After.
	resp, err := post(context.Background(), chat, short)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("overflow: status %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Retry-After-Ms, which the OpenAI SDKs read first, is the same hint to the millisecond.
	if secs, err1 := strconv.Atoi(resp.Header.Get("Retry-After")); err1 != nil {
		t.Fatalf("Retry-After %q: %v", resp.Header.Get("Retry-After"), err1)
	} else if ms, err2 := strconv.Atoi(resp.Header.Get("Retry-After-Ms")); err2 != nil || ms <= 0 || (ms+999)/1000 != secs {
		t.Fatalf("Retry-After-Ms %q beside Retry-After %d: want the same delay in milliseconds", resp.Header.Get("Retry-After-Ms"), secs)
	}
	if e := decodeError(t, resp); e.Error.Code != "pd_prefill_queue_full" {
		t.Fatalf("overflow code %q, want pd_prefill_queue_full", e.Error.Code)
	}

	// C's client goes away: it leaves the queue.
	cancelC()
	if r := <-cch; r.err == nil {
		r.resp.Body.Close()
		t.Fatalf("cancelled request C got a response %d", r.resp.StatusCode)
	}
	waitFor(t, "C left the queue", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })

	// E waits behind B with a short timeout and gets 429 pd_prefill_queue_timeout.
	set := gw.Admission.Settings()
	set.QueueTimeout = 200 * time.Millisecond
	if err := gw.Admission.Update(set); err != nil {
		t.Fatal(err)
	}
	resp, err = post(context.Background(), chat, short)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("timeout: status %d, want 429", resp.StatusCode)
	}
	if e := decodeError(t, resp); e.Error.Code != "pd_prefill_queue_timeout" {
		t.Fatalf("timeout code %q, want pd_prefill_queue_timeout", e.Error.Code)
	}
	rej := scrape(t, gw.URL, "sluice_pd_prefill_admission_rejections_total")
	if rej["queue=sim-model,reason=queue_full"] != 1 || rej["queue=sim-model,reason=queue_timeout"] != 1 {
		t.Errorf("rejections = %v, want one queue_full and one queue_timeout", rej)
	}

	// The engine recovers; A's client gives up, which cancels A's legs and frees the slot for B.
	if err := prefill.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	cancelA()
	if r := <-a; r.err == nil {
		r.resp.Body.Close()
	}
	rb := <-b
	if rb.err != nil {
		t.Fatalf("B: %v", rb.err)
	}
	body, _ := io.ReadAll(rb.resp.Body)
	rb.resp.Body.Close()
	if rb.resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"chat.completion"`) {
		t.Fatalf("B: %d %s", rb.resp.StatusCode, body)
	}

	// F streams a very long decode: its slot must be free once prefill is done, while decode still runs.
	ctxF, cancelF := context.WithCancel(context.Background())
	defer cancelF()
	resp, err = post(ctxF, chat, `{"model":"sim-model","messages":[{"role":"user","content":"a long story"}],"max_tokens":200000,"stream":true,"ignore_eos":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("F: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("F first line %q, %v", line, err)
	}
	waitFor(t, "slot freed while decode streams", 10*time.Second, func() bool {
		return gw.Admission.Status().Inflight[prefillURL] == 0
	})
	if st := c.ByRole(sim.RoleDecode)[0].Stats(); st.Decoding == 0 && st.Running == 0 {
		t.Errorf("decode engine is not decoding any more (stats %+v): the check above proved nothing", st)
	}
	cancelF()
	resp.Body.Close()

	waitFor(t, "gauges back to 0", 10*time.Second, func() bool {
		for _, v := range scrape(t, gw.URL, "sluice_pd_prefill_admission_inflight") {
			if v != 0 {
				return false
			}
		}
		return scrape(t, gw.URL, "sluice_pd_prefill_admission_queued")["queue=sim-model"] == 0
	})
}
