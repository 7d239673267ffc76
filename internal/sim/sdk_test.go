package sim

import (
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func sdkClient(t *testing.T, e *Engine) openai.Client {
	t.Helper()
	return openai.NewClient(option.WithBaseURL(e.URL()+"/v1/"), option.WithAPIKey("x"),
		option.WithHTTPClient(testClient(t)), option.WithMaxRetries(0))
}

func TestOpenAISDK(t *testing.T) {
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 32, Seed: 11})
	client := sdkClient(t, e)
	ctx := t.Context()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello there")}

	t.Run("chat", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, MaxTokens: openai.Int(6)})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "length" || countTokens(resp.Choices[0].Message.Content) != 6 ||
			resp.Usage.CompletionTokens != 6 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+6 || resp.Model != "sim-model" ||
			resp.Object != "chat.completion" || resp.ID == "" {
			t.Errorf("chat response: %+v", resp)
		}
	})

	t.Run("chat streaming", func(t *testing.T) {
		unary, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, MaxCompletionTokens: openai.Int(9)})
		if err != nil {
			t.Fatal(err)
		}
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "sim-model", Messages: msgs, MaxCompletionTokens: openai.Int(9),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
		if len(acc.Choices) != 1 {
			t.Fatalf("accumulated %d choices", len(acc.Choices))
		}
		if got, want := acc.Choices[0].Message.Content, unary.Choices[0].Message.Content; got != want {
			t.Errorf("streamed content %q, want the unary content %q", got, want)
		}
		if acc.Choices[0].FinishReason != "length" || acc.Usage.CompletionTokens != 9 || chunks != 12 {
			t.Errorf("finish %q, usage %d, chunks %d; want length, 9, 12", acc.Choices[0].FinishReason, acc.Usage.CompletionTokens, chunks)
		}
	})

	t.Run("completions", func(t *testing.T) {
		resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:     "sim-model",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon a time")},
			MaxTokens: openai.Int(4),
			Stop:      openai.CompletionNewParamsStopUnion{OfString: openai.String("zzzz")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || countTokens(resp.Choices[0].Text) != 4 || resp.Choices[0].FinishReason != "length" ||
			resp.Usage.PromptTokens != 4 || resp.Object != "text_completion" {
			t.Errorf("completion: %+v", resp)
		}
	})

	t.Run("n=2", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, MaxTokens: openai.Int(5), N: openai.Int(2)})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 2 || resp.Choices[0].Index != 0 || resp.Choices[1].Index != 1 ||
			resp.Choices[0].Message.Content == resp.Choices[1].Message.Content || resp.Usage.CompletionTokens != 10 {
			t.Errorf("n=2: %+v", resp)
		}
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "sim-model", Messages: msgs, MaxTokens: openai.Int(5), N: openai.Int(2)})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
		if len(acc.Choices) != 2 || acc.Choices[0].Message.Content != resp.Choices[0].Message.Content ||
			acc.Choices[1].Message.Content != resp.Choices[1].Message.Content {
			t.Errorf("streamed n=2 choices %+v, want %+v", acc.Choices, resp.Choices)
		}
	})

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != "sim-model" || page.Data[0].OwnedBy != "sglang" {
			t.Errorf("models: %+v", page.Data)
		}
	})

	t.Run("stop", func(t *testing.T) {
		full, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model: "sim-model", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("stop test")}, MaxTokens: openai.Int(10),
		})
		if err != nil {
			t.Fatal(err)
		}
		third := strings.Fields(full.Choices[0].Text)[2]
		cut, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model: "sim-model", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("stop test")}, MaxTokens: openai.Int(10),
			Stop: openai.CompletionNewParamsStopUnion{OfStringArray: []string{" " + third}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if cut.Choices[0].FinishReason != "stop" || !strings.HasPrefix(full.Choices[0].Text, cut.Choices[0].Text) ||
			strings.Contains(cut.Choices[0].Text, " "+third) {
			t.Errorf("stop %q: %q (full %q)", third, cut.Choices[0].Text, full.Choices[0].Text)
		}
	})
}

// TestOpenAISDKEngineErrors: the official client sees each engine's 400 with its message.
func TestOpenAISDKEngineErrors(t *testing.T) {
	long := strings.Repeat("word ", 100)
	for _, proto := range []Protocol{ProtocolSGLang, ProtocolVLLM} {
		t.Run(string(proto), func(t *testing.T) {
			e := startEngine(t, Config{Mode: ModeInstant, Protocol: proto, ContextLength: 64})
			client := sdkClient(t, e)
			_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model: "sim-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long)},
			})
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
				t.Fatalf("long prompt: %v, want a 400 *openai.Error", err)
			}
			want := map[Protocol]string{ProtocolSGLang: "longer than the model's context length", ProtocolVLLM: "Please reduce the length of the input prompt"}[proto]
			// The SDK parses only an "error" object (vLLM's shape, not SGLang's): read the body itself.
			if body := string(apiErr.DumpResponse(true)); !strings.Contains(body, want) {
				t.Errorf("error response %s lacks %q", body, want)
			}
			if proto == ProtocolVLLM && (apiErr.Param != "input_tokens" || apiErr.Type != "BadRequestError" || !strings.Contains(apiErr.Message, want)) {
				t.Errorf("SDK fields of vLLM's error: param %q type %q message %q", apiErr.Param, apiErr.Type, apiErr.Message)
			}
			_, err = client.Completions.New(t.Context(), openai.CompletionNewParams{
				Model: "sim-model", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(-5),
			})
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(string(apiErr.DumpResponse(true)), "got -5") {
				t.Errorf("max_tokens -5: %v, want a 400 naming the value", err)
			}
			page, err := client.Models.List(t.Context())
			if err != nil || len(page.Data) != 1 || page.Data[0].OwnedBy != string(proto) {
				t.Errorf("models: %+v, %v", page, err)
			}
		})
	}
}
