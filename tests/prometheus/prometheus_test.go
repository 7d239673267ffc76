// Package prometheus checks sluice's committed dashboard, alert rules and documented queries against
// a real Prometheus server (Debian's prometheus package): the test starts it on loopback with a
// temporary config that scrapes an in-process gateway in front of simulated engines under load, and
// asks Prometheus's HTTP API for every query the dashboard, the rules and docs/metrics.md use. The
// test is skipped when no prometheus binary is on PATH, and fails instead when CI is set (.ci/run
// installs it).
package prometheus

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/tests/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// repo is the repository root (this package is tests/prometheus).
const repo = "../.."

// promServer is a running Prometheus.
type promServer struct {
	base   string
	client *http.Client
}

// startPrometheus runs bin with a config scraping target every second and evaluating rules every
// second; it is stopped when the test ends.
func startPrometheus(t *testing.T, bin, target, rules string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: [%q]
`, rules, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p := &promServer{client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	// Prometheus cannot report a port it picked: take a free one and retry if it was taken meanwhile.
	for try := 0; ; try++ {
		addr := freeAddr(t)
		cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"+strconv.Itoa(try)),
			"--web.listen-address="+addr, "--enable-feature=exemplar-storage", "--log.level=warn")
		var logs strings.Builder
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("start prometheus: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		p.base = "http://" + addr
		if p.waitReady(exited) {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(os.Interrupt)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
			})
			return p
		}
		_ = cmd.Process.Kill()
		<-exited
		if try == 2 {
			t.Fatalf("prometheus did not start: %s", logs.String())
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady polls /-/ready until Prometheus answers 200, exits, or 30 s pass.
func (p *promServer) waitReady(exited <-chan error) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := p.client.Get(p.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(100 * time.Millisecond) // polling interval; readiness is re-checked
	}
	return false
}

// apiResult is the data of a Prometheus HTTP API answer.
type apiResult struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func (p *promServer) api(path string, params url.Values) (json.RawMessage, error) {
	resp, err := p.client.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r apiResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", path, r.Error)
	}
	return r.Data, nil
}

// query evaluates expr now and returns the number of series (or 1 for a scalar) it returned.
func (p *promServer) query(expr string) (int, error) {
	data, err := p.api("/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return 0, err
	}
	var v struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		// A scalar or string result is one value.
		return 1, nil //nolint:nilerr // not a vector: one value
	}
	return len(v.Result), nil
}

// eventually polls expr until it returns data, and fails the test after timeout.
func (p *promServer) eventually(t *testing.T, what, expr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := p.query(expr)
		if err != nil {
			t.Fatalf("%s: query %s: %v", what, expr, err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: no data after %v from\n  %s", what, timeout, expr)
			return
		}
		time.Sleep(250 * time.Millisecond) // polling interval: Prometheus scrapes and evaluates every second
	}
}

// ruleFile is the shape of the committed rules file.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) (alerts, records map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "deploy/prometheus/sluice-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	alerts, records = map[string]string{}, map[string]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = r.Expr
			} else {
				records[r.Record] = r.Expr
			}
		}
	}
	return alerts, records
}

// dashboardQueries returns every target expression of the committed dashboard, keyed by panel title.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "deploy/grafana/sluice.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	return out
}

// docQueries returns the queries of docs/metrics.md's ```promql blocks: each paragraph of a block,
// without its # comments, is one query.
func docQueries(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repo, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	var cur []string
	in := false
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```promql"):
			in = true
		case in && strings.HasPrefix(line, "```"):
			flush()
			in = false
		case in && strings.TrimSpace(line) == "":
			flush()
		case in && !strings.HasPrefix(strings.TrimSpace(line), "#"):
			cur = append(cur, line)
		}
	}
	return out
}

// grafanaVars stands in for the dashboard's variables as Grafana would expand them.
var grafanaVars = strings.NewReplacer(`$job`, `.*`, `$model`, `.*`, `$ttft_slo`, `1`, `$__rate_interval`, `2m`)

// load sends requests from n clients until stop is closed: streamed chat (some with n = 2, split into
// samples by the gateway), streamed completions and whole chat answers, each with a prompt of ~4000
// tokens that no other request shares (no prefix-cache hits), so the two prefill slots saturate.
func load(ctx context.Context, gwURL string, n int, stop <-chan struct{}) (wait func() map[int]int) {
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	client := &http.Client{Transport: tr}
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 600)
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				prompt := strconv.Quote(fmt.Sprintf("client %d request %d: %s", c, i, filler))
				path, body := "/v1/chat/completions", `{"model":"sim-model","stream":true,"max_tokens":12,"messages":[{"role":"user","content":`+prompt+`}]}`
				switch i % 4 {
				case 1:
					body = `{"model":"sim-model","stream":true,"n":2,"max_tokens":12,"messages":[{"role":"user","content":` + prompt + `}]}`
				case 2:
					path, body = "/v1/completions", `{"model":"sim-model","stream":true,"max_tokens":12,"prompt":`+prompt+`}`
				case 3:
					body = `{"model":"sim-model","max_tokens":12,"messages":[{"role":"user","content":` + prompt + `}]}`
				}
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				req, _ := http.NewRequestWithContext(rctx, http.MethodPost, gwURL+path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				code := 0
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				cancel()
				mu.Lock()
				statuses[code]++
				mu.Unlock()
				if code != http.StatusOK {
					// Pace a refused client like a polite one (the gateway said Retry-After), so the
					// load is an overload rather than a busy loop of 429s.
					select {
					case <-stop:
					case <-time.After(250 * time.Millisecond):
					}
				}
			}
		})
	}
	return func() map[int]int {
		wg.Wait()
		tr.CloseIdleConnections()
		return statuses
	}
}

var traceID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestDashboardAlertsAndDocsAgainstPrometheus: with `sluice demo`'s fleet shape (2 prefill + 2
// decode SGLang-style engines) overloaded behind a small admission limit, a real Prometheus loaded
// with the committed rules answers every query of the committed dashboard, of docs/metrics.md, and
// every alert's expression in the situation that alert is for: the queue saturated, requests
// rejected, the TTFT budget burning, a worker's breaker open, no ready prefill or decode worker.
func TestDashboardAlertsAndDocsAgainstPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no prometheus binary on PATH; .ci/run installs Debian's prometheus package")
		}
		t.Skip("no prometheus binary on PATH (apt-get install prometheus): skipping the real-Prometheus test")
	}
	rules, err := filepath.Abs(filepath.Join(repo, "deploy/prometheus/sluice-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cluster, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: 2, Decode: 2, Protocol: sim.ProtocolSGLang,
		Mode: sim.ModeRealistic, Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Close() })
	args := []string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "1",
		"--prefill-queue-size", "8", "--prefill-queue-timeout-secs", "3",
		// Decode seats that never bind (24 clients, 2 decode workers): the dashboard's seat panel has data
		// while every rejection still names prefill.
		"--decode-max-inflight-requests-per-worker", "64",
		"--engine-load-interval-secs", "1", "--health-check-interval-secs", "1",
		"--health-success-threshold", "1", "--health-failure-threshold", "1",
		"--cb-failure-threshold", "3", "--cb-timeout-duration-secs", "600"}
	for _, e := range cluster.ByRole(sim.RolePrefill) {
		args = append(args, "--prefill", e.URL(), strconv.Itoa(e.BootstrapPort()))
	}
	for _, e := range cluster.ByRole(sim.RoleDecode) {
		args = append(args, "--decode", e.URL())
	}
	// Every request is traced (no exporter: the spans only need ids) so its latencies carry exemplars.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	gw := testenv.StartGateway(t, app.Options{TracerProvider: &telemetry.TracerProvider{TracerProvider: tp, Shutdown: tp.Shutdown}}, args...)
	start := time.Now()
	prom := startPrometheus(t, bin, gw.Addr(), rules)
	prom.eventually(t, "the gateway is scraped", `up{job="sluice"} == 1`, 30*time.Second)
	alerts, records := loadRules(t)

	// Overload: 24 clients against 2 prefill slots and a queue of 8.
	stop := make(chan struct{})
	wait := load(ctx, gw.URL, 24, stop)
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			wait()
		}
	}()
	for name, expr := range records {
		prom.eventually(t, "recording rule "+name, expr, 60*time.Second)
	}
	for _, name := range []string{"SluiceAdmissionQueueSaturated", "SluiceAdmissionRejecting", "SluiceTTFTBudgetBurnFast", "SluiceTTFTBudgetBurnSlow"} {
		prom.eventually(t, "alert "+name+" under overload", alerts[name], 60*time.Second)
	}
	// The operator's question, as docs/metrics.md asks it.
	docs := docQueries(t)
	if len(docs) < 2 {
		t.Fatalf("docs/metrics.md has %d promql queries, want the saturation and wait queries at least", len(docs))
	}
	for _, q := range docs {
		prom.eventually(t, "docs/metrics.md query", q, 30*time.Second)
	}

	// A decode engine starts failing every request: its breaker opens (the gateway retries elsewhere).
	broken := cluster.ByRole(sim.RoleDecode)[0]
	if err := broken.SetFaults(sim.Faults{ErrorRate: 1, ErrorStatus: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	prom.eventually(t, "alert SluiceWorkerBreakerOpen", alerts["SluiceWorkerBreakerOpen"], 60*time.Second)
	close(stop)
	stopped = true
	statuses := wait()
	t.Logf("load: %v (status: requests)", statuses)
	if statuses[http.StatusOK] == 0 || statuses[http.StatusTooManyRequests] == 0 {
		t.Errorf("load statuses %v: want answers and admission 429s", statuses)
	}

	// Every engine fails its health checks: no ready prefill, no ready decode worker.
	if err := cluster.SetFaults(sim.Faults{FailHealth: true}); err != nil {
		t.Fatal(err)
	}
	prom.eventually(t, "alert SluiceNoReadyPrefillWorker", alerts["SluiceNoReadyPrefillWorker"], 30*time.Second)
	prom.eventually(t, "alert SluiceNoReadyDecodeWorker", alerts["SluiceNoReadyDecodeWorker"], 30*time.Second)
	for name := range alerts {
		switch name {
		case "SluiceAdmissionQueueSaturated", "SluiceAdmissionRejecting", "SluiceTTFTBudgetBurnFast", "SluiceTTFTBudgetBurnSlow",
			"SluiceWorkerBreakerOpen", "SluiceNoReadyPrefillWorker", "SluiceNoReadyDecodeWorker":
		default:
			t.Errorf("alert %s is not exercised by this test", name)
		}
	}

	// Every dashboard query answers (the rate windows span the whole run).
	panels := dashboardQueries(t)
	if len(panels) < 20 {
		t.Fatalf("the dashboard has %d panels with queries", len(panels))
	}
	for title, exprs := range panels {
		for _, e := range exprs {
			prom.eventually(t, "panel "+strconv.Quote(title), grafanaVars.Replace(e), 15*time.Second)
		}
	}

	// Prometheus loaded the committed rules and evaluates them without errors.
	data, err := prom.api("/api/v1/rules", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rs struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &rs); err != nil {
		t.Fatal(err)
	}
	loaded := 0
	for _, g := range rs.Groups {
		for _, r := range g.Rules {
			loaded++
			if r.Health != "ok" {
				t.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
		}
	}
	if loaded != len(alerts)+len(records) {
		t.Errorf("Prometheus loaded %d rules, the file has %d", loaded, len(alerts)+len(records))
	}

	// A slow bucket links to its trace: the latency histograms carry trace ids as exemplars, scraped
	// in the OpenMetrics format.
	data, err = prom.api("/api/v1/query_exemplars", url.Values{"query": {"sluice_time_to_first_token_seconds_bucket"},
		"start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(time.Now().Unix()+1, 10)}})
	if err != nil {
		t.Fatal(err)
	}
	var ex []struct {
		Exemplars []struct {
			Labels map[string]string `json:"labels"`
		} `json:"exemplars"`
	}
	if err := json.Unmarshal(data, &ex); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, s := range ex {
		for _, e := range s.Exemplars {
			if !traceID.MatchString(e.Labels["trace_id"]) {
				t.Errorf("exemplar labels %v: want a trace_id", e.Labels)
			}
			found++
		}
	}
	if found == 0 {
		t.Error("no exemplar on sluice_time_to_first_token_seconds_bucket")
	}
}
