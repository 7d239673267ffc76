package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestMigrationHTTPChat: in HTTP mode an OpenAI chat stream to vLLM migrates (the gateway asks the
// engine for return_token_ids, takes the rendered prompt's ids from the first chunk, and goes on
// with a completion of prompt + generated ids whose chunks it rewrites as chat chunks): the decode's
// connection dies after a few tokens, and what the OpenAI SDK reads (content, finish_reason, usage,
// id, one role) equals an uninterrupted run's, with no error and one migration counted. The ids reach
// the client only when it asked for them. PD and regular workers; a chat with tools (the engine's
// tool parser cannot be carried) breaks as before.
func TestMigrationHTTPChat(t *testing.T) {
	t.Parallel()
	t.Run("pd", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Protocol: sim.ProtocolVLLM, Engine: sim.Config{Seed: 5}})
		gw := pdMode{name: "http-vllm", protocol: sim.ProtocolVLLM}.startGateway(t, c)
		for _, ask := range []bool{false, true} {
			chatMigrates(t, gw, c.ByRole(sim.RoleDecode), ask)
		}
		released(t, gw)
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
		chatMigrates(t, gw, c.Engines, false)
		released(t, gw)
	})
	// A chat that breaks before its first token (the decode engine dies after its 200) starts again on
	// the other decode as the client sent it: the answer equals an uninterrupted run's. Round robin
	// sends the stream to the decode the warm-up did not use, which has the fault.
	t.Run("restart-before-the-first-token", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Protocol: sim.ProtocolVLLM, Engine: sim.Config{Seed: 5}})
		gw := pdMode{name: "http-vllm", protocol: sim.ProtocolVLLM}.startGateway(t, c, "--decode-policy", "round_robin")
		want := streamChatRead(t, gw, false, 9)
		if want.err != nil || want.finish != "length" {
			t.Fatalf("uninterrupted run: %+v", want)
		}
		var next *sim.Engine
		for _, d := range c.ByRole(sim.RoleDecode) {
			if d.Stats().RequestsSeen == 0 {
				next = d
			}
		}
		if next == nil {
			t.Fatal("the warm-up used both decodes")
		}
		if err := next.SetFaults(sim.Faults{DieBeforeFirstToken: true}); err != nil {
			t.Fatal(err)
		}
		got := streamChatRead(t, gw, false, 9)
		if got.err != nil || got.content != want.content || got.finish != want.finish || got.usage != want.usage || got.roles != 1 || got.id == "" {
			t.Fatalf("restarted stream %+v\nuninterrupted     %+v", got, want)
		}
		if f := next.Stats().Failed; f != 1 {
			t.Errorf("the faulty decode failed %d streams, want 1: the stream did not break there", f)
		}
		if n := migrationCount(t, gw, "migrated"); n != 1 {
			t.Errorf("sluice_migrations_total{outcome=migrated} = %v, want 1", n)
		}
		released(t, gw)
	})
	t.Run("tools-are-not-continued", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Protocol: sim.ProtocolVLLM, Engine: sim.Config{Seed: 5}})
		gw := pdMode{name: "http-vllm", protocol: sim.ProtocolVLLM}.startGateway(t, c)
		tools := option.WithJSONSet("tools", []map[string]any{{"type": "function",
			"function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object"}}}})
		if whole := streamChatRead(t, gw, false, 9, tools); whole.err != nil || whole.finish == "" {
			t.Fatalf("uninterrupted run with tools: %+v", whole)
		}
		for _, d := range c.ByRole(sim.RoleDecode) {
			if err := d.SetFaults(sim.Faults{DieAfterTokens: 4}); err != nil {
				t.Fatal(err)
			}
		}
		got := streamChatRead(t, gw, false, 9, tools)
		if got.err == nil {
			t.Fatalf("a broken chat stream with tools ended cleanly (the engine's tool parser cannot be carried): %+v", got)
		}
		if n := migrationCount(t, gw, "migrated"); n != 0 {
			t.Errorf("%v migrations of a chat with tools", n)
		}
		released(t, gw)
	})
}

// chatIDsRead is what the OpenAI SDK read of a streamed chat.
type chatIDsRead struct {
	id, content, finish string
	roles               int
	usage               [3]int64 // prompt, completion, total
	ids                 []uint32 // every chunk's token_ids
	idFields            int      // chunks carrying token_ids or prompt_token_ids
	promptIDs           []uint32 // the first chunk's prompt_token_ids
	err                 error
}

func streamChatRead(t *testing.T, gw *gateway, ask bool, maxTokens int64, opts ...option.RequestOption) chatIDsRead {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	if ask {
		opts = append(opts, option.WithJSONSet("return_token_ids", true))
	}
	s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("carry this chat over a dead engine")},
		MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}, opts...)
	defer s.Close()
	var r chatIDsRead
	for s.Next() {
		ch := s.Current()
		if r.id == "" {
			r.id = ch.ID
		} else if ch.ID != r.id {
			t.Errorf("chunk id %q after %q: one stream has one id", ch.ID, r.id)
		}
		if ch.Object != "chat.completion.chunk" {
			t.Errorf("chunk object %q", ch.Object)
		}
		if u := ch.Usage; u.TotalTokens > 0 {
			r.usage = [3]int64{u.PromptTokens, u.CompletionTokens, u.TotalTokens}
		}
		var raw struct {
			PromptTokenIDs []uint32 `json:"prompt_token_ids"`
			Choices        []struct {
				TokenIDs []uint32 `json:"token_ids"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ch.RawJSON()), &raw); err != nil {
			t.Fatalf("chunk %s: %v", ch.RawJSON(), err)
		}
		if raw.PromptTokenIDs != nil {
			r.idFields++
			if r.promptIDs == nil {
				r.promptIDs = raw.PromptTokenIDs
			}
		}
		for _, c := range raw.Choices {
			if c.TokenIDs != nil {
				r.idFields++
			}
			r.ids = append(r.ids, c.TokenIDs...)
		}
		for _, c := range ch.Choices {
			r.content += c.Delta.Content
			if c.Delta.Role != "" {
				r.roles++
			}
			if c.FinishReason != "" {
				r.finish = c.FinishReason
			}
		}
	}
	r.err = s.Err()
	return r
}

// chatMigrates streams a chat (9 tokens) once uninterrupted, then with every engine of dying dying
// after 5 tokens: the migrated stream must read as the uninterrupted one.
func chatMigrates(t *testing.T, gw *gateway, dying []*sim.Engine, ask bool) {
	t.Helper()
	for _, e := range dying {
		if err := e.SetFaults(sim.Faults{}); err != nil {
			t.Fatal(err)
		}
	}
	want := streamChatRead(t, gw, ask, 9)
	if want.err != nil || want.content == "" || want.finish != "length" || want.usage[1] != 9 || want.roles != 1 {
		t.Fatalf("uninterrupted run: %+v", want)
	}
	before := migrationCount(t, gw, "migrated")
	for _, e := range dying {
		if err := e.SetFaults(sim.Faults{DieAfterTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	got := streamChatRead(t, gw, ask, 9)
	if got.err != nil || got.content != want.content || got.finish != want.finish || got.usage != want.usage || got.roles != 1 {
		t.Fatalf("migrated stream %+v\nuninterrupted    %+v", got, want)
	}
	if strings.Count(got.content, " ") != 9 {
		t.Errorf("content %q: want 9 words", got.content)
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
		t.Errorf("token_ids %v prompt_token_ids %v, want %v and %v", got.ids, got.promptIDs, want.ids, want.promptIDs)
	}
}
