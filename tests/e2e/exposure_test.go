package e2e

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestOpenAPIsWarn: `sluice serve` on every interface (--host 0.0.0.0, the default) with no API key and
// no admin key logs a warning at startup and lists it in /health's warnings, for the inference and the
// admin API; with --api-key (which guards both) /health has no warnings.
func TestOpenAPIsWarn(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang})
	var logs syncBuffer
	open := startGateway(t, app.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))},
		"--host", "0.0.0.0", "--worker-urls", c.Engines[0].URL())
	health := func(url string) (int, []string) {
		resp, body := get(t, url+"/health")
		var h struct {
			Status   string   `json:"status"`
			Warnings []string `json:"warnings"`
		}
		if err := json.Unmarshal(body, &h); err != nil || h.Status != "ok" {
			t.Fatalf("/health: %v %s", err, body)
		}
		return resp.StatusCode, h.Warnings
	}
	code, ws := health(open.URL)
	joined := strings.Join(ws, "\n")
	if code != http.StatusOK || !strings.Contains(joined, "inference API") || !strings.Contains(joined, "admin API") {
		t.Errorf("/health on 0.0.0.0 without keys: %d, warnings %q; want both APIs named as open", code, ws)
	}
	waitFor(t, "the startup warning", 5*time.Second, func() bool {
		return strings.Contains(logs.String(), `"level":"WARN","msg":"API open to the network: the admin API`)
	})

	guarded := startGateway(t, app.Options{}, "--host", "0.0.0.0", "--api-key", "sk-guarded-0123456789",
		"--worker-urls", c.Engines[0].URL())
	if _, ws := health(guarded.URL); len(ws) != 0 {
		t.Errorf("/health with --api-key: warnings %q, want none", ws)
	}
}
