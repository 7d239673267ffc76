package admission

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The grant/cancel race is decided by select's random choice in wait, so
// these tests drive leave directly with a waiter already granted.
func TestLeaveAfterGrant(t *testing.T) {
	tests := []struct {
		name         string
		why          Outcome
		wantSlot     bool
		wantErr      error
		wantInflight int
	}{
		{name: "cancellation beats a grant", why: Cancelled, wantErr: context.Canceled, wantInflight: 0},
		{name: "a grant beats a timeout", why: QueueTimeout, wantSlot: true, wantInflight: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Settings{MaxInflightPerWorker: 1, QueueSize: 1, QueueTimeout: time.Minute}, Deps{})
			if err != nil {
				t.Fatal(err)
			}
			sel := func(hasCap func(string) bool) (string, error) {
				if hasCap("A") {
					return "A", nil
				}
				return "", ErrNoCapacity
			}
			c.mu.Lock()
			w, _ := c.enqueueLocked(Request{Queue: "m", Select: sel})
			c.dispatchQueueLocked(w.q)
			c.mu.Unlock()
			if w.state != granted {
				t.Fatalf("waiter state %v, want granted", w.state)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			slot, err := c.leave(ctx, w, tt.why)
			if (slot != nil) != tt.wantSlot || !errors.Is(err, tt.wantErr) {
				t.Fatalf("leave = (%v, %v), want slot %v, err %v", slot, err, tt.wantSlot, tt.wantErr)
			}
			if got := c.Status().Inflight["A"]; got != tt.wantInflight {
				t.Errorf("in-flight = %d, want %d", got, tt.wantInflight)
			}
			slot.Release(ReleaseCompleted)
			if got := c.Status().Inflight["A"]; got != 0 {
				t.Errorf("in-flight after release = %d, want 0", got)
			}
		})
	}
}

func TestRateEstimator(t *testing.T) {
	t0 := time.Unix(0, 0)
	tests := []struct {
		name   string
		events []time.Duration // offsets from t0
		at     time.Duration
		want   float64 // events per second
		ok     bool
	}{
		{name: "none", at: time.Second},
		{name: "one", events: []time.Duration{0}, at: time.Second},
		{name: "two a second apart", events: []time.Duration{0, time.Second}, at: time.Second, want: 1, ok: true},
		{name: "steady 4/s for a minute", events: every(250*time.Millisecond, 241), at: time.Minute, want: 4, ok: true},
		{name: "decays when idle", events: every(250*time.Millisecond, 241), at: time.Minute + 10*time.Second, want: 4 * 0.3679, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rateEstimator{tau: rateTau}
			for _, e := range tt.events {
				r.observe(t0.Add(e))
			}
			got, ok := r.rate(t0.Add(tt.at))
			if ok != tt.ok || (ok && (got < tt.want*0.9 || got > tt.want*1.1)) {
				t.Errorf("rate = (%.3f, %v), want (%.3f ±10%%, %v)", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func every(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i) * d
	}
	return out
}
