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
	t.Parallel()
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
	t.Parallel()
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

// Local prefill with decode seats on, through the real gateway and simulated vLLM NIXL engines: a
// short prompt goes to the kv_both decode alone and holds a decode seat there (given back when it
// ends); and while the one prefill slot is held (a prefill engine that hangs), a long prompt that would
// wait for it goes to the decode alone too (reason local_prefill_wait) instead of queueing.
func TestLocalPrefillWithSeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolVLLM, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation",
		"--pd-local-prefill-max-tokens", "16", "--decode-kv-role", "kv_both",
		"--prefill-max-inflight-requests-per-worker", "1", "--decode-max-inflight-requests-per-worker", "4"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	client := sdk(gw.URL)
	pre, dec := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
	chat := func(ctx context.Context, content string) error {
		r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)}, MaxTokens: openai.Int(5)})
		if err == nil && len(r.Choices) != 1 {
			t.Errorf("chat: %d choices", len(r.Choices))
		}
		return err
	}
	skipped := func(reason string) float64 {
		return scrape(t, gw.URL, "sluice_pd_prefill_skipped_total")["handoff=vllm_nixl,reason="+reason]
	}
	seats := func() float64 {
		var n float64
		for _, v := range scrape(t, gw.URL, "sluice_pd_decode_admission_inflight") {
			n += v
		}
		return n
	}
	long := strings.Repeat("a long prompt ", 20) // 70 estimated tokens

	if err := chat(ctx, "hi"); err != nil {
		t.Fatal(err)
	}
	if p, d := pre.Stats(), dec.Stats(); p.RequestsSeen != 0 || d.RequestsSeen != 1 || d.RecomputedPrompts != 1 {
		t.Errorf("short prompt: prefill saw %d, decode saw %d and recomputed %d; want 0, 1, 1", p.RequestsSeen, d.RequestsSeen, d.RecomputedPrompts)
	}
	if n := skipped("local_prefill"); n != 1 {
		t.Errorf("local_prefill skips = %v, want 1", n)
	}
	waitFor(t, "the short request's seat released", 5*time.Second, func() bool { return seats() == 0 })

	// Hold the one prefill slot: the prefill engine hangs until the client goes away.
	if err := pre.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() { held <- chat(hctx, long) }()
	waitFor(t, "the prefill slot held", 5*time.Second, func() bool { return pre.Stats().RequestsSeen == 1 })
	if n := seats(); n != 1 {
		t.Errorf("decode seats held by the hung PD request = %v, want 1", n)
	}
	if err := chat(ctx, long); err != nil {
		t.Fatalf("long prompt while the prefill slot is held: %v", err)
	}
	if p, d := pre.Stats(), dec.Stats(); p.RequestsSeen != 1 || d.RequestsSeen != 2 || d.RecomputedPrompts != 2 {
		t.Errorf("long prompt, prefill full: prefill saw %d, decode saw %d and recomputed %d; want 1, 2, 2", p.RequestsSeen, d.RequestsSeen, d.RecomputedPrompts)
	}
	if n := skipped("local_prefill_wait"); n != 1 {
		t.Errorf("local_prefill_wait skips = %v, want 1", n)
	}
	cancel()
	if err := <-held; err == nil {
		t.Error("the hung request succeeded")
	}
	// Every seat goes back: the cancelled PD request's and the local ones'.
	waitFor(t, "all seats released", 5*time.Second, func() bool { return seats() == 0 })
	if err := pre.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	if err := chat(ctx, long); err != nil { // prefill free again: PD
		t.Fatal(err)
	}
	if p := pre.Stats(); p.RequestsSeen != 2 {
		t.Errorf("long prompt with the prefill free: prefill saw %d in all, want 2", p.RequestsSeen)
	}
}

// The KV role per worker through the admin API: a vLLM decode worker added with kv_role kv_both is
// listed with it and serves short prompts alone (the flag-given decode, not declared, does not); an
// SGLang decode worker added with it is refused with a 400 that says why.
func TestLocalPrefillKVRoleFromAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Protocol: sim.ProtocolVLLM, Engine: instantEngine()})
	pre, d0, d1 := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0], c.ByRole(sim.RoleDecode)[1]
	gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--pd-local-prefill-max-tokens", "16",
		"--prefill", pre.URL(), "--decode", d0.URL())
	resp, body := postJSON(t, gw.URL+"/admin/v1/workers", `{"url":"`+d1.URL()+`","role":"decode","kv_role":"kv_both"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"kv_role":"kv_both"`) {
		t.Fatalf("add kv_both decode: %d %s", resp.StatusCode, body)
	}
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	_, list := get(t, gw.URL+"/admin/v1/workers?role=decode")
	if n := strings.Count(string(list), `"kv_role":"kv_both"`); n != 1 {
		t.Errorf("decode workers listed with kv_both: %d, want 1: %s", n, list)
	}
	waitFor(t, "the added decode routable", 10*time.Second, func() bool {
		_, b := get(t, gw.URL+"/admin/v1/workers?role=decode&health=ready")
		return strings.Count(string(b), `"url"`) == 2
	})
	client := sdk(gw.URL)
	r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(5)})
	if err != nil || len(r.Choices) != 1 {
		t.Fatalf("chat: %v", err)
	}
	if p, a, b := pre.Stats(), d0.Stats(), d1.Stats(); p.RequestsSeen != 0 || a.RequestsSeen != 0 || b.RequestsSeen != 1 || b.RecomputedPrompts != 1 {
		t.Errorf("short prompt: prefill %d, undeclared decode %d, kv_both decode %d (recomputed %d); want 0, 0, 1 (1)",
			p.RequestsSeen, a.RequestsSeen, b.RequestsSeen, b.RecomputedPrompts)
	}

	sg := startCluster(t, sim.ClusterConfig{Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	resp, body = postJSON(t, gw.URL+"/admin/v1/workers", `{"url":"`+sg.ByRole(sim.RoleDecode)[0].URL()+`","role":"decode","kv_role":"kv_both"}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "only vllm engines can prefill on their own") {
		t.Errorf("add kv_both SGLang decode: %d %s, want a 400 saying why", resp.StatusCode, body)
	}
}
