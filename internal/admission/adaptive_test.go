package admission_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// serialEngine models a prefill engine the way the simulator does: admitted
// prefills are computed one at a time, in arrival order, at perToken each
// (times slow). Its goroutine ends when jobs is closed.
type serialEngine struct {
	jobs     chan engineJob
	perToken time.Duration
	slow     atomic.Int64 // slowdown factor
}

type engineJob struct {
	tokens int64
	done   chan struct{}
}

func newSerialEngine(perToken time.Duration) *serialEngine {
	e := &serialEngine{jobs: make(chan engineJob, 1024), perToken: perToken}
	e.slow.Store(1)
	go func() {
		for j := range e.jobs {
			time.Sleep(time.Duration(j.tokens) * e.perToken * time.Duration(e.slow.Load()))
			close(j.done)
		}
	}()
	return e
}

// drive runs clients closed-loop clients against c and e until stop is
// closed: acquire, overhead (network and the PD handshake, during which the
// engine does not yet have the request), prefill, release.
func drive(c *admission.Controller, p *placement, e *serialEngine, clients int, tokens int64, overhead time.Duration, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s, err := c.Acquire(bg, tok(p.req("m", "r", ""), tokens))
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				time.Sleep(overhead)
				j := engineJob{tokens: tokens, done: make(chan struct{})}
				e.jobs <- j
				<-j.done
				s.Release(admission.ReleaseCompleted)
			}
		})
	}
	return &wg
}

func adaptiveSettings(start, lo, hi int) admission.Settings {
	return admission.Settings{MaxInflightPerWorker: start, QueueSize: 1000, QueueTimeout: time.Hour,
		Adaptive: admission.AdaptiveLimit{Min: lo, Max: hi}}
}

// TestAdaptiveLimitFindsAndKeepsASmallQueue drives a saturated serial engine:
// from below and from above, the limit settles where the engine always has
// the next prefill ready (2, since the handshake would otherwise leave it
// idle) and no more wait inside it, and it stays there when the engine slows
// down 3x, without re-tuning.
func TestAdaptiveLimitFindsAndKeepsASmallQueue(t *testing.T) {
	for _, start := range []int{1, 32} {
		t.Run("from "+itoa(start), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newFeatureMetrics(0)
				p := newPlacement(map[string][]string{"m": {"A"}})
				c := mustNew(t, adaptiveSettings(start, 1, 32), admission.Deps{Metrics: m})
				e := newSerialEngine(100 * time.Microsecond)
				stop := make(chan struct{})
				wg := drive(c, p, e, 24, 256, 5*time.Millisecond, stop)

				time.Sleep(2 * time.Minute)
				if got := c.Status().Limits["A"]; got != 2 {
					t.Errorf("limit after 2 min = %d, want 2 (history %v)", got, m.fsnap().limits["A"])
				}
				e.slow.Store(3)
				time.Sleep(2 * time.Minute)
				if got := c.Status().Limits["A"]; got != 2 {
					t.Errorf("limit 2 min after a 3x slowdown = %d, want 2 (history %v)", got, m.fsnap().limits["A"])
				}
				close(stop)
				wg.Wait()
				close(e.jobs)
				hist := m.fsnap().limits["A"]
				if len(hist) == 0 || hist[0] != start || slices.Min(hist) < 1 || slices.Max(hist) > 32 {
					t.Errorf("limit history %v: want it to start at %d and stay in 1..32", hist, start)
				}
			})
		})
	}
}

func TestAdaptiveLimitDoesNotGrowWhenUnused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, adaptiveSettings(0, 1, 32), admission.Deps{})
		e := newSerialEngine(100 * time.Microsecond)
		stop := make(chan struct{})
		wg := drive(c, p, e, 1, 256, 5*time.Millisecond, stop) // one client: never more than 1 in flight
		time.Sleep(time.Minute)
		if got := c.Status().Limits["A"]; got > 2 {
			t.Errorf("limit %d with one request at a time, want at most 2", got)
		}
		close(stop)
		wg.Wait()
		close(e.jobs)
	})
}

func TestFixedLimitSwitchesAdaptationOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFeatureMetrics(0)
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, adaptiveSettings(3, 2, 8), admission.Deps{Metrics: m})
		s := mustAdmit(t, "r", goAcquireNow(c, p.req("m", "r", "")))
		if got := c.Status().Limits["A"]; got != 3 {
			t.Errorf("starting limit %d, want 3", got)
		}
		// A new range clamps the current limit.
		if err := c.Update(adaptiveSettings(3, 5, 8)); err != nil {
			t.Fatal(err)
		}
		if got := c.Status().Limits["A"]; got != 5 {
			t.Errorf("limit after raising the range to 5:8 = %d, want 5", got)
		}
		if err := c.Update(on(7, 10)); err != nil {
			t.Fatal(err)
		}
		if got := c.Status().Limits["A"]; got != 7 {
			t.Errorf("limit after a fixed update = %d, want 7", got)
		}
		s.Release(admission.ReleaseCompleted)
		if got := m.fsnap().limits["A"]; !slices.Equal(got, []int{3, 5}) {
			t.Errorf("SetLimit calls %v, want [3 5] and none once fixed", got)
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
