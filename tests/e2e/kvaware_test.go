package e2e

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/internal/worker"
	"github.com/sluicegw/sluice/tests/testenv/eventsim"
)

// startEventSim starts a simulated vLLM engine publishing its KV-cache events, on free ports; it is
// closed when the test ends.
func startEventSim(t *testing.T) *sim.Engine {
	t.Helper()
	return eventsim.Start(t, eventsim.Config{Logger: testLogger(t)})
}

func kvSpec(e *sim.Engine) string {
	ep := e.KVEventsEndpoints()[0]
	return ep.Publisher + "?replay=" + ep.Replay
}

// TestKVAwareRoutesByEngineEvents: a gateway with --policy kv_aware over three simulated engines
// publishing KV-cache events, driven by openai-go with token-id prompts (no tokenizer needed): a
// prompt whose prefix one engine holds goes to that engine, whichever engine the gateway would
// otherwise pick; after that engine restarts (an empty cache), the index forgets it and follows
// what the engines cache next.
func TestKVAwareRoutesByEngineEvents(t *testing.T) {
	engines := []*sim.Engine{startEventSim(t), startEventSim(t), startEventSim(t)}
	args := []string{"--policy", "kv_aware", "--cache-threshold", "0.3"}
	for _, e := range engines {
		args = append(args, "--worker-urls", e.URL())
	}
	for _, e := range engines {
		args = append(args, "--kv-events-endpoint", e.URL()+"="+kvSpec(e))
	}
	gw := startGateway(t, app.Options{Logger: testLogger(t)}, args...)
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := t.Context()

	// complete sends ids as the prompt (pinned to a worker index when target >= 0) and returns the
	// worker that served it.
	complete := func(ids []int64, target int) string {
		t.Helper()
		opts := []option.RequestOption{}
		if target >= 0 {
			opts = append(opts, option.WithHeader(dispatch.HeaderTargetWorker, strconv.Itoa(target)))
		}
		var resp *http.Response
		opts = append(opts, option.WithResponseInto(&resp))
		_, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(simModel),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids},
			MaxTokens: openai.Int(1),
		}, opts...)
		if err != nil {
			t.Fatalf("completion: %v", err)
		}
		return resp.Header.Get(dispatch.HeaderWorker)
	}
	indexed := func(url string) float64 {
		return scrape(t, gw.URL, "sluice_kv_index_blocks")["rank=0,worker="+url]
	}
	// The candidate order is by URL; target i is byURL[i].
	byURL := gw.App.Registry.Snapshot().Candidates(worker.RoleRegular, simModel)
	if len(byURL) != 3 {
		t.Fatalf("%d candidates, want 3", len(byURL))
	}

	// ZeroMQ PUB drops what it sends before a subscriber has joined: warm each engine with one-block
	// prompts until its events are seen.
	for i, w := range byURL {
		for n := int64(0); indexed(w.URL()) == 0; n++ {
			if n > 200 {
				t.Fatalf("no events indexed for %s", w.URL())
			}
			complete([]int64{9000 + int64(i)*1000 + n, 1, 1, 1}, i)
			waitBriefly(func() bool { return indexed(w.URL()) > 0 })
		}
	}

	prompt := func(base int64, n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = base + int64(i)
		}
		return out
	}
	// Each conversation's first turn is pinned to one engine; its next turns (the same prefix and
	// more) must follow it there, by that engine's events alone: token-id prompts carry no text for
	// cache_aware to guess with.
	for i, w := range byURL {
		first := prompt(int64(100+i)*100, 32)
		before := indexed(w.URL())
		if got := complete(first, i); got != w.URL() {
			t.Fatalf("pinned turn went to %s, want %s", got, w.URL())
		}
		waitFor(t, "first turn indexed on "+w.URL(), 10*time.Second, func() bool { return indexed(w.URL()) >= before+8 })
		for turn := range 3 {
			next := append(append([]int64{}, first...), prompt(int64(50000+turn), 8)...)
			if got := complete(next, -1); got != w.URL() {
				t.Errorf("conversation %d turn %d went to %s, want %s (the engine holding its prefix)", i, turn, got, w.URL())
			}
		}
	}

	// Restart the last engine on the same ports: a new process with an empty cache. The gateway's
	// subscriber redials it at once and, asking its replay socket, sees a new process: it clears that
	// engine's index before the engine has published anything, so the first routing decision after
	// the restart already sees the cleared index.
	last := engines[2]
	lastURL := last.URL()
	restarted := eventsim.Restart(t, last, eventsim.Config{Logger: testLogger(t)})
	// The gateway goes before the engines, so no subscriber redials an engine closed at cleanup.
	t.Cleanup(func() { _ = gw.Shutdown(context.Background()) })
	if restarted.URL() != lastURL {
		t.Fatalf("restarted at %s, want %s", restarted.URL(), lastURL)
	}
	target := -1
	for i, w := range byURL {
		if w.URL() == lastURL {
			target = i
		}
	}
	waitFor(t, "the restarted engine's index cleared", 10*time.Second, func() bool { return indexed(lastURL) == 0 })
	if n, st := restarted.KVEventsBatches(0), restarted.Stats(); n != 0 || st.Completed != 0 {
		t.Fatalf("index cleared only after the new engine published %d batches and served %d requests, want 0 and 0", n, st.Completed)
	}
	complete(prompt(700000, 4), target)
	waitFor(t, "the restarted engine's new blocks indexed", 10*time.Second, func() bool { return indexed(lastURL) == 1 })
	// The conversation that lived there now goes elsewhere (no engine holds it), then sticks to
	// wherever it was prefilled again.
	conv := append(prompt(int64(100+target)*100, 32), prompt(60000, 8)...)
	moved := complete(conv, -1)
	waitFor(t, "the moved conversation indexed on "+moved, 10*time.Second, func() bool { return indexed(moved) > 0 })
	for turn := range 3 {
		next := append(append([]int64{}, conv...), prompt(int64(61000+turn*10), 8)...)
		if got := complete(next, -1); got != moved {
			t.Errorf("after the restart, turn %d went to %s, want %s (where it was prefilled again)", turn, got, moved)
		}
	}
}

// waitBriefly polls cond for a short while (an event round trip on loopback); false when it never held.
func waitBriefly(cond func() bool) bool {
	return poll.Wait(300*time.Millisecond, cond)
}
