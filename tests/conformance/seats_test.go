package conformance

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/tests/testenv"
)

// Upstream sources of the figures decode seats read from the engines.
const (
	srcSGLangInfo = "sgl-project/sglang python/sglang/srt/entrypoints/http_server.py (get_server_info: the server args, then internal_states); python/sglang/srt/server_args.py (max_running_requests, max_total_tokens; null unless given)"
	srcSGLangRank = "sgl-project/sglang python/sglang/srt/managers/scheduler.py (get_internal_state: effective_max_running_requests_per_dp, the rank's own window)"
	srcVLLMGauges = "vllm-project/vllm vllm/v1/metrics/loggers.py (PrometheusStatLogger: vllm:num_requests_waiting, vllm:kv_cache_usage_perc, labelled model_name and engine)"
)

// TestSGLangDecodeWindow: with --decode-max-inflight-requests-per-worker auto the decode seat bound is
// the window the SGLang decode engine reports in its server info, per data-parallel rank.
func TestSGLangDecodeWindow(t *testing.T) {
	cases := []struct {
		name, source, info string
		dp                 int
		args               []string
		want               uint32
	}{
		{name: "max_running_requests over dp_size", source: srcSGLangInfo, dp: 2,
			info: `"max_running_requests":8`, want: 4},
		{name: "internal_states effective window wins over the server arg", source: srcSGLangRank, dp: 2,
			info: `"max_running_requests":null,"internal_states":[{"last_gen_throughput":0.0,"effective_max_running_requests_per_dp":3},{"effective_max_running_requests_per_dp":3}]`, want: 3},
		{name: "nothing reported: the declared --decode-window", source: srcSGLangInfo, dp: 1,
			info: `"max_running_requests":null`, args: []string{"--decode-window", "5"}, want: 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Logf("written from %s", tc.source)
			rv := &rooms{}
			p := startEngine(t, &recordingEngine{kind: "sglang", role: "prefill", bootstrapPort: 8998, dpSize: tc.dp, rooms: rv}, "")
			d := startEngine(t, &recordingEngine{kind: "sglang", role: "decode", dpSize: tc.dp, serverInfo: tc.info, rooms: rv}, "")
			gw := testenv.StartGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--prefill", p.srv.URL,
				"--decode", d.srv.URL, "--prefill-max-inflight-requests-per-worker", "4",
				"--decode-max-inflight-requests-per-worker", "auto", "--disable-retries"}, tc.args...)...)
			var list adminv1.ListWorkersResponse
			getProto(t, gw.URL+"/admin/v1/workers?role=decode", &list)
			if len(list.GetWorkers()) != 1 {
				t.Fatalf("decode workers %v, want 1", list.GetWorkers())
			}
			if got := list.GetWorkers()[0].GetDecodeWindow(); got != tc.want {
				t.Errorf("decode window %d, want %d", got, tc.want)
			}
		})
	}
}

// TestSGLangDecodeKVReservation: max_total_tokens is the decode engine's KV pool per rank; a second
// request whose prompt + max_tokens no longer fits beside the first is held back by decode (with no
// queue: 429 pd_decode_queue_full), while a small one still fits. The window (8) never binds here.
func TestSGLangDecodeKVReservation(t *testing.T) {
	t.Logf("written from %s", srcSGLangInfo)
	rv := &rooms{}
	p := startEngine(t, &recordingEngine{kind: "sglang", role: "prefill", bootstrapPort: 8998, rooms: rv}, "")
	d := startEngine(t, &recordingEngine{kind: "sglang", role: "decode", rooms: rv,
		serverInfo: `"max_running_requests":8,"max_total_tokens":200`,
		held:       make(chan struct{}), release: make(chan struct{})}, "")
	gw := testenv.StartGateway(t, app.Options{}, "--pd-disaggregation", "--prefill", p.srv.URL, "--decode", d.srv.URL,
		"--prefill-max-inflight-requests-per-worker", "4", "--prefill-queue-size", "0",
		"--decode-max-inflight-requests-per-worker", "auto", "--disable-retries")
	type answer struct {
		status int
		body   string
	}
	send := func(maxTokens string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", //nolint:noctx // loopback, bounded by the engine
				strings.NewReader(`{`+chatMsgs+`,"max_tokens":`+maxTokens+`}`))
			if err != nil {
				ch <- answer{body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch <- answer{resp.StatusCode, string(b)}
		}()
		return ch
	}
	released := false
	defer func() {
		if !released {
			close(d.release)
		}
	}()
	first := send("150")
	<-d.held // its decode leg holds a seat and ~155 tokens of the 200
	second := send("150")
	select {
	case a := <-second:
		if a.status != http.StatusTooManyRequests || !strings.Contains(a.body, "pd_decode_queue_full") {
			t.Errorf("second large request: %d %s, want 429 pd_decode_queue_full", a.status, a.body)
		}
	case <-d.held:
		t.Fatal("second large request reached the decode: the KV reservation did not bind")
	}
	small := send("8")
	select {
	case <-d.held:
	case a := <-small:
		t.Fatalf("small request did not reach the decode: %d %s", a.status, a.body)
	}
	close(d.release)
	released = true
	for _, ch := range []<-chan answer{first, small} {
		if a := <-ch; a.status != http.StatusOK {
			t.Errorf("admitted request: %d %s", a.status, a.body)
		}
	}
}

// TestVLLMDecodeLoadGauges: a vLLM decode engine's load comes only from its /metrics gauges; the
// decode veto (--decode-overload-waiting-requests, --decode-max-kv-usage) reads them under their
// upstream names, so a decode reporting more than allowed gets no seat (with no queue: 429 naming
// decode) and one reporting less serves.
func TestVLLMDecodeLoadGauges(t *testing.T) {
	const exposition = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %W
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} %K
`
	cases := []struct {
		name, waiting, kv string
		args              []string
		status            int
	}{
		{name: "waiting above the bound", waiting: "5.0", kv: "0.1", args: []string{"--decode-overload-waiting-requests", "2"}, status: 429},
		{name: "waiting within the bound", waiting: "2.0", kv: "0.1", args: []string{"--decode-overload-waiting-requests", "2"}, status: 200},
		{name: "kv usage above the bound", waiting: "0.0", kv: "0.95", args: []string{"--decode-max-kv-usage", "0.9"}, status: 429},
		{name: "kv usage within the bound", waiting: "0.0", kv: "0.5", args: []string{"--decode-max-kv-usage", "0.9"}, status: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Logf("written from %s", srcVLLMGauges)
			rv := &rooms{}
			p := startEngine(t, &recordingEngine{kind: "vllm", role: "prefill", rooms: rv}, "")
			d := startEngine(t, &recordingEngine{kind: "vllm", role: "decode", rooms: rv,
				metrics: strings.NewReplacer("%W", tc.waiting, "%K", tc.kv).Replace(exposition)}, "")
			gw := testenv.StartGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--prefill", p.srv.URL,
				"--decode", d.srv.URL, "--prefill-max-inflight-requests-per-worker", "4", "--prefill-queue-size", "0",
				"--decode-max-inflight-requests-per-worker", "8", "--engine-load-interval-secs", "0.05", "--disable-retries"}, tc.args...)...)
			// The gateway re-exports what it read: once its gauge shows the engine's KV usage, the veto
			// has the same report.
			want, _ := strconv.ParseFloat(tc.kv, 64)
			poll.Until(t, "the gateway to read the decode engine's vllm:kv_cache_usage_perc", 10*time.Second, func() bool {
				v, ok := gatewayGauge(t, gw.URL, "sluice_worker_engine_kv_cache_usage_ratio", d.srv.URL)
				return ok && v == want
			})
			resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", //nolint:noctx // loopback
				strings.NewReader(`{`+chatMsgs+`,"max_tokens":8}`))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.status == 429 && !strings.Contains(string(b), "pd_decode_queue_full") {
				t.Errorf("rejection does not name decode: %s", b)
			}
			if n := len(d.recorded()); (tc.status == 200) != (n == 1) {
				t.Errorf("decode legs %d with status %d", n, tc.status)
			}
		})
	}
}

// gatewayGauge is the value of the gateway's gauge family for the worker whose label names url.
func gatewayGauge(t *testing.T, gwURL, family, url string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(gwURL + "/metrics") //nolint:noctx // loopback
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams[family].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetValue() == url {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// getProto GETs an admin REST route and decodes its JSON answer into m.
func getProto(t *testing.T, url string, m proto.Message) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // loopback
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}
