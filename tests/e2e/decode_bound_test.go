package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// Issue #21's problem with the decode gate off: a burst wider than the decode engine's running window,
// through prefill admission with a limit of 4, is admitted whole (no 429) because every prefill ends
// fast, and the backlog shows up only inside the decode engine, whose own reported waiting queue climbs
// far above its window. Counts and the engine's reported queue only; no timings.
func TestDecodeBoundBurstHidesInTheDecodeEngine(t *testing.T) {
	t.Parallel()
	const window, burst, outputTokens = 4, 40, 64
	for _, proto := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(string(proto), func(t *testing.T) {
			pc := startCluster(t, sim.ClusterConfig{Prefill: 2, Protocol: proto, Mode: sim.ModeRealistic})
			dc := startCluster(t, sim.ClusterConfig{Decode: 1, Protocol: proto, Mode: sim.ModeRealistic,
				Engine: sim.Config{MaxRunningRequests: window}})
			decode := dc.Engines[0]
			args := []string{"--pd-disaggregation", "--disable-health-check", "--prefill-max-inflight-requests-per-worker", "4"}
			args = append(append(args, pdArgs(pc)...), "--decode", decode.URL())
			gw := startGateway(t, app.Options{}, args...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })

			// The decode engine's own figure, as a gateway or an operator reads it.
			reportedWaiting := func() (int, error) {
				if proto == sim.ProtocolVLLM {
					return scrapeEngineGauge(decode.URL()+"/metrics", "vllm:num_requests_waiting")
				}
				return sglangLoadsWaiting(decode.URL() + "/v1/loads")
			}
			done := make(chan struct{})
			peak := make(chan int, 1)
			go func() {
				most := 0
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					if n, err := reportedWaiting(); err == nil {
						most = max(most, n)
					}
					select {
					case <-done:
						peak <- most
						return
					case <-tick.C:
					}
				}
			}()

			client := sdk(gw.URL)
			var wg sync.WaitGroup
			var mu sync.Mutex
			statuses := map[int]int{}
			for i := range burst {
				wg.Go(func() {
					prompt := strings.Repeat(fmt.Sprintf("word%d ", i), 60)
					stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: simModel,
						Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(outputTokens)})
					chunks := 0
					for stream.Next() {
						chunks++
					}
					status := 200
					if err := stream.Err(); err != nil {
						status = -1
						var apiErr *openai.Error
						if errors.As(err, &apiErr) {
							status = apiErr.StatusCode
						}
					} else if chunks == 0 {
						status = 0
					}
					stream.Close()
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				})
			}
			wg.Wait()
			close(done)
			most := <-peak

			if statuses[200] != burst {
				t.Errorf("statuses %v: want all %d served (the gate is off: admission lets the whole burst through)", statuses, burst)
			}
			if statuses[http.StatusTooManyRequests] != 0 {
				t.Errorf("%d requests got a 429: prefill admission should never trigger on a decode-bound burst", statuses[http.StatusTooManyRequests])
			}
			if v := metricSum(t, gw.URL, "sluice_pd_prefill_admission_rejections_total"); v != 0 {
				t.Errorf("sluice_pd_prefill_admission_rejections_total = %v, want 0", v)
			}
			if most < 3*window {
				t.Errorf("the decode engine reported at most %d waiting requests, want at least %d (3x its window of %d)", most, 3*window, window)
			}
			st := decode.Stats()
			if st.BootstrapTimeouts != 0 || st.Completed != burst {
				t.Errorf("decode stats: %d bootstrap timeouts, %d completed; want 0 and %d", st.BootstrapTimeouts, st.Completed, burst)
			}
			t.Logf("%s: the decode engine (window %d) reported up to %d waiting requests; statuses %v", proto, window, most, statuses)
		})
	}
}

// scrapeEngineGauge reads one unlabelled-or-single-series gauge from an engine's Prometheus text.
func scrapeEngineGauge(url, name string) (int, error) {
	resp, err := http.Get(url) //nolint:noctx // a short poll against a loopback engine
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	total, found := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			return 0, err
		}
		total, found = total+v, true
	}
	if !found {
		return 0, fmt.Errorf("%s: no %s", url, name)
	}
	return int(total), nil
}

// sglangLoadsWaiting sums num_waiting_reqs over the ranks of SGLang's GET /v1/loads.
func sglangLoadsWaiting(url string) (int, error) {
	resp, err := http.Get(url) //nolint:noctx // a short poll against a loopback engine
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Loads []struct {
			Waiting int `json:"num_waiting_reqs"`
		} `json:"loads"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	n := 0
	for _, l := range body.Loads {
		n += l.Waiting
	}
	return n, nil
}
