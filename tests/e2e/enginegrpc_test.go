package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// The engines' own gRPC protocols (issue #35): simulated SGLang and vLLM engines that serve only their
// engine's gRPC service (no sluice.worker.v1), answering token ids that are the UTF-8 bytes of their
// text, behind a gateway given a byte-level tokenizer whose ids 0-255 are the bytes. The gateway
// detects each protocol with GetModelInfo, renders and tokenizes, decodes the ids and answers the
// OpenAI SDK as an HTTP engine would.

// byteTokenizerDir holds the simulator's byte-level tokenizer (ids 0-255 the bytes, no merges, ChatML's
// added tokens and template), the one its --grpc-byte-token-ids engines answer in.
func byteTokenizerDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := sim.WriteByteTokenizer(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func engineGRPCConfig() sim.Config {
	return sim.Config{Mode: sim.ModeInstant, GRPC: true, EngineGRPCOnly: true, ByteTokenIDs: true}
}

func grpcURL(e *sim.Engine) string { return strings.Replace(e.URL(), "http://", "grpc://", 1) }

// engineGRPCArgs registers a cluster's engines at grpc:// URLs, PD when it has prefill engines.
func engineGRPCArgs(c *sim.Cluster, tokenizer string) []string {
	args := []string{"--tokenizer-path", tokenizer}
	if len(c.ByRole(sim.RolePrefill)) == 0 {
		for _, e := range c.Engines {
			args = append(args, "--worker-urls", grpcURL(e))
		}
		return args
	}
	args = append(args, "--pd-disaggregation")
	for _, e := range c.ByRole(sim.RolePrefill) {
		args = append(args, "--prefill", grpcURL(e))
		if p := e.BootstrapPort(); p > 0 {
			args = append(args, itoa(p))
		}
	}
	for _, e := range c.ByRole(sim.RoleDecode) {
		args = append(args, "--decode", grpcURL(e))
	}
	return args
}

func engineGRPCTopologies() []topology {
	cfg := engineGRPCConfig()
	return []topology{
		{name: "sglang", cluster: sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang, Engine: cfg}},
		// Named rather than detected: an explicit --runtime says which engine gRPC grpc:// workers speak.
		{name: "vllm", cluster: sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolVLLM, Engine: cfg},
			args: func(*sim.Cluster) []string { return []string{"--runtime", "vllm"} }},
		// TensorRT-LLM's service serves regular workers only (docs/engines.md: no PD over its gRPC).
		{name: "trtllm", cluster: sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolTRTLLM, Engine: cfg},
			args: func(*sim.Cluster) []string { return []string{"--runtime", "trtllm"} }},
		{name: "pd-sglang", cluster: sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: cfg}, checkKV: noMismatches},
		{name: "pd-vllm", cluster: sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolVLLM, Engine: cfg}, checkKV: func(t *testing.T, c *sim.Cluster) {
			t.Helper()
			for _, e := range c.ByRole(sim.RoleDecode) {
				if st := e.Stats(); st.BootstrapMismatches != 0 || st.RecomputedPrompts != 0 {
					t.Errorf("decode %s: %d mismatched KV pulls, %d prompts recomputed (the KV handoff did not reach it)", e.URL(), st.BootstrapMismatches, st.RecomputedPrompts)
				}
			}
		}},
	}
}

// TestOpenAISDKOverEngineGRPC runs the official OpenAI Go SDK against engines speaking their own gRPC:
// chat and completions, streamed and not, regular and PD, SGLang and vLLM. The streamed answers must
// say what the unary ones said (the simulator is deterministic in a seeded prompt), and the prefill
// leg of a PD request must have run on the prefill engine.
func TestOpenAISDKOverEngineGRPC(t *testing.T) {
	t.Parallel()
	tok := byteTokenizerDir(t)
	for _, tp := range engineGRPCTopologies() {
		t.Run(tp.name, func(t *testing.T) {
			c := startCluster(t, tp.cluster)
			args := engineGRPCArgs(c, tok)
			if tp.args != nil {
				args = append(args, tp.args(c)...)
			}
			gw := startGateway(t, app.Options{}, args...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			ctx := context.Background()
			msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Say hello to " + tp.name)}

			chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(8), Seed: openai.Int(11)})
			if err != nil {
				t.Fatalf("chat: %v", err)
			}
			if len(chat.Choices) != 1 || chat.Choices[0].Message.Content == "" || chat.Choices[0].FinishReason != "length" ||
				chat.Usage.CompletionTokens != 8 || chat.Usage.PromptTokens == 0 {
				t.Fatalf("chat = %+v", chat)
			}

			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(8), Seed: openai.Int(11),
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
			var acc openai.ChatCompletionAccumulator
			chunks := 0
			for stream.Next() {
				acc.AddChunk(stream.Current())
				chunks++
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("chat stream: %v", err)
			}
			// SGLang's gRPC SamplingParams have no seed, so SGLang PD samples differ per bootstrap room, as
			// on the engines: there only the length can be compared.
			seeded := tp.name != "pd-sglang"
			if chunks < 3 || len(acc.Choices) != 1 || (seeded && acc.Choices[0].Message.Content != chat.Choices[0].Message.Content) {
				t.Fatalf("streamed %d chunks, content %q; want the unary content %q", chunks, acc.Choices[0].Message.Content, chat.Choices[0].Message.Content)
			}
			if acc.Choices[0].FinishReason != "length" || acc.Usage.CompletionTokens != chat.Usage.CompletionTokens || acc.Usage.PromptTokens != chat.Usage.PromptTokens {
				t.Errorf("stream finish %q, usage %+v; want length and the unary usage %+v", acc.Choices[0].FinishReason, acc.Usage, chat.Usage)
			}

			params := openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(simModel),
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(6), Seed: openai.Int(11)}
			comp, err := client.Completions.New(ctx, params)
			if err != nil {
				t.Fatalf("completion: %v", err)
			}
			if len(comp.Choices) != 1 || comp.Choices[0].Text == "" || comp.Usage.CompletionTokens != 6 {
				t.Fatalf("completion = %+v", comp)
			}
			cs := client.Completions.NewStreaming(ctx, params)
			var text strings.Builder
			for cs.Next() {
				for _, ch := range cs.Current().Choices {
					text.WriteString(ch.Text)
				}
			}
			if err := cs.Err(); err != nil {
				t.Fatalf("completion stream: %v", err)
			}
			if seeded && text.String() != comp.Choices[0].Text || text.Len() == 0 {
				t.Fatalf("streamed completion %q, unary %q", text.String(), comp.Choices[0].Text)
			}

			checkEngineGRPCLogprobs(t, &client, msgs, len(c.ByRole(sim.RolePrefill)) > 0)
			// TensorRT-LLM's servicer serves no Embed.
			trt := tp.name == "trtllm"
			if !trt && len(c.ByRole(sim.RolePrefill)) == 0 { // PD mode serves no embeddings (dispatch's aux.go), as over HTTP
				emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: simModel,
					Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first", "second"}}})
				if err != nil || len(emb.Data) != 2 || emb.Data[1].Index != 1 || len(emb.Data[0].Embedding) != sim.EmbeddingDim || emb.Usage.PromptTokens == 0 {
					t.Errorf("embeddings over Embed: %v, %+v", err, emb)
				}
			}

			// The gateway tokenized the prompt: the simulator counted the chat's rendered bytes.
			for _, e := range c.Engines {
				if e.Stats().Completed == 0 {
					t.Errorf("engine %s (%s) served nothing", e.URL(), e.Role())
				}
			}
			if tp.checkKV != nil {
				tp.checkKV(t, c)
			}
			// Last: vLLM PD sends n > 1 to a decode alone, which computes its prompt itself.
			checkEngineGRPCSamples(t, &client, msgs, tp.name == "pd-sglang")
		})
	}
}

// checkEngineGRPCLogprobs: chat logprobs with top_logprobs, whole and streamed, one entry per token id
// (the simulator's ids are the text's bytes, so the entries' strings join to the text) with its bytes
// and alternatives; completions' logprobs with echo, the prompt first. A PD decode
// leg computed no prompt, so there echo with logprobs is a 400 naming echo.
func checkEngineGRPCLogprobs(t *testing.T, client *openai.Client, msgs []openai.ChatCompletionMessageParamUnion, pd bool) {
	t.Helper()
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(5), Seed: openai.Int(3),
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2)}
	chat, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatalf("chat with logprobs: %v", err)
	}
	lp := chat.Choices[0].Logprobs.Content
	var joined strings.Builder
	for i, e := range lp {
		joined.WriteString(e.Token)
		if e.Logprob >= 0 || len(e.TopLogprobs) != 2 || e.TopLogprobs[0].Logprob != e.Logprob || string(rune(e.Bytes[0])) != e.Token[:1] {
			t.Errorf("chat logprobs entry %d = %+v", i, e)
		}
	}
	if len(lp) == 0 || joined.String() != chat.Choices[0].Message.Content {
		t.Fatalf("chat logprobs: %d entries joining to %q, content %q", len(lp), joined.String(), chat.Choices[0].Message.Content)
	}
	// Streamed, each chunk has its own tokens' entries (SGLang PD samples differ per room: compare the
	// stream with itself).
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var content, tokens strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			content.WriteString(ch.Delta.Content)
			for _, e := range ch.Logprobs.Content {
				tokens.WriteString(e.Token)
			}
		}
	}
	if err := stream.Err(); err != nil || tokens.Len() == 0 || tokens.String() != content.String() {
		t.Errorf("streamed chat logprobs join to %q (err %v), content %q", tokens.String(), err, content.String())
	}

	const prompt = "Echo me"
	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(simModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)}, MaxTokens: openai.Int(4),
		Logprobs: openai.Int(1), Echo: openai.Bool(true)})
	if pd {
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "echo" {
			t.Errorf("PD completion with echo and logprobs: %v; want a 400 naming echo", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("completion with echo and logprobs: %v", err)
	}
	c := comp.Choices[0]
	// The prompt's first token has no logprob: null in token_logprobs and top_logprobs, as vLLM's (the
	// SDK's typed top_logprobs does not take the null: read the raw JSON).
	if !strings.HasPrefix(c.Text, prompt) || strings.Join(c.Logprobs.Tokens, "") != c.Text ||
		len(c.Logprobs.TokenLogprobs) != len(c.Logprobs.Tokens) || len(c.Logprobs.TextOffset) != len(c.Logprobs.Tokens) ||
		!strings.HasPrefix(c.Logprobs.JSON.TopLogprobs.Raw(), `[null,{"c":`) {
		t.Errorf("completion with echo: text %q, logprobs %+v", c.Text, c.Logprobs)
	}
}

// checkEngineGRPCSamples: n > 1 through the SDK, whole and streamed: one choice per index, each with
// its finish, usage the sum of the samples' tokens.
func checkEngineGRPCSamples(t *testing.T, client *openai.Client, msgs []openai.ChatCompletionMessageParamUnion, sglangPD bool) {
	t.Helper()
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(4), N: openai.Int(3),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(4), N: openai.Int(3)})
	if err != nil {
		t.Fatalf("chat n=3: %v", err)
	}
	if len(chat.Choices) != 3 || chat.Usage.CompletionTokens != 12 {
		t.Fatalf("chat n=3: %d choices, usage %+v; want 3 and 12 completion tokens", len(chat.Choices), chat.Usage)
	}
	for i, c := range chat.Choices {
		if c.Index != int64(i) || c.Message.Content == "" || c.FinishReason != "length" {
			t.Errorf("chat n=3 choice %d: %+v", i, c)
		}
	}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("chat n=3 stream: %v", err)
	}
	if len(acc.Choices) != 3 || acc.Usage.CompletionTokens != 12 || acc.Usage.PromptTokens != chat.Usage.PromptTokens {
		t.Fatalf("chat n=3 stream: %d choices, usage %+v", len(acc.Choices), acc.Usage)
	}
	for i, c := range acc.Choices {
		if c.Message.Content == "" || c.FinishReason != "length" {
			t.Errorf("chat n=3 streamed choice %d: %+v", i, c)
		}
	}
	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(simModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Two ways")}, MaxTokens: openai.Int(3), N: openai.Int(2)})
	if err != nil || len(comp.Choices) != 2 || comp.Choices[1].Index != 1 || comp.Usage.CompletionTokens != 6 {
		t.Errorf("completion n=2: %v, %+v", err, comp)
	}
	// A batch of prompts: one Generate per prompt, choices prompt by prompt (SGLang PD refuses a batch
	// with n > 1, as over HTTP: there n = 1, each prompt its own bootstrap room).
	n := int64(2)
	if sglangPD {
		n = 1
	}
	batch, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(simModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"First prompt", "Second"}}, MaxTokens: openai.Int(3), N: openai.Int(n)})
	if err != nil || len(batch.Choices) != 2*int(n) || batch.Choices[len(batch.Choices)-1].Index != 2*n-1 || batch.Usage.CompletionTokens != 6*n ||
		batch.Usage.PromptTokens != int64(len("First prompt")+len("Second")) {
		t.Errorf("completion batch of 2 prompts, n=2: %v, %+v", err, batch)
	}
}

// TestEngineGRPCCancelledStreamAborts: a client that goes away mid-stream of a PD request is an Abort
// of the decode engine's Generate (it fails without the Abort RPC: checked), and no request is left on
// either engine, for SGLang and vLLM; for TensorRT-LLM (regular workers only) it is an Abort of its one
// engine's Generate.
func TestEngineGRPCCancelledStreamAborts(t *testing.T) {
	t.Parallel()
	tok := byteTokenizerDir(t)
	for _, p := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM, sim.ProtocolTRTLLM} {
		t.Run(string(p), func(t *testing.T) {
			cfg := engineGRPCConfig()
			cfg.Mode = sim.ModeRealistic
			cc := sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: p, Engine: cfg}
			if p == sim.ProtocolTRTLLM {
				cc = sim.ClusterConfig{Regular: 1, Protocol: p, Engine: cfg}
			}
			c := startCluster(t, cc)
			gw := startGateway(t, app.Options{}, engineGRPCArgs(c, tok)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(10000),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("talk for a long time")}})
			for got := 0; got < 3 && stream.Next(); got++ {
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			cancel()
			stream.Close()
			for _, e := range c.Engines {
				waitFor(t, "engine "+e.URL()+" ends the request", 10*time.Second, func() bool { return e.Stats().InFlight == 0 })
			}
			generating := c.ByRole(sim.RoleDecode)
			if p == sim.ProtocolTRTLLM {
				generating = c.ByRole(sim.RoleRegular)
			}
			d := generating[0].Stats()
			if d.Completed != 0 || d.GRPCAborts != 1 {
				t.Errorf("decode engine: %d completed, %d aborted by Abort; want the generation aborted unfinished", d.Completed, d.GRPCAborts)
			}
		})
	}
}

// TestEngineGRPCCancelAbortsBothSGLangLegs: SGLang PD runs both legs at once; a client that goes away
// while the prefill is still computing is an Abort on the prefill engine and on the decode engine
// (waiting for the KV), and neither keeps the request.
func TestEngineGRPCCancelAbortsBothSGLangLegs(t *testing.T) {
	t.Parallel()
	cfg := engineGRPCConfig()
	cfg.Mode = sim.ModeRealistic
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: cfg})
	p, d := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
	// A prefill slowed a thousandfold keeps the prefill leg computing until the client goes away.
	if err := p.SetFaults(sim.Faults{SlownessFactor: 1000}); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, app.Options{}, engineGRPCArgs(c, byteTokenizerDir(t))...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(16),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("a long prompt to prefill ", 200))}})
		for stream.Next() {
		}
		done <- stream.Err()
	}()
	// In flight is not enough: an Abort finds a Generate only once the engine has parsed its request id
	// (CI once cancelled in between, and the prefill's Abort found nothing).
	waitFor(t, "both legs abortable", 10*time.Second, func() bool { return p.Stats().GRPCAbortable == 1 && d.Stats().GRPCAbortable == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled stream ended without an error")
	}
	for _, e := range []*sim.Engine{p, d} {
		waitFor(t, "engine "+e.URL()+" ends the request", 10*time.Second, func() bool { return e.Stats().InFlight == 0 })
		if st := e.Stats(); st.GRPCAborts != 1 || st.Completed != 0 {
			t.Errorf("%s engine: %d aborted by Abort, %d completed; want the request aborted", e.Role(), st.GRPCAborts, st.Completed)
		}
	}
}

// TestEngineGRPCContextLengthExceeded: a prompt longer than the model's context (GetModelInfo's) is the
// gateway's own 400 context_length_exceeded, before any Generate reaches the engine.
func TestEngineGRPCContextLengthExceeded(t *testing.T) {
	t.Parallel()
	tok := byteTokenizerDir(t)
	for _, p := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(string(p), func(t *testing.T) {
			cfg := engineGRPCConfig()
			cfg.ContextLength = 64
			c := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: p, Engine: cfg})
			gw := startGateway(t, app.Options{}, engineGRPCArgs(c, tok)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: simModel,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("too long ", 20))}})
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "context_length_exceeded" ||
				apiErr.Param != "messages" || !strings.Contains(apiErr.Message, "maximum context length is 64") {
				t.Fatalf("long prompt: %v; want the gateway's 400 context_length_exceeded", err)
			}
			if st := c.Engines[0].Stats(); st.Completed != 0 || st.Failed != 0 {
				t.Errorf("engine: %d completed, %d failed; want no request", st.Completed, st.Failed)
			}
		})
	}
}

// TestEngineGRPCTRTLLMPDRefused: TensorRT-LLM engines given as prefill and decode workers (detected,
// not named) stop the gateway's start with the reason: the service returns no context-phase state for a
// decode worker, and the Rust gateway refuses this runtime's PD too (docs/engines.md).
func TestEngineGRPCTRTLLMPDRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolTRTLLM, Engine: engineGRPCConfig()})
	a := newApp(t, testLogger(t), "--port", "0", "--tokenizer-path", byteTokenizerDir(t), "--pd-disaggregation",
		"--prefill", grpcURL(c.Engines[0]), "--decode", grpcURL(c.Engines[1]))
	err := a.Start(context.Background())
	if err == nil {
		_ = a.Shutdown(context.Background())
		t.Fatal("the gateway started with TensorRT-LLM prefill/decode workers")
	}
	if !strings.Contains(err.Error(), "TensorRT-LLM workers serve regular requests only") {
		t.Errorf("start error %v, want the reason TensorRT-LLM PD is refused", err)
	}
}
