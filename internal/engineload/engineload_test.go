package engineload_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/engineload"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type recorder struct {
	mu     sync.Mutex
	loads  map[string]backend.Load
	failed map[string]error
}

func (r *recorder) Loaded(w *worker.Worker, l backend.Load) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loads[w.URL()] = l
}

func (r *recorder) Failed(w *worker.Worker, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed[w.URL()] = err
}

// TestPollOnce reads the load of an SGLang-style and a vLLM-style engine (each the way its protocol
// offers it) and reports an engine that does not answer as failed.
func TestPollOnce(t *testing.T) {
	ctx := context.Background()
	var engines []*sim.Engine
	for _, p := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		e, err := sim.New(sim.Config{Protocol: p, Mode: sim.ModeInstant}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines = append(engines, e)
	}
	reg := worker.NewRegistry(worker.RegistryOptions{})
	for i, e := range engines {
		proto := worker.ProtocolSGLang
		if i == 1 {
			proto = worker.ProtocolVLLM
		}
		if _, err := reg.Add(worker.Spec{URL: e.URL(), Role: worker.RoleRegular, Protocol: proto}); err != nil {
			t.Fatal(err)
		}
	}
	const dead = "http://127.0.0.1:1"
	if _, err := reg.Add(worker.Spec{URL: dead, Role: worker.RoleRegular, Protocol: worker.ProtocolSGLang}); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	rec := &recorder{loads: map[string]backend.Load{}, failed: map[string]error{}}
	p := &engineload.Poller{Registry: reg, HTTP: &http.Client{Transport: tr}, Interval: time.Second, Sink: rec}
	p.PollOnce(ctx)

	for _, e := range engines {
		if _, ok := rec.loads[e.URL()]; !ok {
			t.Errorf("no load for %s (failed: %v)", e.URL(), rec.failed[e.URL()])
		}
	}
	if err := rec.failed[dead]; err == nil {
		t.Errorf("the unreachable engine did not fail; loads %v", rec.loads)
	}
}

// TestRunStopsWithItsContext: Run polls at once, then on every tick, and returns when ctx ends.
func TestRunStopsWithItsContext(t *testing.T) {
	reg := worker.NewRegistry(worker.RegistryOptions{})
	if _, err := reg.Add(worker.Spec{URL: "http://127.0.0.1:1", Role: worker.RoleRegular, Protocol: worker.ProtocolSGLang}); err != nil {
		t.Fatal(err)
	}
	polled := make(chan struct{}, 16)
	sink := sinkFunc(func() {
		select {
		case polled <- struct{}{}:
		default: // the test has seen enough rounds
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	p := &engineload.Poller{Registry: reg, HTTP: &http.Client{Transport: tr}, Interval: 10 * time.Millisecond, Sink: sink}
	go func() { defer close(done); p.Run(ctx) }()
	for range 2 { // the first round and one tick
		select {
		case <-polled:
		case <-time.After(10 * time.Second):
			t.Fatal("no poll")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	// Off: Run returns at once.
	(&engineload.Poller{Registry: reg, Sink: sink}).Run(context.Background())
}

type sinkFunc func()

func (f sinkFunc) Loaded(*worker.Worker, backend.Load) { f() }
func (f sinkFunc) Failed(_ *worker.Worker, err error) {
	if !errors.Is(err, context.Canceled) {
		f()
	}
}
