package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/telemetry"
)

// demo starts 2 prefill + 2 decode simulated engines (SGLang style, realistic mode) in-process and the
// gateway in PD mode with a small admission limit and queue, so a burst shows queueing and 429s.
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host := fs.String("host", "127.0.0.1", "gateway listen host")
	port := fs.Int("port", 30000, "gateway port")
	limit := fs.Int("limit", 2, "prefill admission limit per prefill worker")
	queue := fs.Int("queue-size", 8, "admission queue size")
	timeout := fs.Duration("queue-timeout", 10*time.Second, "admission queue timeout")
	prefillN := fs.Int("prefill", 2, "simulated prefill engines")
	decodeN := fs.Int("decode", 2, "simulated decode engines")
	protocol := fs.String("protocol", "sglang", "engine protocol: sglang or vllm")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	logger := NewLogger(stderr, config.TelemetryConfig{})
	app.TuneGC()

	cluster, err := sim.StartCluster(ctx, sim.ClusterConfig{
		Prefill: *prefillN, Decode: *decodeN, Protocol: sim.Protocol(*protocol), Mode: sim.ModeRealistic,
		Logger: logger.With("component", "sim"),
	})
	if err != nil {
		return fmt.Errorf("simulated engines: %w", err)
	}
	defer cluster.Close()

	gw := []string{"--host", *host, "--port", strconv.Itoa(*port), "--pd-disaggregation", "--runtime", *protocol,
		"--policy", "cache_aware", "--prefill-policy", "cache_aware", "--decode-policy", "power_of_two",
		"--prefill-max-inflight-requests-per-worker", strconv.Itoa(*limit),
		"--prefill-queue-size", strconv.Itoa(*queue),
		"--prefill-queue-timeout-secs", strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64),
		"--health-check-interval-secs", "5", "--health-success-threshold", "1",
		"--shutdown-grace-period-secs", "5"}
	for _, e := range cluster.ByRole(sim.RolePrefill) {
		gw = append(gw, "--prefill", e.URL(), strconv.Itoa(e.BootstrapPort()))
	}
	for _, e := range cluster.ByRole(sim.RoleDecode) {
		gw = append(gw, "--decode", e.URL())
	}
	cfg, err := config.Parse(gw, stderr)
	if err != nil {
		return err
	}
	// Exemplars need sampled traces: the demo samples every request (exporting nothing), so that
	// its /metrics shows trace ids on the latency histograms at first look.
	a, err := app.New(ctx, cfg, app.Options{Logger: logger, TracerProvider: telemetry.NewLocalTracerProvider()})
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	base := "http://" + a.Addr()
	fmt.Fprintf(stdout, `sluice demo is running: PD mode, %d prefill + %d decode simulated engines (%s style),
admission limit %d per prefill worker, queue %d, timeout %s.

  gateway:  %s
  metrics:  %s/metrics   (every request is traced, so the latency histograms carry trace-id
            exemplars: curl -sH 'Accept: application/openmetrics-text' %s/metrics | grep trace_id)
  admin:    %s/admin/v1/workers

Try:
  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"sim-model","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32}'

A burst that overflows the queue (watch for 429 pd_prefill_queue_full):
  for i in $(seq 40); do curl -s -o /dev/null -w '%%{http_code}\n' %s/v1/completions \
    -H 'Content-Type: application/json' -d '{"model":"sim-model","prompt":"'$i' '$(printf 'x%%.0s' $(seq 4000))'","max_tokens":64}' & done; wait

Watch it live in another terminal (from the directory where you built ./sluice):
  ./sluice top --server %s

Or with Prometheus and Grafana: scrape %s/metrics, load deploy/prometheus/sluice-rules.yaml and
import deploy/grafana/sluice.json; docs/metrics.md has the queries (which prefill worker is saturated,
how long requests wait for it).

Press Ctrl-C to stop.
`, *prefillN, *decodeN, *protocol, *limit, *queue, *timeout, base, base, base, base, base, base, base, base)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownGracePeriod)
	defer cancel()
	return a.Shutdown(sctx)
}
