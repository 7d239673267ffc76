package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/tests/testenv"
)

// TestCapacityAgainstLiveGateway: under streamed load through a realistic 1P/1D simulator pair,
// `sluice capacity` prints a recommendation per role with its reasoning; -o json and the REST
// route carry the same numbers, and /metrics exports the gauge autoscalers read.
func TestCapacityAgainstLiveGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: 1, Decode: 1, Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	p, d := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
	gw := testenv.StartGateway(t, app.Options{}, "--pd-disaggregation", "--admin-api-key", "adm",
		"--slo-ttft", "1", "--slo-itl", "0.05",
		"--prefill", p.URL(), strconv.Itoa(p.BootstrapPort()), "--decode", d.URL())
	waitUntil(t, "gateway ready", func() bool { return gw.Ready() == nil })

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 4 { // four streams of different lengths, so decode batches differ
		wg.Go(func() {
			for rctx.Err() == nil {
				body := `{"model":"sim-model","stream":true,"max_tokens":` + strconv.Itoa(8+i*8) +
					`,"messages":[{"role":"user","content":"` + strings.Repeat("tell me a story ", 20) + `"}]}`
				req, _ := http.NewRequestWithContext(rctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	waitUntil(t, "prefill sized", func() bool {
		for _, r := range gw.Capacity.Snapshot() {
			if r.Role == "prefill" && r.Sized && r.OfferedLoad > 0 {
				return true
			}
		}
		return false
	})

	var out, errOut bytes.Buffer
	if code := cli.Main(ctx, []string{"capacity", "--server", gw.URL, "--admin-api-key", "adm"}, &out, &errOut); code != 0 {
		t.Fatalf("sluice capacity: exit %d: %s", code, errOut.String())
	}
	t.Log(out.String())
	for _, want := range []string{"SLOs: TTFT 1s, ITL 50ms", "MODEL", "RECOMMENDED", "sim-model  prefill", "sim-model  decode",
		"sim-model prefill: ", "Erlang C", "Little's law", "tokens per busy worker-second"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sluice capacity output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := cli.Main(ctx, []string{"capacity", "--server", gw.URL, "--admin-api-key", "adm", "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("sluice capacity -o json: exit %d: %s", code, errOut.String())
	}
	var js struct {
		Enabled         bool `json:"enabled"`
		Recommendations []struct {
			Model, Role        string
			RecommendedWorkers int `json:"recommended_workers"`
		} `json:"recommendations"`
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || !js.Enabled || len(js.Recommendations) != 2 ||
		js.Recommendations[0].Role != "prefill" || js.Recommendations[0].RecommendedWorkers < 1 {
		t.Fatalf("json %+v (%v):\n%s", js, err, out.String())
	}

	req, _ := http.NewRequest(http.MethodGet, gw.URL+"/admin/v1/capacity", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"recommended_workers"`) || !strings.Contains(string(b), `"reason"`) {
		t.Fatalf("GET /admin/v1/capacity: %d %s", resp.StatusCode, b)
	}
	req, _ = http.NewRequest(http.MethodGet, gw.URL+"/admin/v1/capacity", nil) // without the key
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /admin/v1/capacity without the admin key: %d, want 401", resp.StatusCode)
	}

	if resp, err = client.Get(gw.URL + "/metrics"); err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_capacity_recommended_workers{model="sim-model",role="prefill"}`,
		`sluice_capacity_recommended_workers{model="sim-model",role="decode"}`, `sluice_capacity_arrival_rate{model="sim-model"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestCapacityUsageErrors(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := cli.Main(t.Context(), []string{"capacity", "extra"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "no arguments") {
		t.Errorf("sluice capacity extra: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := cli.Main(t.Context(), []string{"capacity", "--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "usage: sluice capacity") {
		t.Errorf("sluice capacity --help: exit %d, stdout %q", code, out.String())
	}
}
