package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
)

// TestClientCancelAbortsUpstream: a client that goes away, while the engine has not answered yet or
// in the middle of a stream, ends the gateway's request to the engine (the engine sees its request's
// connection close), and frames reach the client as the engine flushes them: the first arrives while
// the engine still holds the stream open. The engine is a plain http:// server, which the gateway
// reaches through its own HTTP/1.1 transport.
func TestClientCancelAbortsUpstream(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"before the answer", "mid-stream"} {
		t.Run(stage, func(t *testing.T) {
			arrived := make(chan struct{})
			gone := make(chan struct{})
			release := make(chan struct{})
			var chats atomic.Int64
			engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/chat/completions" {
					http.NotFound(w, r) // the gateway's probes of the engine
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				if chats.Add(1) > 1 {
					t.Error("the engine received the request twice")
					return
				}
				if stage == "mid-stream" {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"`+simModel+
						`","choices":[{"index":0,"delta":{"role":"assistant","content":"first"},"finish_reason":null}]}`+"\n\n")
					w.(http.Flusher).Flush()
				}
				close(arrived)
				select {
				case <-r.Context().Done(): // held until the gateway lets go
					close(gone)
				case <-release: // the test is over (and failed)
				}
			}))
			defer engine.Close()
			defer close(release)
			gw := startGateway(t, app.Options{}, "--worker-urls", engine.URL, "--model-id", simModel, "--disable-health-check")
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			params := openai.ChatCompletionNewParams{Model: simModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
			if stage == "mid-stream" {
				stream := client.Chat.Completions.NewStreaming(ctx, params)
				if !stream.Next() {
					t.Fatalf("no first frame: %v", stream.Err())
				}
				if got := stream.Current().Choices[0].Delta.Content; got != "first" {
					t.Fatalf("first frame content %q", got)
				}
				cancel()
				_ = stream.Close()
			} else {
				errc := make(chan error, 1)
				go func() {
					_, err := client.Chat.Completions.New(ctx, params)
					errc <- err
				}()
				<-arrived
				cancel()
				if err := <-errc; err == nil {
					t.Fatal("a cancelled request succeeded")
				}
			}
			select {
			case <-gone:
			case <-time.After(15 * time.Second):
				t.Fatal("the engine's request outlived the client that left")
			}
		})
	}
}
