package tokenizer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/internal/worker"
)

// TestKVAwareRoutesChatsByTheirTokens: with --policy kv_aware and Qwen3's tokenizer, the gateway
// renders a chat with the model's template and tokenizes it as /tokenize does, and matches those
// exact ids against the engines' KV-cache events. Each engine is first given, as a token-id prompt,
// the ids /tokenize returns for one chat; that chat, sent as a chat by openai-go, must then go to
// that engine. (The simulated engines tokenize chats their own way, so the events of the chat
// requests themselves never match: only the token-id prompts' do.)
func TestKVAwareRoutesChatsByTheirTokens(t *testing.T) {
	requireQwen3(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	var engines []*sim.Engine
	for range 3 {
		e, err := sim.New(sim.Config{Protocol: sim.ProtocolVLLM, BlockSize: 4, PrefillTokensPerSec: 1e7,
			ITLBase: time.Microsecond, ITLPerSeq: time.Nanosecond, KVEvents: sim.KVEventsConfig{Enabled: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines = append(engines, e)
	}
	model := engines[0].Config().Models[0]
	args := []string{"--host", "127.0.0.1", "--port", "0", "--shutdown-grace-period-secs", "5", "--disable-health-check",
		"--policy", "kv_aware", "--tokenizer-path", model + "=" + qwen3Dir}
	for _, e := range engines {
		ep := e.KVEventsEndpoints()[0]
		args = append(args, "--worker-urls", e.URL(), "--kv-events-endpoint", e.URL()+"="+ep.Publisher+"?replay="+ep.Replay)
	}
	cfg, err := config.Parse(args, io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.New(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { // before the engines close (cleanups run last first)
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		if err := a.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	base := "http://" + a.Addr()
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	blocks := func(url string) float64 {
		mfs, err := a.Prom.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "sluice_kv_index_blocks" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "worker" && l.GetValue() == url {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return 0
	}
	// pinned sends ids as a completion prompt to candidate i and waits for its events.
	pinned := func(ids []int64, i int, url string) bool {
		t.Helper()
		before := blocks(url)
		_, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model: openai.CompletionNewParamsModel(model), Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids},
			MaxTokens: openai.Int(1),
		}, option.WithHeader(dispatch.HeaderTargetWorker, strconv.Itoa(i)))
		if err != nil {
			t.Fatalf("pinned completion: %v", err)
		}
		return poll.Wait(300*time.Millisecond, func() bool { return blocks(url) > before })
	}
	cands := a.Registry.Snapshot().Candidates(worker.RoleRegular, model)
	if len(cands) != 3 {
		t.Fatalf("%d candidates, want 3", len(cands))
	}
	// ZeroMQ PUB drops what it sends before the subscriber has joined: warm up until seen.
	for i, w := range cands {
		for n := int64(0); !pinned([]int64{100000 + int64(i)*1000 + n, 1, 1, 1}, i, w.URL()); n++ {
			if n > 200 {
				t.Fatalf("no events indexed for %s", w.URL())
			}
		}
	}

	for i, w := range cands {
		messages := []any{
			map[string]any{"role": "system", "content": "You are a careful assistant who answers in French."},
			map[string]any{"role": "user", "content": fmt.Sprintf("Conversation %d: summarise the plot of a novel about lighthouse keeper number %d.", i, i*7)},
		}
		status, tok := post(t, base+"/v1/tokenize", map[string]any{"model": model, "messages": messages})
		if status != http.StatusOK || tok.Count < 16 {
			t.Fatalf("tokenize: %d %+v", status, tok)
		}
		ids := make([]int64, len(tok.Tokens))
		for j, id := range tok.Tokens {
			ids[j] = int64(id)
		}
		if !pinned(ids, i, w.URL()) {
			t.Fatalf("the chat's tokens were not indexed on %s", w.URL())
		}
		var resp *http.Response
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: model, MaxTokens: openai.Int(1),
			Messages: []openai.ChatCompletionMessageParamUnion{
				openai.SystemMessage(messages[0].(map[string]any)["content"].(string)),
				openai.UserMessage(messages[1].(map[string]any)["content"].(string)),
			},
		}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		if got := resp.Header.Get(dispatch.HeaderWorker); got != w.URL() {
			t.Errorf("chat %d went to %s, want %s (the engine holding its tokens)", i, got, w.URL())
		}
	}
}
