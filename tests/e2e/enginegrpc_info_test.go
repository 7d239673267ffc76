package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// What the gateway learns from engines speaking their own gRPC (issue #35) beyond GetModelInfo: the
// tokenizer pulled with GetTokenizer when no flag gives one (or given as the Rust gateway's
// --model-path) and the prefill's bootstrap port from GetServerInfo. (The KV events streamed on
// SubscribeKvEvents are tested against the simulator in internal/kvevents.)

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
