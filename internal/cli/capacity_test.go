package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/app"
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
	if code := Main(ctx, []string{"capacity", "--server", gw.URL, "--admin-api-key", "adm"}, &out, &errOut); code != 0 {
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
	if code := Main(ctx, []string{"capacity", "--server", gw.URL, "--admin-api-key", "adm", "-o", "json"}, &out, &errOut); code != 0 {
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
	if code := Main(t.Context(), []string{"capacity", "extra"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "no arguments") {
		t.Errorf("sluice capacity extra: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := Main(t.Context(), []string{"capacity", "--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "usage: sluice capacity") {
		t.Errorf("sluice capacity --help: exit %d, stdout %q", code, out.String())
	}
}

// Right after a burst the recommendation holds the peak (5) while the load now needs 1 and 2 workers
// are registered: the output names each count, says how the recommendation follows from them, and
// its sentences agree with the table (no unlabeled CURRENT/TARGET, no "1 workers").
func TestCapacityAfterBurstExplainsEachCount(t *testing.T) {
	t.Parallel()
	r := &adminv1.GetCapacityResponse{Enabled: true, ScaleDownHold: durationpb.New(5 * time.Minute),
		Recommendations: []*adminv1.CapacityRecommendation{{
			Model: "m", Role: "prefill", RecommendedWorkers: 5, CurrentWorkers: 2, TargetWorkers: 1, BusyWorkers: 0, Sized: true,
			ScaleDownAt: "2026-12-05T00:10:00Z",
			Reason:      "0.50 req/s × 400 prompt tokens at 8000 tokens per busy worker-second is 0.03 busy workers (Little's law, service 0.050s); Erlang C: 1 worker keeps wait plus service within the 1s TTFT SLO; holding 5 until 00:10:00 before scaling down to 1",
		}, {
			Model: "m", Role: "decode", RecommendedWorkers: 1, CurrentWorkers: 1, Sized: false,
			Reason: "decode is not sized: no --slo-itl and no decode seat limit; keeping the current count",
		}}}
	var out bytes.Buffer
	if err := printCapacity(&out, r); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Log(got)
	lines := strings.Split(got, "\n")
	var table []string // the table's rows, single-spaced
	for _, l := range lines[2:5] {
		table = append(table, strings.Join(strings.Fields(l), " "))
	}
	if want := []string{"MODEL ROLE RECOMMENDED REGISTERED NEEDED-NOW BUSY-NOW CHANGE", "m prefill 5 2 1 0 add 3", "m decode 1 1 - 0 keep"}; !slices.Equal(table, want) {
		t.Errorf("table %q, want %q", table, want)
	}
	for _, want := range []string{
		"RECOMMENDED: workers to scale to", "NEEDED-NOW: what the measured load asks for at this instant",
		"m prefill: recommended 5 workers (2 registered). The load now needs 1 worker; the recommendation keeps the recent peak until 2026-12-05T00:10:00Z",
		"m decode: recommended 1 worker (1 registered). Why: decode is not sized",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(got, "1 workers") || strings.Contains(got, "CURRENT") || strings.Contains(got, "TARGET") {
		t.Errorf("output has an unlabeled or disagreeing count:\n%s", got)
	}
}
