package e2e

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// What the gateway learns from engines speaking their own gRPC (issue #35) beyond GetModelInfo: the
// tokenizer pulled with GetTokenizer when no flag gives one (or given as the Rust gateway's
// --model-path), the prefill's bootstrap port from GetServerInfo, and the KV events streamed on
// SubscribeKvEvents.

// engineGRPCChat asks the gateway one chat through the official OpenAI SDK and checks the answer.
func engineGRPCChat(t *testing.T, gwURL, prompt string) {
	t.Helper()
	client := openai.NewClient(option.WithBaseURL(gwURL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	chat, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: simModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(8), Seed: openai.Int(3)})
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if len(chat.Choices) != 1 || chat.Choices[0].Message.Content == "" || chat.Usage.CompletionTokens != 8 || chat.Usage.PromptTokens == 0 {
		t.Fatalf("chat = %+v", chat)
	}
}

// TestEngineGRPCInfoTokenizer: a gateway given no --tokenizer-path serves engine-gRPC workers with the
// tokenizer the engine streams (GetTokenizer), for SGLang and vLLM, regular and PD (the prefill's
// bootstrap port left to GetServerInfo); --model-path DIR serves them as --tokenizer-path DIR does.
func TestEngineGRPCInfoTokenizer(t *testing.T) {
	t.Parallel()
	cfg := engineGRPCConfig()
	for _, tc := range []struct {
		name    string
		cluster sim.ClusterConfig
		args    func(t *testing.T, c *sim.Cluster) []string
	}{
		{name: "sglang pulled", cluster: sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang, Engine: cfg}},
		{name: "vllm pulled", cluster: sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolVLLM, Engine: cfg}},
		{name: "pd-sglang pulled", cluster: sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: cfg}},
		{name: "sglang --model-path", cluster: sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang, Engine: cfg},
			args: func(t *testing.T, _ *sim.Cluster) []string { return []string{"--model-path", byteTokenizerDir(t)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, tc.cluster)
			var args []string
			if len(c.ByRole(sim.RolePrefill)) == 0 {
				for _, e := range c.Engines {
					args = append(args, "--worker-urls", grpcURL(e))
				}
			} else {
				args = append(args, "--pd-disaggregation", "--prefill", grpcURL(c.ByRole(sim.RolePrefill)[0]), "--decode", grpcURL(c.ByRole(sim.RoleDecode)[0]))
			}
			if tc.args != nil {
				args = append(args, tc.args(t, c)...)
			}
			gw := startGateway(t, app.Options{}, args...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			engineGRPCChat(t, gw.URL, "Say hello")
			for _, e := range c.Engines {
				if e.Stats().Completed == 0 {
					t.Errorf("engine %s (%s) served nothing", e.URL(), e.Role())
				}
			}
			if len(c.ByRole(sim.RolePrefill)) > 0 {
				noMismatches(t, c)
			}
		})
	}
}

// TestEngineGRPCInfoKVEvents: an engine-gRPC worker's KV events reach the gateway's index over
// SubscribeKvEvents, with no --kv-events-endpoint: the prompt's blocks show in the index metrics.
func TestEngineGRPCInfoKVEvents(t *testing.T) {
	t.Parallel()
	for _, proto := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(string(proto), func(t *testing.T) {
			// Realistic mode, fast: only it runs prompts through the prefix cache whose changes are the events.
			cfg := engineGRPCConfig()
			cfg.Mode, cfg.PrefillTokensPerSec, cfg.ITLBase, cfg.ITLPerSeq = sim.ModeRealistic, 1e7, time.Microsecond, time.Nanosecond
			cfg.BlockSize = 4
			cfg.KVEvents = sim.KVEventsConfig{Enabled: true}
			c := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: proto, Engine: cfg})
			worker := grpcURL(c.Engines[0])
			gw := startGateway(t, app.Options{}, "--worker-urls", worker, "--runtime", string(proto), "--policy", "kv_aware")
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			// The stream is live only, and the relay keeps no history: a block whose parent was stored
			// before the gateway subscribed is an orphan the index drops (sluice_kv_index_dropped_blocks_total
			// {reason="orphan"}), for as long as the engine keeps that parent cached. So each prompt starts a
			// chain of its own (a completions prompt whose first block is new: no template prefix), until the
			// index has the worker's blocks.
			n := 0
			waitFor(t, "blocks indexed from the engine's gRPC events", 30*time.Second, func() bool {
				n++
				resp, err := post(context.Background(), gw.URL+"/v1/completions",
					fmt.Sprintf(`{"model":%q,"prompt":"%d say hello to the gateway","max_tokens":2}`, simModel, n))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("completion: %d %s", resp.StatusCode, b)
				}
				for k, v := range scrape(t, gw.URL, "sluice_kv_index_blocks") {
					if strings.Contains(k, "worker="+worker) && v > 0 {
						return true
					}
				}
				return false
			})
		})
	}
}
