package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestMigrationHTTPCompletions: in HTTP mode an OpenAI completions stream to vLLM or SGLang migrates
// (the gateway asks the engine for return_token_ids; a text prompt's ids are the engine's, from the
// first chunk): the decode's connection dies after a few
// tokens, and what the OpenAI SDK reads (text, finish_reason, usage, id) equals an uninterrupted
// run's, with no error and one migration counted. The ids the gateway asked for reach the client only
// when it asked for them itself; then they equal the uninterrupted run's. PD and regular workers;
// echo (the prompt echoed back cannot be carried) breaks as before.
func TestMigrationHTTPCompletions(t *testing.T) {
	t.Parallel()
	t.Run("pd", func(t *testing.T) {
		t.Parallel()
		for _, ask := range []bool{false, true} {
			c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Protocol: sim.ProtocolVLLM, Engine: sim.Config{Seed: 5}})
			gw := pdMode{name: "http-vllm", protocol: sim.ProtocolVLLM}.startGateway(t, c)
			completionMigrates(t, gw, c.ByRole(sim.RoleDecode), tokenPrompt, ask)
			released(t, gw)
		}
	})
	t.Run("regular", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolVLLM, Engine: sim.Config{Seed: 5}})
		var args []string
		for _, e := range c.Engines {
			args = append(args, "--worker-urls", e.URL())
		}
		gw := startGateway(t, app.Options{}, args...)
		waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
		completionMigrates(t, gw, c.Engines, tokenPrompt, false)
	})
	t.Run("text-prompt", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Protocol: sim.ProtocolVLLM, Engine: sim.Config{Seed: 5}})
		gw := pdMode{name: "http-vllm", protocol: sim.ProtocolVLLM}.startGateway(t, c)
		completionMigrates(t, gw, c.ByRole(sim.RoleDecode), openai.CompletionNewParamsPromptUnion{OfString: openai.String("a text prompt")}, false)
		released(t, gw)
	})
	t.Run("pd-sglang", func(t *testing.T) { // SGLang's completions take return_token_ids too
		t.Parallel()
		m := pdModes()[0] // http-sglang
		for _, prompt := range []openai.CompletionNewParamsPromptUnion{tokenPrompt, {OfString: openai.String("an sglang text prompt")}} {
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
			gw := m.startGateway(t, c)
			completionMigrates(t, gw, c.ByRole(sim.RoleDecode), prompt, true)
			released(t, gw)
		}
	})
	t.Run("echo-is-not-continued", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Protocol: sim.ProtocolVLLM, Engine: sim.Config{Seed: 5}})
		gw := pdMode{name: "http-vllm", protocol: sim.ProtocolVLLM}.startGateway(t, c)
		for _, d := range c.ByRole(sim.RoleDecode) {
			if err := d.SetFaults(sim.Faults{DieAfterTokens: 4}); err != nil {
				t.Fatal(err)
			}
		}
		got := streamCompletion(t, gw, tokenPrompt, false, 9, option.WithJSONSet("echo", true))
		if got.err == nil {
			t.Fatalf("a broken echo stream ended cleanly (the echoed prompt cannot be carried): %+v", got)
		}
		if n := migrationCount(t, gw, "migrated"); n != 0 {
			t.Errorf("%v migrations of an echo stream", n)
		}
		released(t, gw)
	})
}

// tokenPrompt is the migration tests' token-id completions prompt.
var tokenPrompt = openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{31, 32, 33, 34, 35}}

// completionRead is what the OpenAI SDK read of a streamed completion.
type completionRead struct {
	id, text, finish string
	usage            [3]int64 // prompt, completion, total
	ids              []uint32 // every chunk's token_ids
	idFields         int      // chunks carrying token_ids or prompt_token_ids
	promptIDs        []uint32 // the first chunk's prompt_token_ids
	err              error
}

func streamCompletion(t *testing.T, gw *gateway, prompt openai.CompletionNewParamsPromptUnion, ask bool, maxTokens int64, opts ...option.RequestOption) completionRead {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	if ask {
		opts = append(opts, option.WithJSONSet("return_token_ids", true))
	}
	s := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(simModel),
		Prompt: prompt, MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}, opts...)
	defer s.Close()
	var r completionRead
	for s.Next() {
		ch := s.Current()
		if r.id == "" {
			r.id = ch.ID
		} else if ch.ID != r.id {
			t.Errorf("chunk id %q after %q: one stream has one id", ch.ID, r.id)
		}
		if u := ch.Usage; u.TotalTokens > 0 {
			r.usage = [3]int64{u.PromptTokens, u.CompletionTokens, u.TotalTokens}
		}
		var raw struct {
			Choices []struct {
				TokenIDs       []uint32 `json:"token_ids"`
				PromptTokenIDs []uint32 `json:"prompt_token_ids"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ch.RawJSON()), &raw); err != nil {
			t.Fatalf("chunk %s: %v", ch.RawJSON(), err)
		}
		for _, c := range raw.Choices {
			if c.TokenIDs != nil || c.PromptTokenIDs != nil {
				r.idFields++
			}
			if r.promptIDs == nil {
				r.promptIDs = c.PromptTokenIDs
			}
			r.ids = append(r.ids, c.TokenIDs...)
		}
		for _, c := range ch.Choices {
			r.text += c.Text
			if c.FinishReason != "" {
				r.finish = string(c.FinishReason)
			}
		}
	}
	r.err = s.Err()
	return r
}

// completionMigrates streams prompt (9 tokens) once uninterrupted, then with every engine of dying
// dying after 5 tokens: the migrated stream must read as the uninterrupted one.
func completionMigrates(t *testing.T, gw *gateway, dying []*sim.Engine, prompt openai.CompletionNewParamsPromptUnion, ask bool) {
	t.Helper()
	for _, e := range dying {
		if err := e.SetFaults(sim.Faults{}); err != nil {
			t.Fatal(err)
		}
	}
	want := streamCompletion(t, gw, prompt, ask, 9)
	if want.err != nil || want.text == "" || want.finish != "length" || want.usage[1] != 9 {
		t.Fatalf("uninterrupted run: %+v", want)
	}
	before := migrationCount(t, gw, "migrated")
	for _, e := range dying {
		if err := e.SetFaults(sim.Faults{DieAfterTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	got := streamCompletion(t, gw, prompt, ask, 9)
	if got.err != nil || got.text != want.text || got.finish != want.finish || got.usage != want.usage {
		t.Fatalf("migrated stream %+v\nuninterrupted    %+v", got, want)
	}
	if n := migrationCount(t, gw, "migrated") - before; n != 1 {
		t.Errorf("sluice_migrations_total{outcome=migrated} grew by %v, want 1", n)
	}
	if !ask {
		if got.idFields != 0 || want.idFields != 0 {
			t.Errorf("token ids reached a client that did not ask for them: %d and %d chunks", got.idFields, want.idFields)
		}
		return
	}
	if len(want.ids) != 9 || !slices.Equal(got.ids, want.ids) || !slices.Equal(got.promptIDs, want.promptIDs) || len(want.promptIDs) == 0 {
		t.Errorf("token_ids %v prompt_token_ids %v, want %v and the prompt", got.ids, got.promptIDs, want.ids)
	}
}
