package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestSessionAffinity: with --session-header, two agent sessions talking through the official Go
// SDK each stay on one worker under cache_aware, though every turn's text is new (nothing in the
// prefix tree ties a turn to the last), and the two land on different workers. The same turns
// without the header spread over the workers, which is what the header changes.
func TestSessionAffinity(t *testing.T) {
	c := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolSGLang})
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL()+","+c.Engines[1].URL(),
		"--policy", "cache_aware", "--session-header", "X-Session-Id", "--disable-retries")
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	// run sends each session two turns in a row, sessions taking turns, and returns the workers each
	// session's turns went to.
	run := func(header bool, salt string) map[string]map[string]int {
		used := map[string]map[string]int{"agent-a": {}, "agent-b": {}}
		for round := range 4 {
			for _, s := range []string{"agent-a", "agent-b"} {
				for turn := range 2 {
					// A fresh text each turn, unlike any before it from its first byte on.
					text := fmt.Sprintf("%x", sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d/%d", salt, s, round, turn)))
					opts := []option.RequestOption{}
					if header {
						opts = append(opts, option.WithHeader("X-Session-Id", s))
					}
					var resp *http.Response
					opts = append(opts, option.WithResponseInto(&resp))
					_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
						Model: simModel, MaxTokens: openai.Int(1),
						Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}, opts...)
					if err != nil {
						t.Fatalf("%s round %d turn %d: %v", s, round, turn, err)
					}
					w := resp.Header.Get(dispatch.HeaderWorker)
					if w == "" {
						t.Fatalf("no %s header", dispatch.HeaderWorker)
					}
					used[s][w]++
				}
			}
		}
		return used
	}

	with := run(true, "with")
	if len(with["agent-a"]) != 1 || len(with["agent-b"]) != 1 {
		t.Fatalf("with the session header, workers per session = %v, want one each", with)
	}
	for wa := range with["agent-a"] {
		if _, same := with["agent-b"][wa]; same {
			t.Errorf("both sessions on %s: cache_aware should have placed the second on the emptier worker", wa)
		}
	}
	without := run(false, "without")
	if len(without["agent-a"]) == 1 && len(without["agent-b"]) == 1 {
		t.Fatalf("without the header the sessions stuck anyway (%v): the header is not what the test shows", without)
	}
}
