package e2e

import (
	"bufio"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/cluster"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestClusterDecodeSeats: two gateways share one decode engine whose seat limit is 2 for the fleet
// (--decode-max-inflight-requests-per-worker 2 on each, coordinated). Each admits one long stream; the
// next request on each queues although prefill slots are free, and stays queued over several exchanges:
// together they never hold more than 2 seats, and the engine never runs more than 2 of their requests.
// Ending a stream admits the waiter of its gateway. Control: without coordination each gateway takes 2.
func TestClusterDecodeSeats(t *testing.T) {
	c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{BootstrapTimeout: time.Minute, ContextLength: 1 << 20, ITLBase: 50 * time.Millisecond}})
	dec := c.ByRole(sim.RoleDecode)[0]
	long := `{"model":"sim-model","messages":[{"role":"user","content":"tell a long story"}],"max_tokens":4000,"stream":true}`
	seatArgs := []string{"--decode-max-inflight-requests-per-worker", "2"}

	type stream struct {
		ch     <-chan result
		cancel context.CancelFunc
	}
	start := func(gw *gateway) stream {
		ctx, cancel := context.WithCancel(context.Background())
		return stream{goPost(ctx, gw.URL+"/v1/chat/completions", long), cancel}
	}
	// admitted waits for a stream's head and first event.
	admitted := func(name string, s stream) *http.Response {
		t.Helper()
		r := <-s.ch
		if r.err != nil {
			t.Fatalf("%s: %v", name, r.err)
		}
		if r.resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d (%s), want 200", name, r.resp.StatusCode, decodeError(t, r.resp).Error.Code)
		}
		if _, err := bufio.NewReader(r.resp.Body).ReadString('\n'); err != nil {
			t.Fatalf("%s: first event: %v", name, err)
		}
		return r.resp
	}
	end := func(s stream, resp *http.Response) {
		s.cancel()
		if resp != nil {
			resp.Body.Close()
		}
	}
	seats := func(rs *replicas) int {
		n := 0
		for _, gw := range rs.gws {
			if gw != nil {
				n += gw.Admission.Usage().Seats[dec.URL()]
			}
		}
		return n
	}
	waitDecodeIdle := func() {
		waitFor(t, "decode engine idle", 10*time.Second, func() bool { return dec.Stats().InFlight == 0 })
	}

	// Control: each gateway enforces 2 seats on its own, so two streams on each all run.
	control := startReplicas(t, c, 2, 8, false, seatArgs...)
	var ctrl []stream
	var ctrlResp []*http.Response
	for i := range 4 {
		s := start(control.gws[i%2])
		ctrl = append(ctrl, s)
		ctrlResp = append(ctrlResp, admitted("control", s))
	}
	if n := seats(control); n != 4 {
		t.Fatalf("control: %d seats held, want 4 (2 per gateway)", n)
	}
	for i, s := range ctrl {
		end(s, ctrlResp[i])
	}
	for _, gw := range control.gws {
		kill(gw)
	}
	waitDecodeIdle()

	rs := startReplicas(t, c, 2, 8, true, seatArgs...)
	waitFor(t, "a coordinator every replica follows", 10*time.Second, func() bool { return agreed(rs) != "" })
	key := cluster.DecodeKey(dec.URL())
	waitFor(t, "seat shares granted", 10*time.Second, func() bool {
		return rs.gws[0].ClusterStatus().Workers[key].Share > 0 && rs.gws[1].ClusterStatus().Workers[key].Share > 0
	})
	a := start(rs.gws[0])
	aResp := admitted("A on gateway 0", a)
	b := start(rs.gws[1])
	bResp := admitted("B on gateway 1", b)
	cq, dq := start(rs.gws[0]), start(rs.gws[1])
	for _, gw := range rs.gws {
		waitFor(t, "a waiter on each gateway", 10*time.Second, func() bool { return gw.Admission.Status().QueuedTotal == 1 })
	}
	// Several exchanges later the waiters still wait: the fleet's 2 seats are taken.
	ok0 := rs.gws[0].ClusterStatus().Exchanges["ok"]
	waitFor(t, "three more exchanges", 10*time.Second, func() bool { return rs.gws[0].ClusterStatus().Exchanges["ok"] >= ok0+3 })
	for i, gw := range rs.gws {
		if q := gw.Admission.Status().QueuedTotal; q != 1 {
			t.Fatalf("gateway %d has %d waiting after three exchanges, want 1 (the fleet's seats are taken)", i, q)
		}
	}
	if n := seats(rs); n != 2 {
		t.Fatalf("coordinated: %d seats held, want 2 (the fleet's limit)", n)
	}
	if n := dec.Stats().InFlight; n > 2 {
		t.Fatalf("the decode engine serves %d requests, fleet seat limit 2", n)
	}

	// A ends: gateway 0's waiter takes its seat.
	end(a, aResp)
	cResp := admitted("C on gateway 0 after A ended", cq)
	if n := seats(rs); n > 2 {
		t.Fatalf("after A ended: %d seats held, fleet limit 2", n)
	}
	end(b, bResp)
	dResp := admitted("D on gateway 1 after B ended", dq)
	end(cq, cResp)
	end(dq, dResp)
	waitFor(t, "every seat back", 10*time.Second, func() bool { return seats(rs) == 0 })
}
