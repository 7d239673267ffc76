package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestGracefulShutdown: on shutdown the gateway stops accepting new connections but lets a streaming
// request that is already in flight finish.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 1}) // realistic: ~6 ms per token
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL())
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })

	resp, err := post(context.Background(), gw.URL+"/v1/chat/completions",
		`{"model":"sim-model","messages":[{"role":"user","content":"slow"}],"max_tokens":150,"ignore_eos":true,"stream":true}`)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	first := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: " {
		t.Fatalf("first bytes %q, %v", first, err)
	}

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- gw.Shutdown(ctx)
	}()
	waitFor(t, "listener closed", 5*time.Second, func() bool {
		r, err := http.Get(gw.URL + "/health")
		if err == nil {
			r.Body.Close()
		}
		return err != nil
	})

	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("in-flight stream broken by shutdown: %v", err)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(rest)), "data: [DONE]") {
		t.Fatalf("in-flight stream did not finish: ...%q", tail(string(rest), 80))
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
