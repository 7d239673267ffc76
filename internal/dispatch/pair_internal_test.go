package dispatch

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// seatedSlot admits one request on a controller with one decode seat and returns it with the
// controller.
func seatedSlot(t *testing.T) (*admission.Controller, *admission.Slot) {
	t.Helper()
	c, err := admission.New(admission.Settings{QueueSize: 0, QueueTimeout: time.Second, DecodeMaxInflightPerWorker: 1}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Acquire(context.Background(), admission.Request{
		Select:     func(func(string) bool) (string, error) { return "P", nil },
		SelectPair: func(_, _ func(string) bool) (string, string, error) { return "P", "D", nil },
	})
	if err != nil || s.Seat() == nil {
		t.Fatalf("acquire: %v (seat %v)", err, s.Seat())
	}
	s.Release(admission.ReleaseCompleted)
	return c, s
}

// TestHoldSeatReleasesOnEveryPath: the decode seat goes back exactly once when the response is closed
// (twice closed: once), when the leg fails, and when it panics; never while the response is open.
func TestHoldSeatReleasesOnEveryPath(t *testing.T) {
	seats := func(c *admission.Controller) int { return c.Status().Seats["D"] }

	c, s := seatedSlot(t)
	resp, err := holdSeat(context.Background(), s.Seat(), func() (*Response, error) {
		return &Response{Body: io.NopCloser(strings.NewReader("data"))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := seats(c); got != 1 {
		t.Fatalf("seat released before the decode ended: %d held", got)
	}
	resp.Body.Close()
	resp.Body.Close()
	if got := seats(c); got != 0 {
		t.Fatalf("seats held after close: %d", got)
	}

	c, s = seatedSlot(t)
	legErr := errors.New("decode failed")
	if _, err := holdSeat(context.Background(), s.Seat(), func() (*Response, error) { return nil, legErr }); !errors.Is(err, legErr) {
		t.Fatalf("err = %v", err)
	}
	if got := seats(c); got != 0 {
		t.Fatalf("seats held after a failed leg: %d", got)
	}

	c, s = seatedSlot(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic was swallowed")
			}
		}()
		_, _ = holdSeat(context.Background(), s.Seat(), func() (*Response, error) { panic("adapter bug") })
	}()
	if got := seats(c); got != 0 {
		t.Fatalf("seats held after a panic: %d", got)
	}

	// Seats off: run's answer passes through untouched.
	body := io.NopCloser(strings.NewReader(""))
	resp, _ = holdSeat(context.Background(), nil, func() (*Response, error) { return &Response{Body: body}, nil })
	if resp.Body != body {
		t.Fatal("holdSeat wrapped a response without a seat")
	}
}

// TestSelectPairDecodeSide: the pair skips decode workers without a seat or vetoed by their engine's
// reported load (waiting requests, KV usage), names the decode side when none is left, and the prefill
// side when decode has seats but prefill has no slot.
func TestSelectPairDecodeSide(t *testing.T) {
	reg := worker.NewRegistry(worker.RegistryOptions{})
	add := func(url string, role worker.Role) *worker.Worker {
		spec := worker.Spec{URL: url, Role: role, Protocol: worker.ProtocolSGLang, Models: []string{"m"}}
		if role == worker.RolePrefill {
			spec.BootstrapPort = 9000
		}
		w, err := reg.Add(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.SetHealth(w.ID(), worker.HealthReady); err != nil {
			t.Fatal(err)
		}
		return w
	}
	add("http://p:1", worker.RolePrefill)
	add("http://d:1", worker.RoleDecode)
	add("http://d:2", worker.RoleDecode)
	loads := map[string]worker.EngineLoad{
		"http://d:1": {Waiting: 5, KVUsage: 0.2}, // vetoed by waiting > 4
		"http://d:2": {Waiting: 0, KVUsage: 0.5},
	}
	mon, err := worker.NewLoadMonitor(reg, worker.LoadFetcherFunc(func(_ context.Context, w *worker.Worker) (worker.EngineLoad, error) {
		if l, ok := loads[w.URL()]; ok {
			return l, nil
		}
		return worker.EngineLoad{}, nil
	}), worker.LoadMonitorConfig{Interval: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mon.Poll(context.Background())
	pols, err := placement.NewSet(placement.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	x := &Dispatcher{cfg: Config{PD: true, CheckDecodeOverload: true, DecodeOverloadWaitingRequests: 4, DecodeMaxKVUsage: 0.9},
		d: Deps{Registry: reg, Policies: pols}}
	preq := &placement.Request{Model: "m", TargetWorker: -1}
	yes := func(string) bool { return true }

	pw, dw, err := x.selectPair(preq, allHandoffs, yes, yes)
	if err != nil || pw.URL() != "http://p:1" || dw.URL() != "http://d:2" {
		t.Fatalf("pair = %v, %v, %v; want p:1 with d:2 (d:1 is vetoed)", pw, dw, err)
	}
	// d:2's KV fills up: both vetoed, the decode side holds the request back.
	loads["http://d:2"] = worker.EngineLoad{KVUsage: 0.95}
	mon.Poll(context.Background())
	if _, _, err := x.selectPair(preq, allHandoffs, yes, yes); !errors.Is(err, admission.ErrNoSeat) {
		t.Fatalf("err = %v, want ErrNoSeat", err)
	}
	// Seats free and no veto, but no prefill slot: the prefill side.
	loads["http://d:2"] = worker.EngineLoad{}
	mon.Poll(context.Background())
	no := func(string) bool { return false }
	if _, _, err := x.selectPair(preq, allHandoffs, no, yes); !errors.Is(err, admission.ErrNoCapacity) || errors.Is(err, admission.ErrNoSeat) {
		t.Fatalf("err = %v, want the prefill side's ErrNoCapacity", err)
	}
	// No seat anywhere: decode.
	if _, _, err := x.selectPair(preq, allHandoffs, yes, no); !errors.Is(err, admission.ErrNoSeat) {
		t.Fatalf("err = %v, want ErrNoSeat", err)
	}
	// Both full: prefill holds the head back (its seats are held by requests still in prefill).
	if _, _, err := x.selectPair(preq, allHandoffs, no, no); !errors.Is(err, admission.ErrNoCapacity) || errors.Is(err, admission.ErrNoSeat) {
		t.Fatalf("err = %v, want the prefill side's ErrNoCapacity when both sides are full", err)
	}
	// A model nobody serves is final, never a wait.
	if _, _, err := x.selectPair(&placement.Request{Model: "other", TargetWorker: -1}, allHandoffs, yes, no); !errors.Is(err, placement.ErrModelNotFound) {
		t.Fatalf("err = %v, want model not found", err)
	}
}
