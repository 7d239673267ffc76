package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// Turning priority bands off through the admin API removes the per-band series at once.
func TestBandSeriesRemovedWhenBandsTurnedOff(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Mode: sim.ModeInstant})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "1",
		"--prefill-priority-bands", "low:-10,default:0,high:10"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	for _, prio := range []string{"-5", "20"} {
		resp, err := post(context.Background(), gw.URL+"/v1/chat/completions",
			`{"model":"sim-model","max_tokens":2,"priority":`+prio+`,"messages":[{"role":"user","content":"hi"}]}`)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request: %d", resp.StatusCode)
		}
	}
	bandSeries := func() []string {
		_, body := get(t, gw.URL+"/metrics")
		var out []string
		for line := range strings.Lines(string(body)) {
			if strings.HasPrefix(line, "sluice_pd_prefill_admission_band_") {
				out = append(out, strings.TrimSpace(line))
			}
		}
		return out
	}
	if len(bandSeries()) == 0 {
		t.Fatal("no band series while bands are on: the test proves nothing")
	}
	req, _ := http.NewRequest(http.MethodPatch, gw.URL+"/admin/v1/admission", strings.NewReader(`{"priority_bands":{"bands":[]}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH admission: %d %s", resp.StatusCode, body)
	}
	if left := bandSeries(); len(left) > 0 {
		t.Errorf("band series left after bands were turned off:\n%s", strings.Join(left, "\n"))
	}
}
