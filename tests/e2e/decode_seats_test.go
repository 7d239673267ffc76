package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestDecodeSeatsEndToEnd drives a decode-bound burst through the real gateway and simulated engines
// (SGLang bootstrap and vLLM NIXL): two fast prefill engines, one decode engine, prefill limit 8 but
// 2 decode seats. Two long streams hold both seats while their prefills are long over; the next two
// requests queue although prefill slots are free; the burst beyond the queue gets a real HTTP 429
// pd_decode_queue_full with a Retry-After; ending a stream admits the next waiter, never more than 2
// at once; at the end every seat and slot is back. The bound is given (2), or "auto": SGLang's own
// window read from its server info (max_running_requests 2), vLLM's declared with --decode-window.
func TestDecodeSeatsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		proto sim.Protocol
		args  []string
	}{
		{"sglang", sim.ProtocolSGLang, []string{"--decode-max-inflight-requests-per-worker", "2"}},
		{"vllm", sim.ProtocolVLLM, []string{"--decode-max-inflight-requests-per-worker", "2"}},
		{"sglang-auto", sim.ProtocolSGLang, []string{"--decode-max-inflight-requests-per-worker", "auto"}},
		{"vllm-auto-declared", sim.ProtocolVLLM, []string{"--decode-max-inflight-requests-per-worker", "auto", "--decode-window", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proto := tc.proto
			// A slow decode (50 ms per token, 4000 tokens) outlasts the test: the streams end when
			// the test closes them.
			c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 1, Protocol: proto,
				Engine: sim.Config{BootstrapTimeout: time.Minute, ContextLength: 1 << 20, ITLBase: 50 * time.Millisecond,
					MaxRunningRequests: 2}})
			args := append([]string{"--pd-disaggregation", "--disable-retries",
				"--prefill-max-inflight-requests-per-worker", "8",
				"--prefill-queue-size", "2", "--prefill-queue-timeout-secs", "60"}, tc.args...)
			gw := startGateway(t, app.Options{}, append(args, pdArgs(c)...)...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			dec := c.ByRole(sim.RoleDecode)[0].URL()
			chat := gw.URL + "/v1/chat/completions"
			long := `{"model":"sim-model","messages":[{"role":"user","content":"tell a long story"}],"max_tokens":4000,"stream":true}`

			type stream struct {
				resp   *http.Response
				cancel context.CancelFunc
			}
			// open starts a stream and returns once it is admitted (its head arrived) and has
			// produced a first event.
			open := func(name string, ch <-chan result, cancel context.CancelFunc) stream {
				t.Helper()
				r := <-ch
				if r.err != nil {
					t.Fatalf("%s: %v", name, r.err)
				}
				if r.resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d (%s), want 200", name, r.resp.StatusCode, decodeError(t, r.resp).Error.Code)
				}
				if _, err := bufio.NewReader(r.resp.Body).ReadString('\n'); err != nil {
					t.Fatalf("%s: first event: %v", name, err)
				}
				return stream{r.resp, cancel}
			}
			start := func() (<-chan result, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				return goPost(ctx, chat, long), cancel
			}
			closeStream := func(s stream) {
				s.cancel()
				s.resp.Body.Close()
			}
			seats := func() int { return gw.Admission.Status().Seats[dec] }

			chA, cancelA := start()
			a := open("A", chA, cancelA)
			chB, cancelB := start()
			b := open("B", chB, cancelB)
			if got := seats(); got != 2 {
				t.Fatalf("seats on the decode worker = %d, want 2", got)
			}
			// Both prefills are over: the decode, not the prefill, holds the requests.
			waitFor(t, "prefill slots released", 10*time.Second, func() bool {
				st := gw.Admission.Status()
				n := 0
				for _, v := range st.Inflight {
					n += v
				}
				return n == 0
			})

			// C and D queue, held back by decode although prefill has 16 free slots.
			chC, cancelC := start()
			waitFor(t, "C queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })
			chD, cancelD := start()
			waitFor(t, "D queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 2 })

			// The burst beyond the queue: 429 naming decode, with a Retry-After, for each of them.
			rejected := 0
			for range 3 {
				resp, err := post(context.Background(), chat, long)
				if err != nil {
					t.Fatal(err)
				}
				ra := resp.Header.Get("Retry-After")
				if resp.StatusCode != http.StatusTooManyRequests || ra == "" {
					t.Fatalf("overflow: status %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, ra)
				}
				if secs, err := strconv.Atoi(ra); err != nil || secs < 1 {
					t.Fatalf("Retry-After %q is not a positive number of seconds", ra)
				}
				if e := decodeError(t, resp); e.Error.Code != "pd_decode_queue_full" {
					t.Fatalf("overflow code %q, want pd_decode_queue_full", e.Error.Code)
				}
				rejected++
			}
			if got := gw.Admission.Status().Rejections["decode_queue_full"]; got != uint64(rejected) {
				t.Errorf("decode_queue_full rejections = %d, want %d", got, rejected)
			}
			if got := scrape(t, gw.URL, "sluice_pd_prefill_admission_rejections_total")["queue=sim-model,reason=decode_queue_full"]; got != float64(rejected) {
				t.Errorf("rejections metric (decode_queue_full) = %v, want %d", got, rejected)
			}
			if got := scrape(t, gw.URL, "sluice_pd_decode_admission_inflight")["worker="+dec]; got != 2 {
				t.Errorf("sluice_pd_decode_admission_inflight = %v, want 2", got)
			}
			if got := scrape(t, gw.URL, "sluice_pd_decode_admission_limit")["worker="+dec]; got != 2 {
				t.Errorf("sluice_pd_decode_admission_limit = %v, want 2", got)
			}

			// A's stream ends: C (the head) takes its seat, D still waits; never above 2.
			closeStream(a)
			cs := open("C", chC, cancelC)
			if got := seats(); got != 2 {
				t.Fatalf("seats = %d after A ended and C was admitted, want 2", got)
			}
			if q := gw.Admission.Status().QueuedTotal; q != 1 {
				t.Fatalf("queued = %d, want 1 (D)", q)
			}
			closeStream(b)
			ds := open("D", chD, cancelD)
			if got := seats(); got > 2 {
				t.Fatalf("seats = %d, above the bound of 2", got)
			}
			closeStream(cs)
			closeStream(ds)
			waitFor(t, "every seat released", 10*time.Second, func() bool { return seats() == 0 })
			if got := scrape(t, gw.URL, "sluice_pd_decode_admission_inflight")["worker="+dec]; got != 0 {
				t.Errorf("decode inflight gauge = %v at the end, want 0", got)
			}
		})
	}
}

// TestDecodeKVReservationEndToEnd: an SGLang decode engine reporting max_total_tokens 3000 in its server
// info, seats on with a window of 8: a stream reserving prompt + 2000 tokens leaves no KV room for a
// second, which waits although seats are free, and is admitted when the first ends.
func TestDecodeKVReservationEndToEnd(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{BootstrapTimeout: time.Minute, ITLBase: 50 * time.Millisecond, MaxRunningRequests: 8,
			KVCapacityTokens: 3000}})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--disable-retries",
		"--decode-max-inflight-requests-per-worker", "auto", "--prefill-queue-size", "4", "--prefill-queue-timeout-secs", "60"},
		pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	dec := c.ByRole(sim.RoleDecode)[0].URL()
	if got := gw.Admission.Status().DecodeCapacity[dec]; got.Window != 8 || got.KVTokens != 3000 {
		t.Fatalf("decode capacity %+v, want window 8 and 3000 KV tokens from the server info", got)
	}
	chat := gw.URL + "/v1/chat/completions"
	body := `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2000,"stream":true}`
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	ra := <-goPost(ctxA, chat, body)
	if ra.err != nil || ra.resp.StatusCode != http.StatusOK {
		t.Fatalf("A: %v %v", ra.err, ra.resp)
	}
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	chB := goPost(ctxB, chat, body)
	waitFor(t, "B waits for KV room", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })
	if got := gw.Admission.Status().Seats[dec]; got != 1 {
		t.Fatalf("seats = %d, want 1 (B waits for KV, not a seat)", got)
	}
	cancelA()
	ra.resp.Body.Close()
	rb := <-chB
	if rb.err != nil || rb.resp.StatusCode != http.StatusOK {
		t.Fatalf("B: %v %v", rb.err, rb.resp)
	}
	cancelB()
	rb.resp.Body.Close()
	waitFor(t, "seats released", 10*time.Second, func() bool { return gw.Admission.Status().Seats[dec] == 0 })
}
