package sim

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// pdLegs sends n SGLang PD requests (both legs at once, distinct rooms) under ctx and returns their
// results once all have ended.
func pdLegs(ctx context.Context, t *testing.T, c *http.Client, p, d *Engine, n, maxTokens int, roomBase uint64) (pr, dr []legResult) {
	t.Helper()
	pr, dr = make([]legResult, n), make([]legResult, n)
	var wg sync.WaitGroup
	for i := range n {
		body := withBootstrap(fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":"request %d of the burst"}],"max_tokens":%d}`, i, maxTokens),
			"127.0.0.1", p.BootstrapPort(), roomBase+uint64(i))
		leg := func(e *Engine, out *legResult) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				out.status = -1
				return
			}
			defer resp.Body.Close()
			var b strings.Builder
			buf := make([]byte, 4096)
			for {
				k, err := resp.Body.Read(buf)
				b.Write(buf[:k])
				if err != nil {
					break
				}
			}
			out.status, out.body = resp.StatusCode, []byte(b.String())
		}
		wg.Go(func() { leg(p, &pr[i]) })
		wg.Go(func() { leg(d, &dr[i]) })
	}
	wg.Wait()
	return pr, dr
}

func TestSGLangDecodePreallocation(t *testing.T) {
	t.Parallel()
	base := Config{Protocol: ProtocolSGLang, Seed: 3, BootstrapTimeout: 20 * time.Second}
	pcfg, dcfg := base, base
	pcfg.Role = RolePrefill
	p := startEngine(t, pcfg)
	dcfg.Role, dcfg.MaxRunningRequests, dcfg.BootstrapPort = RoleDecode, 2, p.BootstrapPort()
	dcfg.ITLBase = 50 * time.Millisecond // decodes outlast the test's look at the queues
	d := startEngine(t, dcfg)
	c := testClient(t)

	// A window of 2 pre-allocates 2 + 2 x 2 = 6 requests (model_runner.py pre_alloc_size); of 10 sent at
	// once, 2 run, 4 pre-allocated wait for the running batch and 4 wait for pre-allocation, their
	// prefills held in the bootstrap queue.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pdLegs(ctx, t, c, p, d, 10, 1000, 1<<40)
	}()
	waitFor(t, "the decode's queues to settle", func() bool {
		st := d.Stats()
		return st.Preallocated == 6 && st.PreallocQueue == 4 && st.Running == 2 && st.Queued == 4 && p.Stats().HandshakeWaiting == 4
	})
	status, b := get(t, c, d.URL()+"/v1/loads")
	loads := decodeJSON[struct {
		Loads []struct {
			Running int `json:"num_running_reqs"`
			Waiting int `json:"num_waiting_reqs"`
			Max     int `json:"max_running_requests"`
		} `json:"loads"`
	}](t, b)
	if status != 200 || len(loads.Loads) != 1 || loads.Loads[0].Running != 2 || loads.Loads[0].Waiting != 8 || loads.Loads[0].Max != 2 {
		t.Errorf("/v1/loads %d %s: want 2 running, 8 waiting (4 for the running batch, 4 for pre-allocation), window 2", status, b)
	}
	_, b = get(t, c, d.URL()+"/get_load")
	if !strings.Contains(string(b), `"num_waiting_reqs":8`) || !strings.Contains(string(b), `"num_reqs":10`) {
		t.Errorf("/get_load %s: want 8 waiting of 10", b)
	}
	_, b = get(t, c, d.URL()+"/get_server_info")
	info := decodeJSON[struct {
		Max      int `json:"max_running_requests"`
		Internal []struct {
			Effective int `json:"effective_max_running_requests_per_dp"`
		} `json:"internal_states"`
	}](t, b)
	if info.Max != 2 || len(info.Internal) != 1 || info.Internal[0].Effective != 2 {
		t.Errorf("server info max_running_requests %d, internal_states %+v: want 2 and one rank of 2", info.Max, info.Internal)
	}
	_, b = get(t, c, d.URL()+"/metrics")
	if !strings.Contains(string(b), "sglang:num_queue_reqs{model_name=\"sim-model\"} 8") {
		t.Errorf("metrics lack 8 queued requests:\n%s", grepLines(string(b), "sglang:num_"))
	}

	// Every leg cancelled: every pre-allocation, slot and KV reservation is given back.
	cancel()
	<-done
	waitFor(t, "the decode to release everything", func() bool {
		st := d.Stats()
		return st.Preallocated == 0 && st.PreallocQueue == 0 && st.Running == 0 && st.Queued == 0 && st.KVUsedTokens == 0
	})
	if st := d.Stats(); st.PreallocWaits != 10 || st.PreallocTimeouts != 0 {
		t.Errorf("decode pre-allocations %d (want 10), timeouts %d (want 0)", st.PreallocWaits, st.PreallocTimeouts)
	}
}

// A prefill whose decode cannot pre-allocate in time fails in KVPoll.Bootstrapping, and the decode in
// KVPoll.WaitingForInput: the burst-wider-than-the-window failure SGLang users see.
func TestSGLangDecodePreallocationTimesOut(t *testing.T) {
	t.Parallel()
	base := Config{Protocol: ProtocolSGLang, Seed: 3, BootstrapTimeout: 2 * time.Second}
	pcfg, dcfg := base, base
	pcfg.Role = RolePrefill
	p := startEngine(t, pcfg)
	dcfg.Role, dcfg.MaxRunningRequests, dcfg.BootstrapPort = RoleDecode, 1, p.BootstrapPort()
	d := startEngine(t, dcfg)
	c := testClient(t)

	// Three long decodes hold the 3 rows of a window of 1.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pdLegs(ctx, t, c, p, d, 3, 30000, 1<<41)
	}()
	waitFor(t, "three pre-allocations", func() bool { return d.Stats().Preallocated == 3 })
	pr, dr := pdLegs(t.Context(), t, c, p, d, 1, 4, 1<<42)
	if pr[0].status != 500 || !strings.Contains(string(pr[0].body), "in KVPoll.Bootstrapping") {
		t.Errorf("prefill: %d %s, want 500 timed out in KVPoll.Bootstrapping", pr[0].status, pr[0].body)
	}
	if dr[0].status != 500 || !strings.Contains(string(dr[0].body), "in KVPoll.WaitingForInput") {
		t.Errorf("decode: %d %s, want 500 timed out in KVPoll.WaitingForInput", dr[0].status, dr[0].body)
	}
	if st := d.Stats(); st.PreallocTimeouts != 1 || st.BootstrapTimeouts != 1 || st.PreallocQueue != 0 {
		t.Errorf("decode stats: %d pre-allocation timeouts, %d bootstrap timeouts, queue %d; want 1, 1, 0", st.PreallocTimeouts, st.BootstrapTimeouts, st.PreallocQueue)
	}
	if st := p.Stats(); st.HandshakeTimeouts != 1 {
		t.Errorf("prefill handshake timeouts %d, want 1", st.HandshakeTimeouts)
	}
	cancel()
	<-done
	waitFor(t, "the decode to release everything", func() bool {
		st := d.Stats()
		return st.Preallocated == 0 && st.Running == 0 && st.KVUsedTokens == 0
	})
}
