package sim

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func sdkClient(t *testing.T, e *Engine) openai.Client {
	t.Helper()
	return openai.NewClient(option.WithBaseURL(e.URL()+"/v1/"), option.WithAPIKey("x"),
		option.WithHTTPClient(testClient(t)), option.WithMaxRetries(0))
}

func TestOpenAISDK(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestOpenAISDKDataParallel: the official client reaches a chosen DP rank with the body field SGLang
// reads (routed_dp_rank) or the header, and the per-rank prefix cache shows in usage.
func TestOpenAISDKDataParallel(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{DPSize: 4, Seed: 3, PrefillTokensPerSec: 1e7, ITLBase: time.Microsecond, ITLPerSeq: time.Nanosecond})
	client := sdkClient(t, e)
	ctx := t.Context()
	params := openai.ChatCompletionNewParams{
		Model: "sim-model", MaxTokens: openai.Int(3),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(words(120, "sys")), openai.UserMessage("hello")},
	}
	chat := func(opts ...option.RequestOption) *openai.ChatCompletion {
		t.Helper()
		resp, err := client.Chat.Completions.New(ctx, params, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := chat(option.WithJSONSet("routed_dp_rank", 2))
	second := chat(option.WithJSONSet("routed_dp_rank", 2))
	other := chat(option.WithHeader("X-Data-Parallel-Rank", "1"))
	if first.Usage.PromptTokensDetails.CachedTokens != 0 || second.Usage.PromptTokensDetails.CachedTokens == 0 ||
		other.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("cached tokens %d, %d, %d: want a miss, a hit on the same rank, a miss on another",
			first.Usage.PromptTokensDetails.CachedTokens, second.Usage.PromptTokensDetails.CachedTokens, other.Usage.PromptTokensDetails.CachedTokens)
	}
	if got := rankRequests(e); got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 0 {
		t.Errorf("ranks ran %v, want [0 1 2 0]", got)
	}
	if first.Choices[0].Message.Content != other.Choices[0].Message.Content {
		t.Errorf("the rank changed the output: %q vs %q", first.Choices[0].Message.Content, other.Choices[0].Message.Content)
	}
	_, err := client.Chat.Completions.New(ctx, params, option.WithJSONSet("routed_dp_rank", 4))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(string(apiErr.DumpResponse(true)), "routed_dp_rank=4 out of range [0, 4)") {
		t.Errorf("rank 4: %v, want SGLang's 400", err)
	}
}

// TestOpenAISDKMooncake drives a vLLM Mooncake pair as the reference proxy does, with the official
// client on both legs: the prefill (max_tokens 1, not streamed, X-data-parallel-rank) in parallel with
// the decode, which gets the prefill's bootstrap address and the rank's engine id.
func TestOpenAISDKMooncake(t *testing.T) {
	t.Parallel()
	base := Config{Mode: ModeInstant, Protocol: ProtocolVLLM, KVConnector: ConnectorMooncake, Seed: 8, BootstrapTimeout: 500 * time.Millisecond}
	pcfg, dcfg := base, base
	pcfg.Role, pcfg.DPSize = RolePrefill, 2
	dcfg.Role = RoleDecode
	p, d := startEngine(t, pcfg), startEngine(t, dcfg)
	reg := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Seed: 8})
	pc, dc := sdkClient(t, p), sdkClient(t, d)
	ctx := t.Context()
	bootstrapAddr := "http://127.0.0.1:" + strconv.Itoa(p.BootstrapPort())
	params := openai.ChatCompletionNewParams{
		Model: "sim-model", MaxTokens: openai.Int(6),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("mooncake through the sdk")},
	}
	rc := sdkClient(t, reg)
	want, err := rc.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	prefillLeg := func(id string, rank int) error {
		pp := params
		pp.MaxTokens = openai.Int(1)
		_, err := pc.Chat.Completions.New(ctx, pp,
			option.WithJSONSet("kv_transfer_params", map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "transfer_id": id}),
			option.WithHeader("X-Request-Id", id), option.WithHeader("X-data-parallel-rank", strconv.Itoa(rank)))
		return err
	}
	decodeParams := func(id string, rank int) option.RequestOption {
		return option.WithJSONSet("kv_transfer_params", map[string]any{
			"do_remote_decode": false, "do_remote_prefill": true, "remote_bootstrap_addr": bootstrapAddr,
			"remote_engine_id": p.RankEngineIDs()[rank], "transfer_id": id,
		})
	}
	for i, stream := range []bool{false, true} {
		id := "xfer-sdk-" + strconv.Itoa(i)
		var wg sync.WaitGroup
		var perr error
		wg.Go(func() { perr = prefillLeg(id, 1) })
		var content string
		if stream {
			s := dc.Chat.Completions.NewStreaming(ctx, params, decodeParams(id, 1))
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatalf("streaming decode: %v", err)
			}
			s.Close()
			content = acc.Choices[0].Message.Content
		} else {
			resp, err := dc.Chat.Completions.New(ctx, params, decodeParams(id, 1))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			content = resp.Choices[0].Message.Content
		}
		wg.Wait()
		if perr != nil {
			t.Fatalf("prefill leg: %v", perr)
		}
		if content != want.Choices[0].Message.Content {
			t.Errorf("stream %v: decode content %q, want %q", stream, content, want.Choices[0].Message.Content)
		}
	}
	if st := d.Stats(); st.MooncakeTransfers != 2 || st.RecomputedPrompts != 0 {
		t.Errorf("decode stats: transfers %d, recomputed %d", st.MooncakeTransfers, st.RecomputedPrompts)
	}
	if got := rankRequests(p); got[0] != 0 || got[1] != 2 {
		t.Errorf("prefill ranks %v, want [0 2]", got)
	}
	// The wrong rank's engine id: the pull times out and the SDK sees vLLM's 500.
	var wg sync.WaitGroup
	wg.Go(func() { _ = prefillLeg("xfer-sdk-wrong", 1) })
	_, err = dc.Chat.Completions.New(ctx, params, decodeParams("xfer-sdk-wrong", 0))
	wg.Wait()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || apiErr.Message != "Internal server error" || apiErr.Type != "InternalServerError" {
		t.Errorf("wrong engine id: %v, want vLLM's 500", err)
	}
}
