package e2e

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestDecodeAutoUnboundedShown: under --decode-max-inflight-requests-per-worker auto a vLLM decode
// worker that declares no window is unbounded. Registering it (here by flag) logs a warning, and
// `sluice admission get` lists it with limit none and its window unknown (unbounded) instead of leaving
// it out. `sluice workers add --decode-window N --kv-role kv_both` declares a second one's window, which
// then bounds its seats, and no warning names it.
func TestDecodeAutoUnboundedShown(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Protocol: sim.ProtocolVLLM})
	var logs syncBuffer
	p := c.ByRole(sim.RolePrefill)[0]
	d0, d1 := c.ByRole(sim.RoleDecode)[0].URL(), c.ByRole(sim.RoleDecode)[1].URL()
	args := []string{"--pd-disaggregation", "--decode-max-inflight-requests-per-worker", "auto",
		"--admin-api-key", "adm", "--prefill", p.URL()}
	if bp := p.BootstrapPort(); bp > 0 {
		args = append(args, strconv.Itoa(bp))
	}
	gw := startGateway(t, app.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, append(args, "--decode", d0)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	waitFor(t, "the unbounded decode warning", 5*time.Second, func() bool {
		return strings.Contains(logs.String(), `"msg":"decode worker has no running window`) && strings.Contains(logs.String(), d0)
	})

	common := []string{"--server", gw.URL, "--admin-api-key", "adm"}
	out := runCLI(t, 0, append([]string{"admission", "get"}, common...)...)
	var row string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, d0) {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 4 || f[1] != "0" || f[2] != "none" || !strings.Contains(row, "unbounded") {
		t.Fatalf("admission get: the decode worker without a window is not shown unbounded (row %q):\n%s", row, out)
	}

	out = runCLI(t, 0, append([]string{"workers", "add", "--url", d1, "--role", "decode", "--protocol", "vllm",
		"--decode-window", "3", "--kv-role", "kv_both", "-o", "json"}, common...)...)
	var added struct {
		DecodeWindow int    `json:"decode_window"`
		KVRole       string `json:"kv_role"`
	}
	if err := json.Unmarshal([]byte(out), &added); err != nil || added.DecodeWindow != 3 || added.KVRole != "kv_both" {
		t.Fatalf("workers add --decode-window 3 --kv-role kv_both: %v %+v\n%s", err, added, out)
	}
	waitFor(t, "the declared window", 5*time.Second, func() bool {
		st := gw.Admission.Status()
		return st.DecodeCapacity[d1].Window == 3 && st.SeatLimits[d1] == 3
	})
	if n := strings.Count(logs.String(), "no running window"); n != 1 {
		t.Errorf("%d warnings of a decode worker without a window, want 1 (none for the declared one):\n%s", n, logs.String())
	}
}
