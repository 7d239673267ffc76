package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// The conformance cases (tests/conformance) end to end: the gateway in front of simulated SGLang and
// vLLM engines, driven by the official OpenAI Go client, with the simulator's own counters confirming
// what the engines saw (no colliding rooms, no bootstrap timeouts, KV transferred or recomputed).

func sdk(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// engineTotals sums a counter over engines of a role.
func engineTotals(c *sim.Cluster, role sim.Role, f func(sim.Stats) int64) int64 {
	var n int64
	for _, e := range c.ByRole(role) {
		n += f(e.Stats())
	}
	return n
}

func TestEngineCasesThroughSimulator(t *testing.T) {
	t.Parallel()
	for _, proto := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(string(proto), func(t *testing.T) {
			c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: proto, Engine: instantEngine()})
			// Neither --runtime nor a bootstrap port: the gateway asks the engines.
			var args []string
			for _, e := range c.ByRole(sim.RolePrefill) {
				args = append(args, "--prefill", e.URL())
			}
			for _, e := range c.ByRole(sim.RoleDecode) {
				args = append(args, "--decode", e.URL())
			}
			gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "2"}, args...)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			for _, w := range gw.Registry.Snapshot().All() {
				if string(w.Protocol()) != string(proto) {
					t.Fatalf("worker %s detected as %s, want %s", w.URL(), w.Protocol(), proto)
				}
			}
			client := sdk(gw.URL)
			ctx := context.Background()
			msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me about " + string(proto))}

			for _, n := range []int64{1, 2, 3} {
				for _, stream := range []bool{false, true} {
					name := fmt.Sprintf("chat n=%d stream=%t", n, stream)
					params := openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(6), N: openai.Int(n)}
					if !stream {
						r, err := client.Chat.Completions.New(ctx, params)
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						if len(r.Choices) != int(n) || r.Usage.CompletionTokens == 0 || r.Usage.PromptTokens == 0 ||
							r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens {
							t.Fatalf("%s: %d choices, usage %+v", name, len(r.Choices), r.Usage)
						}
						for i, ch := range r.Choices {
							if ch.Index != int64(i) || ch.Message.Content == "" {
								t.Errorf("%s: choice %d = index %d %q", name, i, ch.Index, ch.Message.Content)
							}
						}
						continue
					}
					params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
					s := client.Chat.Completions.NewStreaming(ctx, params)
					var acc openai.ChatCompletionAccumulator
					usageChunks := 0
					for s.Next() {
						ch := s.Current()
						acc.AddChunk(ch)
						if ch.Usage.TotalTokens > 0 {
							usageChunks++
						}
					}
					if err := s.Err(); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if len(acc.Choices) != int(n) || usageChunks != 1 {
						t.Fatalf("%s: %d choices, %d usage chunks; want %d and 1", name, len(acc.Choices), usageChunks, n)
					}
					for i, ch := range acc.Choices {
						if ch.Message.Content == "" || ch.FinishReason == "" {
							t.Errorf("%s: choice %d incomplete: %+v", name, i, ch)
						}
					}
				}
			}
			comp, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: simModel,
				Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"one two", "three four"}}, MaxTokens: openai.Int(3)})
			if err != nil {
				t.Fatalf("completions batch: %v", err)
			}
			if len(comp.Choices) != 2 {
				t.Errorf("completions batch: %d choices, want 2", len(comp.Choices))
			}

			if proto == sim.ProtocolSGLang {
				_, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: simModel,
					Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"a", "b"}}, N: openai.Int(2)})
				var ae *openai.Error
				if !errors.As(err, &ae) || ae.StatusCode != 400 {
					t.Errorf("batch with n=2 on SGLang: %v, want a 400", err)
				}
				generateCases(t, gw.URL)
				if n := engineTotals(c, sim.RoleDecode, func(s sim.Stats) int64 { return s.RoomCollisions + s.BootstrapTimeouts + s.BootstrapMismatches }); n != 0 {
					t.Errorf("SGLang decodes saw %d room collisions, bootstrap timeouts or mismatches", n)
				}
				if n := engineTotals(c, sim.RolePrefill, func(s sim.Stats) int64 { return s.RoomCollisions + s.HandshakeTimeouts }); n != 0 {
					t.Errorf("SGLang prefills saw %d room collisions or handshake timeouts", n)
				}
			} else {
				// Only the n > 1 chats and the prompt batch went to decode alone and recomputed their
				// prompts, counted per sample: (2+3) x 2 for the chats, 2 for the batch. Every n = 1 chat
				// got its KV from the prefill.
				if n := engineTotals(c, sim.RoleDecode, func(s sim.Stats) int64 { return s.RecomputedPrompts }); n != 12 {
					t.Errorf("vLLM decodes recomputed %d prompts, want 12 (the n > 1 and batch requests only)", n)
				}
			}
		})
	}
}

// generateCases drives SGLang's native /generate: one prompt, a batch, n > 1 split, and the input
// logprobs merged from the prefill, streaming and not.
func generateCases(t *testing.T, url string) {
	t.Helper()
	post := func(body string) (int, []byte) {
		resp, err := http.Post(url+"/generate", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if st, b := post(`{"text":"the quick fox","sampling_params":{"max_new_tokens":3}}`); st != 200 || !json.Valid(b) {
		t.Errorf("generate: %d %s", st, b)
	}
	var list []map[string]any
	if st, b := post(`{"text":["a b","c d","e f"],"sampling_params":{"max_new_tokens":2}}`); st != 200 || json.Unmarshal(b, &list) != nil || len(list) != 3 {
		t.Errorf("generate batch: %d %s", st, b)
	}
	if st, b := post(`{"text":"a b","sampling_params":{"max_new_tokens":2,"n":2}}`); st != 200 || json.Unmarshal(b, &list) != nil || len(list) != 2 {
		t.Errorf("generate n=2: %d %s", st, b)
	}
	var one struct {
		MetaInfo struct {
			PromptTokens       int   `json:"prompt_tokens"`
			InputTokenLogprobs []any `json:"input_token_logprobs"`
		} `json:"meta_info"`
	}
	st, b := post(`{"text":"one two three four","return_logprob":true,"sampling_params":{"max_new_tokens":2}}`)
	if st != 200 || json.Unmarshal(b, &one) != nil || one.MetaInfo.PromptTokens == 0 || len(one.MetaInfo.InputTokenLogprobs) < one.MetaInfo.PromptTokens {
		t.Errorf("generate return_logprob: %d %s; want the prompt's input logprobs from the prefill", st, b)
	}
	st, b = post(`{"text":"one two three four","return_logprob":true,"stream":true,"sampling_params":{"max_new_tokens":2}}`)
	if st != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("generate stream: %d %s", st, b)
	}
	for _, f := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		p := strings.TrimPrefix(f, "data: ")
		if p == "[DONE]" {
			continue
		}
		if err := json.Unmarshal([]byte(p), &one); err != nil || len(one.MetaInfo.InputTokenLogprobs) < one.MetaInfo.PromptTokens {
			t.Errorf("generate stream frame %s: want the prompt's input logprobs in every frame", p)
		}
	}
}

// The "done when", as a new user would try it.
func TestEngineFidelityAsANewUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a vLLM engine added with only a URL and a role is served with sequential PD", func(t *testing.T) {
		c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolVLLM, Engine: instantEngine()})
		gw := startGateway(t, app.Options{}, "--pd-disaggregation")
		for _, e := range c.Engines {
			role := "prefill"
			if e.Config().Role == sim.RoleDecode {
				role = "decode"
			}
			st, b := adminPost(t, gw.URL, `{"url":"`+e.URL()+`","role":"`+role+`"}`)
			if st != 200 || !strings.Contains(string(b), `"protocol":"vllm"`) || !strings.Contains(string(b), `"protocol_source":"models_owned_by"`) {
				t.Fatalf("add %s: %d %s", role, st, b)
			}
		}
		waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
		client := sdk(gw.URL)
		r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(5)})
		if err != nil || len(r.Choices) != 1 {
			t.Fatalf("chat: %v", err)
		}
		d := c.ByRole(sim.RoleDecode)[0].Stats()
		if d.RecomputedPrompts != 0 || d.PerPath["/v1/chat/completions"] != 1 {
			t.Errorf("decode recomputed %d prompts over %v: the KV was not handed over", d.RecomputedPrompts, d.PerPath)
		}
	})

	t.Run("a vLLM prefill that returns no kv_transfer_params still answers 200", func(t *testing.T) {
		c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolVLLM, Engine: instantEngine()})
		gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation"}, pdArgs(c)...)...)
		waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
		if err := c.ByRole(sim.RolePrefill)[0].SetFaults(sim.Faults{OmitKVTransferParams: true}); err != nil {
			t.Fatal(err)
		}
		client := sdk(gw.URL)
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(5)})
		if err != nil {
			t.Fatalf("chat with the prefill omitting params: %v", err)
		}
		if n := c.ByRole(sim.RoleDecode)[0].Stats().RecomputedPrompts; n != 1 {
			t.Errorf("decode recomputed %d prompts, want 1", n)
		}
		if v := metricSum(t, gw.URL, "sluice_pd_kv_transfer_fallbacks_total"); v != 1 {
			t.Errorf("sluice_pd_kv_transfer_fallbacks_total = %v, want 1", v)
		}
	})

	t.Run("a mixed SGLang and vLLM fleet never pairs across protocols", func(t *testing.T) {
		sg := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
		vl := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolVLLM, Engine: instantEngine()})
		gw := startGateway(t, app.Options{}, append(append([]string{"--pd-disaggregation", "--policy", "round_robin"}, pdArgs(sg)...), pdArgs(vl)...)...)
		waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
		sameCluster := map[string]string{}
		for _, c := range []*sim.Cluster{sg, vl} {
			for _, e := range c.Engines {
				sameCluster[e.URL()] = c.ByRole(sim.RolePrefill)[0].URL()
			}
		}
		pairs := map[string]bool{}
		for i := range 8 {
			body := fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":"q%d"}],"max_tokens":3}`, i)
			resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			p, d := resp.Header.Get("X-Sluice-Prefill-Worker"), resp.Header.Get("X-Sluice-Worker")
			if resp.StatusCode != 200 || sameCluster[d] != p {
				t.Fatalf("request %d: %d, prefill %s with decode %s", i, resp.StatusCode, p, d)
			}
			pairs[p] = true
		}
		if len(pairs) != 2 {
			t.Errorf("only %d of the two pairs served", len(pairs))
		}
	})

	t.Run("a worker whose server info says decode cannot be added as prefill", func(t *testing.T) {
		c := startCluster(t, sim.ClusterConfig{Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
		gw := startGateway(t, app.Options{}, "--pd-disaggregation")
		st, b := adminPost(t, gw.URL, `{"url":"`+c.Engines[0].URL()+`","role":"prefill"}`)
		if st != 400 || !strings.Contains(string(b), "disaggregation_mode decode") {
			t.Errorf("add a decode engine as prefill: %d %s, want a 400 that names the mismatch", st, b)
		}
		if n := gw.Registry.Snapshot().Len(); n != 0 {
			t.Errorf("%d workers registered", n)
		}
	})

	t.Run("a prompt longer than the engine's context gets a 400 that says so", func(t *testing.T) {
		for _, proto := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
			eng := instantEngine()
			eng.ContextLength = 64
			c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: proto, Engine: eng})
			gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation"}, pdArgs(c)...)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			client := sdk(gw.URL)
			_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("many words here ", 100))}})
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(strings.ToLower(ae.Message), "context") {
				t.Errorf("%s: %v, want a 400 naming the context length", proto, err)
			}
			if ae != nil && strings.Contains(ae.Message, "127.0.0.1") {
				t.Errorf("%s: the engine's address leaked: %s", proto, ae.Message)
			}
		}
	})
}

func adminPost(t *testing.T, base, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(base+"/admin/v1/workers", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// metricSum scrapes /metrics and sums the samples of one metric.
func metricSum(t *testing.T, base, name string) float64 {
	t.Helper()
	var sum float64
	for _, v := range scrape(t, base, name) {
		sum += v
	}
	return sum
}

// An SGLang data-parallel-attention PD deployment gets rank-aware placement and hints with no flag
// beyond the worker URLs: the simulator sees no rank conflict, every decode finds its KV, and a
// conversation stays on the rank that holds its prefix.
func TestDataParallelRanksThroughSimulator(t *testing.T) {
	t.Parallel()
	// Realistic engines: the instant mode keeps no prefix cache.
	prefill := sim.Config{Mode: sim.ModeRealistic, DPSize: 4}
	decode := sim.Config{Mode: sim.ModeRealistic, DPSize: 2}
	pc := startCluster(t, sim.ClusterConfig{Prefill: 2, Protocol: sim.ProtocolSGLang, Engine: prefill})
	dc := startCluster(t, sim.ClusterConfig{Decode: 1, Protocol: sim.ProtocolSGLang, Engine: decode})
	var args []string
	for _, e := range pc.Engines {
		args = append(args, "--prefill", e.URL()) // the bootstrap port and dp_size come from server info
	}
	args = append(args, "--decode", dc.Engines[0].URL())
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "8"}, args...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	for _, w := range gw.Registry.Snapshot().All() {
		want := 4
		if w.Role() == "decode" {
			want = 2
		}
		if len(w.Ranks()) != want {
			t.Fatalf("worker %s has %d rank views, want %d (dp_size from server info)", w.URL(), len(w.Ranks()), want)
		}
	}
	client := sdk(gw.URL)
	ctx := context.Background()
	for i := range 12 {
		msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("conversation %d: tell me a long story about rivers and mountains", i))}
		if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(3), N: openai.Int(int64(1 + i%2))}); err != nil {
			t.Fatalf("chat %d: %v", i, err)
		}
	}
	s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")}, MaxTokens: openai.Int(4)})
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	used := 0
	for _, e := range pc.Engines {
		st := e.Stats()
		if st.RankConflicts != 0 || st.HandshakeTimeouts != 0 {
			t.Errorf("prefill %s: %d rank conflicts, %d handshake timeouts", e.URL(), st.RankConflicts, st.HandshakeTimeouts)
		}
		for _, r := range st.Ranks {
			if r.Requests > 0 {
				used++
			}
		}
	}
	if used < 4 {
		t.Errorf("only %d of 8 prefill ranks served requests: ranks are not placement candidates", used)
	}
	if st := dc.Engines[0].Stats(); st.BootstrapTimeouts+st.BootstrapMismatches+st.PrefillRankMisses != 0 {
		t.Errorf("decode: %d bootstrap timeouts, %d mismatches, %d prefill rank misses", st.BootstrapTimeouts, st.BootstrapMismatches, st.PrefillRankMisses)
	}

	// A conversation that goes on is placed on the rank that holds its prefix.
	before := map[string]int64{}
	for _, e := range pc.Engines {
		for _, r := range e.Stats().Ranks {
			before[fmt.Sprint(e.URL(), r.DPRank)] = r.PrefixCacheHitTokens
		}
	}
	history := "a conversation that goes on and on about the sea, the ships, the harbours and the tides"
	for turn := range 8 {
		history += fmt.Sprintf(" turn %d", turn)
		if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(history)}, MaxTokens: openai.Int(2)}); err != nil {
			t.Fatal(err)
		}
	}
	gained := 0
	for _, e := range pc.Engines {
		for _, r := range e.Stats().Ranks {
			if r.PrefixCacheHitTokens > before[fmt.Sprint(e.URL(), r.DPRank)] {
				gained++
			}
		}
	}
	if gained != 1 {
		t.Errorf("prefix cache hits grew on %d ranks over an 8-turn conversation, want exactly 1", gained)
	}
	var sum int64
	for _, v := range scrape(t, gw.URL, "sluice_worker_rank_active_requests") {
		sum += int64(v)
	}
	if sum != 0 {
		t.Errorf("rank loads after the requests = %d, want 0", sum)
	}
}

// A vLLM Mooncake PD pair serves chat, streaming and not; the prefill's connector is detected from
// its bootstrap server, the decode's comes from --kv-connector.
func TestMooncakeThroughSimulator(t *testing.T) {
	t.Parallel()
	eng := sim.Config{Mode: sim.ModeInstant, KVConnector: sim.ConnectorMooncake}
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolVLLM, Engine: eng})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--kv-connector", "mooncake"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	for _, w := range gw.Registry.Snapshot().All() {
		if w.Spec().KVConnector != "mooncake" {
			t.Fatalf("worker %s connector %q", w.URL(), w.Spec().KVConnector)
		}
	}
	client := sdk(gw.URL)
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello mooncake")}
	r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(5)})
	if err != nil || len(r.Choices) != 1 || r.Choices[0].Message.Content == "" {
		t.Fatalf("chat: %v", err)
	}
	s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(5)})
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil || len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" {
		t.Fatalf("stream: %v", err)
	}
	d := c.ByRole(sim.RoleDecode)[0].Stats()
	if d.MooncakeTransfers != 2 || d.RecomputedPrompts != 0 || d.MooncakeTimeouts+d.MooncakeFailures != 0 {
		t.Errorf("decode: %d transfers, %d recomputed, %d timeouts, %d failures; want 2 transfers", d.MooncakeTransfers, d.RecomputedPrompts, d.MooncakeTimeouts, d.MooncakeFailures)
	}
}
