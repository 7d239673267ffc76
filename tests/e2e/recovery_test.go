package e2e

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// loadGen sends non-streaming chat requests from several goroutines until stopped, counting outcomes
// and which prefill worker served each success (from X-Sluice-Prefill-Worker).
type loadGen struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	byPrefill  map[string]int64
	statuses   map[int]int64
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startLoad(t *testing.T, url string, workers int) *loadGen {
	t.Helper()
	l := &loadGen{byPrefill: map[string]int64{}, statuses: map[int]int64{}, stop: make(chan struct{})}
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	body := `{"model":"` + simModel + `","messages":[{"role":"user","content":"recover"}],"max_tokens":2}`
	for range workers {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					l.failed.Add(1)
					continue
				}
				_ = drain(resp)
				l.mu.Lock()
				l.statuses[resp.StatusCode]++
				if resp.StatusCode == http.StatusOK {
					l.byPrefill[resp.Header.Get("X-Sluice-Prefill-Worker")]++
				}
				l.mu.Unlock()
				if resp.StatusCode == http.StatusOK {
					l.ok.Add(1)
				} else {
					l.failed.Add(1)
				}
			}
		})
	}
	t.Cleanup(func() { l.halt(); tr.CloseIdleConnections() })
	return l
}

func (l *loadGen) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *loadGen) servedBy(url string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byPrefill[url]
}

func drain(resp *http.Response) error {
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := resp.Body.Read(buf); err != nil {
			return nil
		}
	}
}

// workerView reads one worker's health and breaker state through the admin API.
func workerView(t *testing.T, admin adminv1connect.AdminServiceClient, url string) (health, breaker string) {
	t.Helper()
	resp, err := admin.ListWorkers(context.Background(), &adminv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range resp.GetWorkers() {
		if w.GetUrl() == url {
			return w.GetHealth(), w.GetCircuitBreaker()
		}
	}
	t.Fatalf("worker %s not listed", url)
	return "", ""
}

// TestWorkerRecoversAsSoonAsHealthy is the scenario as a test: 3 prefill + 3 decode engines,
// admission limit 4 and queue 64, under load; one prefill engine dies (its breaker opens, its health
// checks fail), then comes back. With the default, it gets traffic again as soon as the health checks
// see it ready, although its breaker's open timeout is an hour; with --disable-cb-health-recovery it gets
// none while the breaker waits out that hour.
//
// Not parallel: whether the breaker opens before the health checks take the dead engine out of
// rotation is a race of timings, which other tests' load tipped (1 run in 3 with -count=3).
func TestWorkerRecoversAsSoonAsHealthy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		extra    []string
		recovers bool
	}{
		{"default", nil, true},
		{"recovery disabled", []string{"--disable-cb-health-recovery"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, sim.ClusterConfig{Prefill: 3, Decode: 3, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
			args := append([]string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "4",
				"--prefill-queue-size", "64", "--prefill-policy", "round_robin",
				"--health-check-interval-secs", "0.2", "--health-check-timeout-secs", "1",
				"--cb-failure-threshold", "3", "--cb-timeout-duration-secs", "3600"}, pdArgs(c)...)
			gw := startGateway(t, app.Options{}, append(args, tc.extra...)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL)
			victim := c.ByRole(sim.RolePrefill)[0]
			url := victim.URL()

			load := startLoad(t, gw.URL, 8)
			waitFor(t, "victim serving", 20*time.Second, func() bool { return load.servedBy(url) > 0 })

			// The engine dies: connections are refused until it comes back.
			if err := victim.SetFaults(sim.Faults{RefuseConnections: true}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "breaker open and worker not ready", 20*time.Second, func() bool {
				h, b := workerView(t, admin, url)
				return h == "not_ready" && b == "open"
			})
			// It restarts.
			if err := victim.SetFaults(sim.Faults{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "health checks see it ready", 20*time.Second, func() bool {
				h, _ := workerView(t, admin, url)
				return h == "ready"
			})
			before := load.servedBy(url)
			if tc.recovers {
				waitFor(t, "traffic to the restarted engine", 30*time.Second, func() bool { return load.servedBy(url) > before })
				if got := metricValue(t, gw, `sluice_worker_breaker_transitions_total{from="open",reason="health_probe",to="half_open",worker="`+url+`"}`); got < 1 {
					t.Errorf("health_probe transitions counted: %v, want >= 1", got)
				}
			} else {
				okBefore := load.ok.Load()
				waitFor(t, "200 more requests", 30*time.Second, func() bool { return load.ok.Load() >= okBefore+200 })
				if _, b := workerView(t, admin, url); b != "open" {
					t.Errorf("breaker %s after a passing probe with recovery disabled, want open", b)
				}
				if got := load.servedBy(url) - before; got != 0 {
					t.Errorf("%d requests served by a worker whose breaker is open", got)
				}
			}
			load.halt()
			if n := metricValue(t, gw, `sluice_worker_breaker_transitions_total{from="closed",reason="consecutive_failures",to="open",worker="`+url+`"}`); n < 1 {
				t.Errorf("closed->open transition not counted (%v)", n)
			}
		})
	}
}
