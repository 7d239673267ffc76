package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// unaryRT answers after delay (simulated time under synctest) unless gate is non-nil, in which case
// it waits for gate to close.
func unaryRT(delay time.Duration, gate <-chan struct{}, seen *atomic.Int64) rtFunc {
	return func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		seen.Add(1)
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
		time.Sleep(delay)
		body := `{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":2}}`
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
}

func baseConfig() Config {
	return Config{URL: "http://sim", Model: "m", Seed: 9, Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: 4, MaxTokens: 2}}
}

// TestOpenLoopFollowsSchedule: arrivals are exactly the Poisson schedule's, whatever the response
// time (responses slower than the mean gap do not slow the schedule), and the warmup is excluded.
func TestOpenLoopFollowsSchedule(t *testing.T) {
	for _, delay := range []time.Duration{0, 500 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var seen atomic.Int64
				cfg := baseConfig()
				cfg.Rate, cfg.Duration, cfg.Warmup = 50, 2*time.Second, time.Second
				res, err := Run(context.Background(), cfg, Options{Client: &http.Client{Transport: unaryRT(delay, nil, &seen)}})
				if err != nil {
					t.Fatal(err)
				}
				// The same schedule, computed independently.
				p := NewPoisson(cfg.Rate, cfg.Seed)
				var total, measured int
				var starts []float64
				for {
					at := p.Next()
					if at >= cfg.Warmup+cfg.Duration {
						break
					}
					total++
					if at >= cfg.Warmup {
						measured++
						starts = append(starts, ms(at-cfg.Warmup))
					}
				}
				if int(seen.Load()) != total || int(res.TotalSent) != total {
					t.Fatalf("server saw %d, run sent %d, schedule has %d arrivals", seen.Load(), res.TotalSent, total)
				}
				if len(res.Records) != measured || res.Summary.Requests != measured || res.Summary.Succeeded != measured {
					t.Fatalf("%d records, summary %+v; want %d measured", len(res.Records), res.Summary, measured)
				}
				got := make(map[float64]bool)
				for _, r := range res.Records {
					got[r.StartMS] = true
					if r.OutputTokens != 2 {
						t.Fatalf("output tokens %d, want 2", r.OutputTokens)
					}
				}
				for _, s := range starts {
					if !got[s] {
						t.Fatalf("no request started at %v ms (scheduled)", s)
					}
				}
			})
		})
	}
}

func TestOpenLoopDropsBeyondMaxInflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen atomic.Int64
		gate := make(chan struct{})
		cfg := baseConfig()
		cfg.Rate, cfg.Requests, cfg.MaxInflight = 1000, 20, 3
		var res *Result
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, err = Run(context.Background(), cfg, Options{Client: &http.Client{Transport: unaryRT(0, gate, &seen)}})
		}()
		time.Sleep(time.Second) // simulated: every arrival is issued or dropped by then
		synctest.Wait()         // 3 requests held at the gate, Run waiting for them
		if seen.Load() != 3 {
			t.Fatalf("%d requests reached the server, want 3", seen.Load())
		}
		close(gate)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		s := res.Summary
		if s.Requests != 20 || s.Sent != 3 || s.Dropped != 17 || s.Succeeded != 3 || s.ErrorsByCode[CodeDropped] != 17 {
			t.Fatalf("summary %+v", s)
		}
		if want := 3.0 / 20; s.Goodput != want {
			t.Fatalf("goodput %v, want %v", s.Goodput, want)
		}
	})
}

func TestClosedLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen atomic.Int64
		cfg := baseConfig()
		cfg.Concurrency, cfg.Requests = 4, 40
		var progress bytes.Buffer
		res, err := Run(context.Background(), cfg, Options{Client: &http.Client{Transport: unaryRT(200*time.Millisecond, nil, &seen)}, Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Records) != 40 || seen.Load() != 40 || res.Summary.Succeeded != 40 {
			t.Fatalf("%d records, server saw %d, summary %+v", len(res.Records), seen.Load(), res.Summary)
		}
		// 40 requests of 200 ms over 4 clients take 2 s of simulated time: 20 req/s.
		if res.Summary.RequestsPerSec != 20 || res.Summary.E2E.P50 != 200 {
			t.Fatalf("rate %v, e2e p50 %v; want 20 and 200", res.Summary.RequestsPerSec, res.Summary.E2E.P50)
		}
		if !strings.Contains(progress.String(), "sent=") {
			t.Fatalf("no progress line in %q", progress.String())
		}
	})
}

func TestRunCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen atomic.Int64
		gate := make(chan struct{}) // never opened: requests end by cancellation
		ctx, cancel := context.WithCancel(context.Background())
		cfg := baseConfig()
		cfg.Rate, cfg.Duration = 100, time.Minute
		var res *Result
		var err error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err = Run(ctx, cfg, Options{Client: &http.Client{Transport: unaryRT(0, gate, &seen)}})
		}()
		time.Sleep(time.Second)
		cancel()
		wg.Wait()
		if err == nil || res == nil {
			t.Fatalf("err %v, res %v: want the context error and a partial result", err, res)
		}
		if res.Summary.Failed == 0 || res.Summary.ErrorsByCode[CodeCanceled] != res.Summary.Failed {
			t.Fatalf("summary %+v: want every request failed as %s", res.Summary, CodeCanceled)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{"valid open loop", func(c *Config) { c.Rate, c.Duration = 5, time.Second }, false},
		{"valid closed loop", func(c *Config) { c.Concurrency, c.Requests = 2, 10 }, false},
		{"both loops", func(c *Config) { c.Rate, c.Concurrency, c.Requests = 5, 2, 10 }, true},
		{"no loop", func(c *Config) { c.Requests = 10 }, true},
		{"no stop", func(c *Config) { c.Rate = 5 }, true},
		{"bad endpoint", func(c *Config) { c.Rate, c.Requests, c.Endpoint = 5, 1, "embeddings" }, true},
		{"no url", func(c *Config) { c.Rate, c.Requests, c.URL = 5, 1, "" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseConfig()
			tt.mutate(&c)
			if err := c.Validate(); (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

// TestRunRealServer is a closed-loop and an open-loop run over real HTTP (counts only).
func TestRunRealServer(t *testing.T) {
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set(HeaderWorker, "w")
		io.WriteString(w, `{"usage":{"completion_tokens":5}}`)
	}))
	defer srv.Close()
	for _, cfg := range []Config{{Concurrency: 8, Requests: 200}, {Rate: 2000, Requests: 100}} {
		c := baseConfig()
		c.URL, c.Concurrency, c.Rate, c.Requests = srv.URL, cfg.Concurrency, cfg.Rate, cfg.Requests
		before := seen.Load()
		res, err := Run(context.Background(), c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Summary.Succeeded != int(c.Requests) || seen.Load()-before != c.Requests || res.Summary.Workers["w"] != int(c.Requests) {
			t.Fatalf("summary %+v, server saw %d; want %d successes", res.Summary, seen.Load()-before, c.Requests)
		}
	}
}
