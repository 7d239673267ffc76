package dispatch

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a clock the test sets by hand; safe to read from any goroutine.
type testClock struct {
	t0  time.Time
	off atomic.Int64
}

func (c *testClock) now() time.Time      { return c.t0.Add(time.Duration(c.off.Load())) }
func (c *testClock) set(d time.Duration) { c.off.Store(int64(d)) }
func newTestClock() *testClock           { return &testClock{t0: time.Now()} }

// TestDispatcherClock: every instant of a request's stats is read from Deps.Now — its duration, its
// time to first token and its inter-token latency (a streamed answer, regular mode), and a refused
// request's duration.
func TestDispatcherClock(t *testing.T) {
	e := &usageEngine{bodies: make(chan string, 8)}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	defer srv.Close()
	d, _ := newTestDispatcher(t, Config{}, srv.URL)
	m := &fakeMetrics{}
	d.d.Metrics = m
	clk := newTestClock()
	d.d.Now = clk.now

	resp, err := d.Do(t.Context(), &Request{Route: RouteChat, Header: http.Header{},
		Body: []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	<-e.bodies
	f := resp.Frames()
	clk.set(3 * time.Second) // the first frame
	if _, err := f.Next(); err != nil {
		t.Fatal(err)
	}
	clk.set(4 * time.Second) // the rest, [DONE] included
	for {
		if _, err := f.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	clk.set(5 * time.Second) // the relay closes the answer
	resp.Body.Close()

	// A refused request: a clock that moves 2s at every reading; Do reads it when the request arrives
	// and when it is refused.
	var ticks atomic.Int64
	d.d.Now = func() time.Time { return clk.t0.Add(time.Duration(ticks.Add(1)) * 2 * time.Second) }
	if _, err := d.Do(t.Context(), &Request{Route: RouteChat, Header: http.Header{}, Body: []byte(`{"model":"m"}`)}); err == nil {
		t.Fatal("a request without messages was accepted")
	}

	st := m.stats()
	if len(st) != 2 {
		t.Fatalf("%d requests recorded, want 2", len(st))
	}
	// 3 completion tokens in one sequence: ITL = (end - first) / 2.
	if s := st[0]; s.Duration != 5*time.Second || s.TTFT != 3*time.Second || s.ITL != 500*time.Millisecond {
		t.Errorf("streamed request: duration %v, ttft %v, itl %v; want 5s, 3s, 500ms from the injected clock", s.Duration, s.TTFT, s.ITL)
	}
	if s := st[1]; s.Status != http.StatusBadRequest || s.Duration != 2*time.Second {
		t.Errorf("refused request: status %d, duration %v; want 400, 2s from the injected clock", s.Status, s.Duration)
	}
}
