package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestDecodeSideTimeoutsEndToEnd reproduces issue #32 point 3 through the real gateway and simulated
// SGLang engines: decode seats auto (the decode engine's own window, max_running_requests 8), one
// prefill engine with 2 slots. Six long streams run their decodes; two more take both prefill slots
// with a slow prefill (3 s of injected latency), so the 8 seats are full with requests still in
// prefill and the waiters queue behind them, held back by prefill. Then those prefills end: prefill
// is idle (0/2), the decode full (8/8), and the waiters time out. Every one of them must be a 429
// pd_decode_queue_timeout with a Retry-After, counted under decode_queue_timeout (status and metric).
//
// Waiters that time out in arrival order each become the head just before their own timeout, and a
// new head selects at once, so it meets the decode: that hid the stale side ("fifo", which passed
// before the fix too). A waiter refused while another is the head kept the side it met on joining:
// "behind a higher band" makes that certain with a high-priority request that joins after four others,
// still while prefill is full, and becomes the head; the four time out behind it, then it does. Before
// the fix the four answered pd_prefill_queue_timeout, sending an operator to scale the prefill pool.
func TestDecodeSideTimeoutsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		bands bool
	}{{"fifo", false}, {"behind a higher band", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			decodeSideTimeouts(t, tc.bands)
		})
	}
}

func decodeSideTimeouts(t *testing.T, bands bool) {
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{BootstrapTimeout: time.Minute, ContextLength: 1 << 20, ITLBase: 50 * time.Millisecond,
			MaxRunningRequests: 8}})
	args := []string{"--pd-disaggregation", "--disable-retries",
		"--decode-max-inflight-requests-per-worker", "auto",
		"--prefill-max-inflight-requests-per-worker", "2",
		"--prefill-queue-size", "16", "--prefill-queue-timeout-secs", "10"}
	if bands {
		args = append(args, "--prefill-priority-bands", "default:0,high:10", "--prefill-priority-aging-secs", "600")
	}
	gw := startGateway(t, app.Options{}, append(args, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	prefill := c.ByRole(sim.RolePrefill)[0]
	dec := c.ByRole(sim.RoleDecode)[0].URL()
	waitFor(t, "the decode window read from the engine", 10*time.Second, func() bool {
		return gw.Admission.Status().DecodeCapacity[dec].Window == 8
	})
	chat := gw.URL + "/v1/chat/completions"
	// A slow decode (50 ms per token, 4000 tokens) outlasts the test: the streams end when it cancels them.
	long := `{"model":"sim-model","messages":[{"role":"user","content":"tell a long story"}],"max_tokens":4000,"stream":true}`
	short := `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`

	ctx, cancel := context.WithCancel(context.Background())
	var streams []<-chan result
	defer func() {
		cancel()
		for _, ch := range streams {
			if r := <-ch; r.err == nil {
				r.resp.Body.Close()
			}
		}
	}()
	status := func() (inflight, seats, queued int) {
		st := gw.Admission.Status()
		for _, v := range st.Inflight {
			inflight += v
		}
		return inflight, st.Seats[dec], st.QueuedTotal
	}

	// Six streams admitted one after another, each past its first event (its prefill is over).
	for range 6 {
		ch := goPost(ctx, chat, long)
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: status %d (%s), want 200", r.resp.StatusCode, decodeError(t, r.resp).Error.Code)
		}
		if _, err := bufio.NewReader(r.resp.Body).ReadString('\n'); err != nil {
			t.Fatalf("stream: first event: %v", err)
		}
		done := make(chan result, 1)
		done <- r
		streams = append(streams, done)
	}
	// Two more whose prefills are held: both prefill slots and the last two seats, in prefill. A hold
	// (not a latency) keeps them there however long a loaded machine takes to queue the waiters.
	if err := prefill.SetFaults(sim.Faults{Hold: true}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		streams = append(streams, goPost(ctx, chat, long))
	}
	waitFor(t, "prefill full (2/2) and decode full (8/8) with the held prefills", 10*time.Second, func() bool {
		inflight, seats, _ := status()
		return inflight == 2 && seats == 8
	})

	// Four waiters queue while prefill is full.
	var waiters []<-chan result
	for i := range 4 {
		waiters = append(waiters, goPost(context.Background(), chat, short))
		waitFor(t, "waiter queued", 10*time.Second, func() bool { _, _, q := status(); return q == i+1 })
	}
	if bands {
		// A high-priority request, also while prefill is full: it becomes the head.
		waiters = append(waiters, goPostHeader(chat, short, "X-Sluice-Priority", "10"))
		waitFor(t, "the high-priority waiter queued", 10*time.Second, func() bool { _, _, q := status(); return q == 5 })
	}
	if inflight, _, _ := status(); inflight != 2 {
		t.Fatalf("the held prefills ended (%d in flight) before the waiters queued behind them; the scenario needs them to queue first", inflight)
	}
	// The held prefills end; their decodes keep the seats: prefill idle, decode full, the waiters waiting.
	if err := prefill.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "prefill idle (0/2), decode full (8/8), the waiters waiting", 5*time.Second, func() bool {
		inflight, seats, queued := status()
		return inflight == 0 && seats == 8 && queued == len(waiters)
	})

	// Every waiter times out, held back by decode.
	codes := map[string]int{}
	for _, ch := range waiters {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.StatusCode != http.StatusTooManyRequests || r.resp.Header.Get("Retry-After") == "" {
			t.Errorf("waiter: status %d, Retry-After %q; want 429 with Retry-After", r.resp.StatusCode, r.resp.Header.Get("Retry-After"))
		}
		codes[decodeError(t, r.resp).Error.Code]++
	}
	n := len(waiters)
	if codes["pd_decode_queue_timeout"] != n {
		t.Errorf("waiters' codes %v, want %d pd_decode_queue_timeout (prefill idle, decode full)", codes, n)
	}
	st := gw.Admission.Status()
	if st.Rejections["decode_queue_timeout"] != uint64(n) || st.Rejections["queue_timeout"] != 0 {
		t.Errorf("rejections %v, want %d decode_queue_timeout and no queue_timeout", st.Rejections, n)
	}
	rej := scrape(t, gw.URL, "sluice_pd_prefill_admission_rejections_total")
	if got := rej["queue=sim-model,reason=decode_queue_timeout"]; got != float64(n) {
		t.Errorf("rejections metric (decode_queue_timeout) = %v, want %d", got, n)
	}
	if got := rej["queue=sim-model,reason=queue_timeout"]; got != 0 {
		t.Errorf("rejections metric (queue_timeout) = %v, want 0", got)
	}

	cancel()
	waitFor(t, "every seat released", 10*time.Second, func() bool { _, seats, _ := status(); return seats == 0 })
}

// goPostHeader is goPost with one request header.
func goPostHeader(url, body, key, value string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			ch <- result{nil, err}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(key, value)
		resp, err := http.DefaultClient.Do(req)
		ch <- result{resp, err}
	}()
	return ch
}
