package admission_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// warmRate releases n slots one second apart, so the measured release rate
// is about 1/s.
func warmRate(t *testing.T, c *admission.Controller, p *placement, n int) {
	t.Helper()
	for range n {
		s, err := c.Acquire(bg, p.req("m", "warm", ""))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		s.Release(admission.ReleaseCompleted)
	}
}

func early(timeout time.Duration) admission.Settings {
	return admission.Settings{MaxInflightPerWorker: 1, QueueSize: 100, QueueTimeout: timeout, EarlyRejection: true}
}

func TestEarlyRejectionOfACertainTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMetrics()
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, early(3500*time.Millisecond), admission.Deps{Metrics: m})
		warmRate(t, c, p, 21)
		held := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "holder", "")))
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		// Positions 1..3 wait about 1, 2, 3 s at 1 release/s: within 3.5 s.
		var waiting []<-chan result
		for range 3 {
			ch := goAcquire(ctx, c, p.req("m", "w", ""))
			synctest.Wait()
			mustWait(t, "waiter within the predicted bound", ch)
			waiting = append(waiting, ch)
		}
		// Position 4 would wait about 4 s: rejected at once.
		_, err := c.Acquire(bg, p.req("m", "late", ""))
		if !errors.Is(err, admission.ErrPredictedTimeout) || !errors.Is(err, admission.ErrQueueTimeout) || !errors.Is(err, admission.ErrRejected) {
			t.Fatalf("late: %v, want a predicted timeout (class rejected, code queue timeout)", err)
		}
		if got := admission.OutcomeOf(err); got != admission.PredictedTimeout || got.String() != "predicted_timeout" {
			t.Errorf("outcome %v, want predicted_timeout", got)
		}
		st := c.Status()
		if st.QueuedTotal != 3 || st.Rejections["predicted_timeout"] != 1 || st.Rejections["queue_timeout"] != 0 {
			t.Errorf("queued %d, rejections %v: want 3 waiting, one predicted timeout, no queue timeout", st.QueuedTotal, st.Rejections)
		}
		if got := m.snapshot().rejections[admission.PredictedTimeout]; got != 1 {
			t.Errorf("predicted_timeout metric = %d, want 1", got)
		}
		if st.ReleaseRate < 0.9 || st.ReleaseRate > 1.1 {
			t.Errorf("release rate %v, want about 1/s", st.ReleaseRate)
		}
		cancel()
		for _, ch := range waiting {
			<-ch
		}
		held.Release(admission.ReleaseCompleted)
	})
}

func TestClientDeadlineBoundsPredictionAndWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, early(time.Minute), admission.Deps{})
		warmRate(t, c, p, 21)
		held := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "holder", "")))
		r := p.req("m", "hurried", "")
		r.MaxWait = 500 * time.Millisecond // position 1 waits about 1 s
		if _, err := c.Acquire(bg, r); !errors.Is(err, admission.ErrPredictedTimeout) {
			t.Fatalf("hurried: %v, want a predicted timeout", err)
		}
		r.MaxWait = 2 * time.Second // predicted 1 s: queued, but waits at most 2 s
		w := goAcquireNow(c, r)
		mustWait(t, "patient enough", w)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if res := mustDone(t, "patient enough", w); !errors.Is(res.err, admission.ErrQueueTimeout) || errors.Is(res.err, admission.ErrPredictedTimeout) {
			t.Errorf("after its 2 s: %v, want a plain queue timeout", res.err)
		}
		held.Release(admission.ReleaseCompleted)
	})
}

func TestNoEarlyRejectionWhileRateUnknownOrOff(t *testing.T) {
	for _, tt := range []struct {
		name     string
		s        admission.Settings
		warm     int
		wantKeys int // rejection reasons reported
	}{
		{name: "rate unknown", s: early(time.Second), wantKeys: 3},
		{name: "off", s: admission.Settings{MaxInflightPerWorker: 1, QueueSize: 100, QueueTimeout: 3500 * time.Millisecond}, warm: 21, wantKeys: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPlacement(map[string][]string{"m": {"A"}})
				c := mustNew(t, tt.s, admission.Deps{})
				warmRate(t, c, p, tt.warm)
				held := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "h", "")))
				ctx, cancel := context.WithCancel(bg)
				var chans []<-chan result
				for range 6 { // 6 s of predicted wait at 1/s: over the timeout
					chans = append(chans, goAcquire(ctx, c, p.req("m", "w", "")))
				}
				synctest.Wait()
				if got := c.Status(); got.QueuedTotal != 6 || len(got.Rejections) != tt.wantKeys || got.Rejections["predicted_timeout"] != 0 {
					t.Errorf("queued %d, rejections %v: want 6 queued, nothing rejected", got.QueuedTotal, got.Rejections)
				}
				cancel()
				for _, ch := range chans {
					<-ch
				}
				held.Release(admission.ReleaseCompleted)
			})
		})
	}
}

// TestPredictedTTFTCountsAgainstTheDeadline: with early rejection, the TTFT the placement policy
// predicts (Request.PredictedTTFT) is part of the wait a client's deadline bounds: a request that a
// free slot would admit is refused when its predicted TTFT alone exceeds its deadline, and a queued
// one when predicted queue wait plus TTFT does. Without a deadline, with early rejection off, or for a
// resumed request, the prediction refuses nothing.
func TestPredictedTTFTCountsAgainstTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMetrics()
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, early(time.Minute), admission.Deps{Metrics: m})
		warmRate(t, c, p, 21)
		r := p.req("m", "slow to start", "")
		r.MaxWait, r.PredictedTTFT = time.Second, 1500*time.Millisecond
		if _, err := c.Acquire(bg, r); admission.OutcomeOf(err) != admission.PredictedTimeout || !errors.Is(err, admission.ErrPredictedTimeout) {
			t.Fatalf("a free slot, predicted TTFT 1.5 s, deadline 1 s: %v, want a predicted timeout", err)
		}
		for _, ok := range []struct {
			name string
			edit func(*admission.Request)
		}{
			{"within its deadline", func(r *admission.Request) { r.PredictedTTFT = 900 * time.Millisecond }},
			{"no deadline", func(r *admission.Request) { r.MaxWait = 0 }},
			{"resumed", func(r *admission.Request) { r.Resumed = true }},
		} {
			r := r
			ok.edit(&r)
			s, err := c.Acquire(bg, r)
			if err != nil {
				t.Fatalf("%s: %v, want a slot", ok.name, err)
			}
			s.Release(admission.ReleaseCompleted)
		}
		held := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "holder", "")))
		// Position 1 waits about 1 s at 1 release/s; with 900 ms to its first token it misses 1.5 s.
		r.MaxWait, r.PredictedTTFT = 1500*time.Millisecond, 900*time.Millisecond
		if _, err := c.Acquire(bg, r); admission.OutcomeOf(err) != admission.PredictedTimeout {
			t.Fatalf("queued: %v, want a predicted timeout (wait 1 s + TTFT 0.9 s > 1.5 s)", err)
		}
		r.PredictedTTFT = 400 * time.Millisecond
		w := goAcquireNow(c, r)
		mustWait(t, "wait 1 s + TTFT 0.4 s within 1.5 s", w)
		held.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustDone(t, "queued within its deadline", w).slot.Release(admission.ReleaseCompleted)
		if got := m.snapshot().rejections[admission.PredictedTimeout]; got != 2 {
			t.Errorf("predicted_timeout metric = %d, want 2", got)
		}
		off := mustNew(t, admission.Settings{MaxInflightPerWorker: 1, QueueSize: 100, QueueTimeout: time.Minute}, admission.Deps{})
		r.PredictedTTFT = time.Hour
		s, err := off.Acquire(bg, r)
		if err != nil {
			t.Fatalf("early rejection off: %v, want a slot", err)
		}
		s.Release(admission.ReleaseCompleted)
	})
}
