// Package overhead benchmarks the gateway's own cost: the same requests sent straight to an instant-mode
// simulator and through sluice (regular and PD mode, JSON and SSE), measured in the same run so the
// figures are ratios against a baseline, not absolute timings. Run with
//
//	go test -run '^$' -bench . -benchtime 3s ./tests/overhead/
package overhead

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/bench/baseline"
	"github.com/sluicegw/sluice/internal/benchcpu"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/sim"
)

const (
	chatBody   = `{"model":"sim-model","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write one short sentence about rivers."}],"max_tokens":8}`
	streamBody = `{"model":"sim-model","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write one short sentence about rivers."}],"max_tokens":8,"stream":true}`
)

func startCluster(b *testing.B, cc sim.ClusterConfig) *sim.Cluster {
	cc.Mode = sim.ModeInstant
	c, err := sim.StartCluster(context.Background(), cc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func startGateway(b *testing.B, args ...string) string {
	cfg, err := config.Parse(append([]string{"--host", "127.0.0.1", "--port", "0", "--disable-health-check"}, args...), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, app.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	return "http://" + a.Addr()
}

func client() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024}}
}

// run sends requests from b.RunParallel goroutines and fails on any non-200.
func run(b *testing.B, url, body string) {
	c := client()
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	defer benchcpu.Start(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

// framesBody asks the frame server for 16 tokens streamed back to back: they arrive together.
const framesBody = `{"model":"sim-model","messages":[{"role":"user","content":"Write one short sentence about rivers."}],"max_tokens":16,"stream":true}`

// startFrames serves baseline.Frames, the instant engine whose streamed tokens arrive together.
func startFrames(b *testing.B) string {
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- baseline.Serve(ctx, "127.0.0.1:0", &baseline.Frames{}, func(a string) { addr <- a }) }()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		b.Fatal(err)
	}
	return ""
}

func BenchmarkOverhead(b *testing.B) {
	b.Run("direct/frames16", func(b *testing.B) {
		run(b, startFrames(b)+"/v1/chat/completions", framesBody)
	})
	b.Run("regular/frames16", func(b *testing.B) {
		gw := startGateway(b, "--worker-urls", startFrames(b), "--policy", "round_robin")
		run(b, gw+"/v1/chat/completions", framesBody)
	})
	for _, stream := range []bool{false, true} {
		body, kind := chatBody, "json"
		if stream {
			body, kind = streamBody, "sse"
		}
		b.Run("direct/"+kind, func(b *testing.B) {
			c := startCluster(b, sim.ClusterConfig{Regular: 1})
			run(b, c.Engines[0].URL()+"/v1/chat/completions", body)
		})
		b.Run("regular/"+kind, func(b *testing.B) {
			c := startCluster(b, sim.ClusterConfig{Regular: 1})
			gw := startGateway(b, "--worker-urls", c.Engines[0].URL(), "--policy", "round_robin")
			run(b, gw+"/v1/chat/completions", body)
		})
		b.Run("pd/"+kind, func(b *testing.B) {
			c := startCluster(b, sim.ClusterConfig{Prefill: 1, Decode: 1})
			p, d := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
			gw := startGateway(b, "--pd-disaggregation", "--policy", "round_robin",
				"--prefill-max-inflight-requests-per-worker", "256",
				"--prefill", p.URL(), strconv.Itoa(p.BootstrapPort()), "--decode", d.URL())
			run(b, gw+"/v1/chat/completions", body)
		})
	}
}
