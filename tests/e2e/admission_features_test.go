package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestAdmissionFeaturesThroughAdminAPI sets every new admission field with the CLI, reads them back over
// REST, switches adaptation off with a fixed limit over REST, and gets a 400 naming the field for bad
// bands.
func TestAdmissionFeaturesThroughAdminAPI(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "3")
	common := []string{"--server", gw.URL}
	out := runCLI(t, 0, append([]string{"admission", "set", "--token-limit", "4096", "--bands", "low:-10,default:0,high:10",
		"--aging", "5s", "--early-rejection=true", "--adaptive", "2:8", "-o", "json"}, common...)...)
	var st struct {
		Settings struct {
			Tokens int `json:"max_inflight_tokens_per_worker"` // a JSON number, as every admin integer
			Bands  []struct {
				Name string `json:"name"`
				Min  int    `json:"min_priority"`
			} `json:"priority_bands"`
			Aging    string `json:"priority_aging"`
			Early    bool   `json:"early_rejection"`
			Adaptive *struct {
				Min, Max int
			} `json:"adaptive_limit"`
		} `json:"settings"`
		Bands []struct {
			Name   string `json:"name"`
			Queued int    `json:"queued"`
		} `json:"bands"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	s := st.Settings
	if s.Tokens != 4096 || len(s.Bands) != 3 || s.Bands[2].Name != "high" || s.Bands[0].Min != -10 || s.Aging != "5s" || !s.Early ||
		s.Adaptive == nil || s.Adaptive.Min != 2 || s.Adaptive.Max != 8 || len(st.Bands) != 3 {
		t.Fatalf("admission set -o json: %s", out)
	}
	got := gw.Admission.Settings()
	if got.MaxInflightTokensPerWorker != 4096 || len(got.Bands) != 3 || got.Aging != 5*time.Second || !got.EarlyRejection || got.Adaptive.Max != 8 {
		t.Fatalf("gateway settings after the CLI: %+v", got)
	}
	if table := runCLI(t, 0, append([]string{"admission", "get"}, common...)...); !strings.Contains(table, "tokens/worker:  4096") ||
		!strings.Contains(table, "adaptive limit: 2:8") || !strings.Contains(table, "high") {
		t.Fatalf("admission get:\n%s", table)
	}

	// A fixed limit over REST switches adaptation off.
	patch := func(body string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPatch, gw.URL+"/admin/v1/admission", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, b := patch(`{"max_inflight_per_worker":4}`)
	var fixed struct {
		Settings struct {
			Limit    int             `json:"max_inflight_per_worker"`
			Adaptive json.RawMessage `json:"adaptive_limit"`
		} `json:"settings"`
	}
	if err := json.Unmarshal(b, &fixed); code != 200 || err != nil || fixed.Settings.Limit != 4 ||
		(len(fixed.Settings.Adaptive) > 0 && string(fixed.Settings.Adaptive) != "null") {
		t.Fatalf("PATCH fixed limit: %d %s", code, b)
	}
	if a := gw.Admission.Settings().Adaptive; a.On() {
		t.Fatalf("adaptation still on after a fixed limit: %+v", a)
	}
	code, b = patch(`{"priority_bands":{"bands":[{"name":"b","min_priority":5},{"name":"a","min_priority":1}]}}`)
	if code != 400 || !strings.Contains(string(b), "must be above the previous band") {
		t.Fatalf("PATCH bad bands: %d %s", code, b)
	}
	if code, b := patch(`{"adaptive_limit":{"min":0,"max":4}}`); code != 400 || !strings.Contains(string(b), "adaptive_limit 0:4 must have") {
		t.Fatalf("PATCH bad adaptive range: %d %s", code, b)
	}
	_, body := get(t, gw.URL+"/admin/v1/admission")
	if !strings.Contains(string(body), `"release_rate"`) && !strings.Contains(string(body), `"settings"`) {
		t.Fatalf("GET admission: %s", body)
	}
}

// TestTokenBudgetBandsAndEarlyRejectionEndToEnd runs the features against a simulated PD cluster: an
// oversize prompt holds the only prefill worker alone, requests of two bands queue behind it (per-band
// gauges), a request whose client deadline cannot be met gets an immediate 429
// pd_prefill_queue_timeout with Retry-After, counted as predicted_timeout, and everything completes.
func TestTokenBudgetBandsAndEarlyRejectionEndToEnd(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--disable-retries",
		"--prefill-max-inflight-tokens-per-worker", "1000", "--prefill-queue-size", "10",
		"--prefill-priority-bands", "low:-10,default:0,high:10", "--prefill-early-rejection"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	prefill := c.ByRole(sim.RolePrefill)[0]
	chat := gw.URL + "/v1/chat/completions"
	msg := func(words int, extra string) string {
		return `{"model":"sim-model","max_tokens":2,` + extra + `"messages":[{"role":"user","content":"` +
			strings.TrimSpace(strings.Repeat("abc ", words)) + `"}]}`
	}
	// A few quick requests teach admission the release rate.
	for range 3 {
		resp, err := post(context.Background(), chat, msg(8, ""))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("warm-up: %d", resp.StatusCode)
		}
	}
	// An oversize prompt (about 2,000 estimated tokens, budget 1,000) runs alone; its prefill hangs.
	if err := prefill.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	ctxBig, cancelBig := context.WithCancel(context.Background())
	defer cancelBig()
	big := goPost(ctxBig, chat, msg(2000, ""))
	waitFor(t, "the oversize request holds the worker", 10*time.Second, func() bool {
		select {
		case r := <-big:
			if r.err != nil {
				t.Fatalf("big: %v", r.err)
			}
			b, _ := io.ReadAll(r.resp.Body)
			t.Fatalf("big ended: %d %s", r.resp.StatusCode, b)
		default:
		}
		return gw.Admission.Status().InflightTokens[prefill.URL()] >= 1000
	})
	low := goPost(context.Background(), chat, msg(8, `"priority":-5,`))
	waitFor(t, "low queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })
	req, _ := http.NewRequest(http.MethodPost, chat, strings.NewReader(msg(8, "")))
	req.Header.Set("X-Sluice-Priority", "20")
	high := make(chan result, 1)
	go func() { resp, err := http.DefaultClient.Do(req); high <- result{resp, err} }()
	waitFor(t, "high queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 2 })
	bq := scrape(t, gw.URL, "sluice_pd_prefill_admission_band_queued")
	if bq["band=low"] != 1 || bq["band=high"] != 1 || bq["band=default"] != 0 {
		t.Errorf("band gauges %v, want low 1, high 1, default 0", bq)
	}
	if tok := scrape(t, gw.URL, "sluice_pd_prefill_admission_inflight_tokens")["worker="+prefill.URL()]; tok < 1000 {
		t.Errorf("tokens gauge %v, want the oversize request's estimate", tok)
	}

	// A client that waits 1 ms cannot be served: rejected at once.
	hurried, _ := http.NewRequest(http.MethodPost, chat, strings.NewReader(msg(8, "")))
	hurried.Header.Set("X-Sluice-Deadline-Ms", "1")
	resp, err := http.DefaultClient.Do(hurried)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("hurried: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if e := decodeError(t, resp); e.Error.Code != "pd_prefill_queue_timeout" {
		t.Fatalf("hurried code %q", e.Error.Code)
	}
	if rej := scrape(t, gw.URL, "sluice_pd_prefill_admission_rejections_total"); rej["queue=sim-model,reason=predicted_timeout"] != 1 || rej["queue=sim-model,reason=queue_timeout"] != 0 {
		t.Errorf("rejections %v, want one predicted_timeout", rej)
	}

	// The engine recovers; the oversize request's client gives up; both queued requests complete.
	if err := prefill.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	cancelBig()
	if r := <-big; r.err == nil {
		r.resp.Body.Close()
	}
	for name, ch := range map[string]<-chan result{"low": low, "high": high} {
		r := <-ch
		if r.err != nil {
			t.Fatalf("%s: %v", name, r.err)
		}
		io.Copy(io.Discard, r.resp.Body)
		r.resp.Body.Close()
		if r.resp.StatusCode != 200 {
			t.Errorf("%s: status %d", name, r.resp.StatusCode)
		}
	}
	waitFor(t, "tokens back to 0", 10*time.Second, func() bool { return gw.Admission.Status().InflightTokens[prefill.URL()] == 0 })
}

// TestLoadMonitorAndLeastLoad: with least_load the gateway polls every engine's own load report (SGLang
// /v1/loads here) and routes by it.
func TestLoadMonitorAndLeastLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 1, Protocol: sim.ProtocolSGLang})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--prefill-policy", "least_load",
		"--engine-load-interval-secs", "0.1", "--prefill-max-inflight-requests-per-worker", "8",
		"--worker-overload-waiting-requests", "4"}, pdArgs(c)...)...)
	if gw.LoadMonitor == nil || gw.LoadMonitor.Interval() != 100*time.Millisecond {
		t.Fatal("no load monitor at the configured interval")
	}
	waitFor(t, "every engine's load polled", 10*time.Second, func() bool {
		for _, w := range gw.Registry.Snapshot().All() {
			if _, ok := w.EngineLoad(); !ok {
				return false
			}
		}
		return true
	})
	workers := map[string]int{}
	for range 6 {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"hello"}]}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		workers[resp.Header.Get("X-Sluice-Prefill-Worker")]++
	}
	if len(workers) == 0 || workers[""] > 0 {
		t.Errorf("prefill workers %v", workers)
	}
}
