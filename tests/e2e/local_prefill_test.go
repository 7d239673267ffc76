package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// Local prefill through the real gateway and simulated vLLM NIXL engines: with the decode engine
// declared kv_both and --pd-local-prefill-max-tokens 16, a short prompt is served by the decode
// engine alone (the prefill engine sees nothing, the decode recomputes the prompt, the gateway counts
// a local_prefill skip), while a long one still goes PD (a prefill leg, the KV handed over). An
// SGLang decode engine declared kv_both is refused at startup.
func TestLocalPrefillEndToEnd(t *testing.T) {
	ctx := context.Background()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolVLLM, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation",
		"--pd-local-prefill-max-tokens", "16", "--decode-kv-role", "kv_both"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	client := sdk(gw.URL)
	pre, dec := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
	chat := func(content string) {
		t.Helper()
		r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)}, MaxTokens: openai.Int(5)})
		if err != nil || len(r.Choices) != 1 {
			t.Fatalf("chat: %v", err)
		}
	}
	skipped := func() float64 {
		return scrape(t, gw.URL, "sluice_pd_prefill_skipped_total")["handoff=vllm_nixl,reason=local_prefill"]
	}

	chat("hi") // 1 estimated token
	if p, d := pre.Stats(), dec.Stats(); p.RequestsSeen != 0 || d.RequestsSeen != 1 || d.RecomputedPrompts != 1 {
		t.Errorf("short prompt: prefill saw %d, decode saw %d and recomputed %d; want 0, 1, 1", p.RequestsSeen, d.RequestsSeen, d.RecomputedPrompts)
	}
	if n := skipped(); n != 1 {
		t.Errorf("local_prefill skips counted = %v, want 1", n)
	}

	chat(strings.Repeat("a long prompt ", 20)) // 70 estimated tokens
	if p, d := pre.Stats(), dec.Stats(); p.RequestsSeen != 1 || d.RequestsSeen != 2 || d.RecomputedPrompts != 1 {
		t.Errorf("long prompt: prefill saw %d, decode saw %d and recomputed %d; want 1, 2, 1 (KV handed over)", p.RequestsSeen, d.RequestsSeen, d.RecomputedPrompts)
	}
	if n := skipped(); n != 1 {
		t.Errorf("local_prefill skips counted = %v after a long prompt, want still 1", n)
	}
}

func TestLocalPrefillRefusesSGLangDecode(t *testing.T) {
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	a := newApp(t, testLogger(t), append([]string{"--port", "0", "--pd-disaggregation",
		"--pd-local-prefill-max-tokens", "16", "--decode-kv-role", "kv_both"}, pdArgs(c)...)...)
	err := a.Start(context.Background())
	if err == nil {
		_ = a.Shutdown(context.Background())
		t.Fatal("started with an SGLang decode engine declared kv_both")
	}
	if !strings.Contains(err.Error(), "only vllm engines can prefill on their own") {
		t.Errorf("error %q does not say why", err)
	}
}
