package e2e

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/worker"
	"github.com/sluicegw/sluice/tests/testenv"
)

// An operator's normal order: the gateway first, then engines that load for minutes. A worker whose
// engine does not answer at registration is pending detection (nothing guessed, not routed); when the
// engine first answers health the gateway asks it what it is, so a vLLM engine gets vLLM's handshake,
// its models are listed, and an SGLang prefill's bootstrap port is read from its server info.
func TestEnginesStartingAfterTheGateway(t *testing.T) {
	t.Parallel()
	for _, proto := range []sim.Protocol{sim.ProtocolVLLM, sim.ProtocolSGLang} {
		t.Run(string(proto), func(t *testing.T) {
			t.Parallel()
			ports := testenv.FreePorts(t, 3)
			prefillURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
			decodeURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
			gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--prefill", prefillURL, "--decode", decodeURL,
				"--prefill-max-inflight-requests-per-worker", "2")

			for _, w := range gw.Registry.Snapshot().All() {
				s := w.Spec()
				if !s.DetectPending || s.ProtocolSource != worker.ProtocolPending || w.Health() != worker.HealthPending {
					t.Fatalf("worker %s before its engine: pending=%t source=%q health=%v; want pending detection", w.URL(), s.DetectPending, s.ProtocolSource, w.Health())
				}
			}
			// The scenario, not synchronisation: engines that come up seconds after the gateway, by which
			// time the pending workers' probes have backed off to their slowest pace.
			time.Sleep(5 * time.Second)

			const model = "late-model"
			start := func(role sim.Role, port int) {
				cfg := sim.Config{Protocol: proto, Role: role, Port: port, Mode: sim.ModeInstant, Models: []string{model}}
				if proto == sim.ProtocolSGLang {
					cfg.BootstrapPort = ports[2] // the prefill's; the decode meets it there for a null bootstrap_port
				}
				e, err := sim.New(cfg, testLogger(t))
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Close() })
			}
			start(sim.RolePrefill, ports[0])
			start(sim.RoleDecode, ports[1])
			up := time.Now()

			waitFor(t, "late workers ready", 30*time.Second, func() bool {
				ws := gw.Registry.Snapshot().All()
				return len(ws) == 2 && !slices.ContainsFunc(ws, func(w *worker.Worker) bool { return w.Health() != worker.HealthReady })
			})
			// Pending workers are probed at least every 2 s, so this is seconds, not the 2 minutes of two
			// 60 s health rounds; logged, not asserted (the machine's load sets it).
			t.Logf("ready %v after the engines started", time.Since(up).Round(time.Millisecond))

			for _, w := range gw.Registry.Snapshot().All() {
				s := w.Spec()
				if string(w.Protocol()) != string(proto) || s.DetectPending || s.ProtocolSource == worker.ProtocolPending || s.ProtocolSource == worker.ProtocolFromDefault {
					t.Errorf("worker %s: protocol %s (by %q, pending %t), want %s detected", w.URL(), w.Protocol(), s.ProtocolSource, s.DetectPending, proto)
				}
				if !slices.Equal(w.Models(), []string{model}) {
					t.Errorf("worker %s models %q, want [%s]", w.URL(), w.Models(), model)
				}
				if proto == sim.ProtocolSGLang && w.Role() == worker.RolePrefill && s.BootstrapPort != ports[2] {
					t.Errorf("prefill bootstrap port %d, want %d from its server info", s.BootstrapPort, ports[2])
				}
			}

			ctx := context.Background()
			client := sdk(gw.URL)
			r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello, late engine")}, MaxTokens: openai.Int(4)})
			if err != nil {
				t.Fatalf("first chat after the engines are ready: %v", err)
			}
			if len(r.Choices) != 1 || r.Choices[0].Message.Content == "" {
				t.Fatalf("chat answer %+v", r.Choices)
			}
			want := map[sim.Protocol]string{sim.ProtocolVLLM: "vllm_nixl", sim.ProtocolSGLang: "sglang_bootstrap"}[proto]
			_, metrics := get(t, gw.URL+"/metrics")
			legs := 0
			for line := range strings.Lines(string(metrics)) {
				if !strings.HasPrefix(line, "sluice_pd_prefill_duration_seconds_count{") || strings.HasSuffix(strings.TrimSpace(line), " 0") {
					continue
				}
				legs++
				if !strings.Contains(line, `handoff="`+want+`"`) {
					t.Errorf("a prefill leg with another handoff than %s: %s", want, line)
				}
			}
			if legs == 0 {
				t.Errorf("no prefill leg measured; /metrics has no sluice_pd_prefill_duration_seconds_count with handoff %s", want)
			}
			_, body := get(t, gw.URL+"/v1/models")
			if !strings.Contains(string(body), `"`+model+`"`) {
				t.Errorf("/v1/models = %s, want %s listed", body, model)
			}
			resp, body := postJSON(t, gw.URL+"/v1/chat/completions", `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != 404 || !strings.Contains(string(body), "model_not_found") {
				t.Errorf("unknown model: %d %s; want 404 model_not_found (not passed to the engine)", resp.StatusCode, body)
			}
		})
	}
}

// An engine restarted as another kind is noticed: a worker that comes back from not ready is asked
// again what it is before it is made ready, and replaced under its id when the answer changed.
func TestEngineRestartedAsAnotherKind(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	start := func(proto sim.Protocol, model string) *sim.Engine {
		e, err := sim.New(sim.Config{Protocol: proto, Role: sim.RoleRegular, Port: port, Mode: sim.ModeInstant, Models: []string{model}}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	first := start(sim.ProtocolSGLang, "model-a")
	gw := startGateway(t, app.Options{}, "--worker-urls", url, "--health-check-interval-secs", "1", "--health-failure-threshold", "1")
	one := func() *worker.Worker {
		ws := gw.Registry.Snapshot().All()
		if len(ws) != 1 {
			t.Fatalf("%d workers, want 1", len(ws))
		}
		return ws[0]
	}
	waitFor(t, "sglang worker ready", 10*time.Second, func() bool { return one().Health() == worker.HealthReady })
	if w := one(); w.Protocol() != worker.ProtocolSGLang || !slices.Equal(w.Models(), []string{"model-a"}) {
		t.Fatalf("before the restart: %s %q", w.Protocol(), w.Models())
	}
	id := one().ID()

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "worker not ready once its engine is gone", 15*time.Second, func() bool { return one().Health() == worker.HealthNotReady })
	start(sim.ProtocolVLLM, "model-b")
	waitFor(t, "worker ready again as vLLM", 15*time.Second, func() bool {
		w := one()
		return w.Health() == worker.HealthReady && w.Protocol() == worker.ProtocolVLLM
	})
	if w := one(); w.ID() != id || !slices.Equal(w.Models(), []string{"model-b"}) {
		t.Fatalf("after the restart: id %s (want %s), models %q (want [model-b])", w.ID(), id, w.Models())
	}
	client := sdk(gw.URL)
	r, err := client.Completions.New(context.Background(), openai.CompletionNewParams{Model: "model-b",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(3)})
	if err != nil || len(r.Choices) != 1 {
		t.Fatalf("completion on the restarted engine: %v %+v", err, r)
	}
}
