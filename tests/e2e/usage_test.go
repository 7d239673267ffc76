package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
)

// TestStreamUsageWithOpenAISDK: the gateway asks every engine for usage to count tokens, yet the
// official SDK sees no usage chunk (and no "usage" member at all) when it did not ask for one, and
// the usage chunk when it did — in every topology, n > 1 included — while sluice_tokens_total counts
// the tokens of both.
func TestStreamUsageWithOpenAISDK(t *testing.T) {
	t.Parallel()
	for _, tp := range topologies() {
		t.Run(tp.name, func(t *testing.T) {
			c := startCluster(t, tp.cluster)
			gw := startGateway(t, app.Options{}, tp.args(c)...)
			waitFor(t, "gateway ready", 10e9, func() bool { return gw.Ready() == nil })
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			ctx := context.Background()
			msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("count my tokens, " + tp.name)}

			for _, n := range []int64{1, 2} {
				if n > 1 && tp.name == "pd-worker-grpc" {
					continue // n > 1 is covered by the other topologies
				}
				// Not asked: no usage anywhere in the stream.
				stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs,
					MaxTokens: openai.Int(6), N: openai.Int(n)})
				chunks := 0
				for stream.Next() {
					ch := stream.Current()
					chunks++
					if strings.Contains(ch.RawJSON(), `"usage"`) || len(ch.Choices) == 0 {
						t.Errorf("n=%d: a chunk the client did not ask for: %s", n, ch.RawJSON())
					}
				}
				if err := stream.Err(); err != nil || chunks == 0 {
					t.Fatalf("n=%d: stream: %v after %d chunks", n, err, chunks)
				}

				// Asked: the usage chunk arrives, last, with choices empty.
				stream = client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs,
					MaxTokens: openai.Int(6), N: openai.Int(n),
					StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
				var last openai.ChatCompletionChunk
				for stream.Next() {
					last = stream.Current()
				}
				if err := stream.Err(); err != nil {
					t.Fatalf("n=%d with usage: %v", n, err)
				}
				if len(last.Choices) != 0 || last.Usage.CompletionTokens == 0 || last.Usage.PromptTokens == 0 {
					t.Errorf("n=%d: last chunk %s, want the usage chunk", n, last.RawJSON())
				}
			}

			out := scrape(t, gw.URL, "sluice_tokens_total")
			if out["model=sim-model,route=/v1/chat/completions,type=output"] == 0 || out["model=sim-model,route=/v1/chat/completions,type=input"] == 0 {
				t.Errorf("sluice_tokens_total = %v, want input and output tokens of the chat streams", out)
			}
		})
	}
}
