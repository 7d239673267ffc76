package admission_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/admission"
)

func banded(limit, queue int, aging time.Duration) admission.Settings {
	return admission.Settings{MaxInflightPerWorker: limit, QueueSize: queue, QueueTimeout: time.Minute,
		Bands: threeBands, Aging: aging}
}

func TestHigherBandsFirstFIFOWithinBand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFeatureMetrics(0)
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, banded(1, 20, time.Hour), admission.Deps{Metrics: m})
		held := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "holder", "")))
		arrivals := []struct {
			id   string
			prio int
		}{{"low1", -5}, {"def1", 0}, {"high1", 50}, {"low2", -1}, {"def2", 3}, {"high2", 10}, {"def3", 0}}
		chans := map[string]<-chan result{}
		for _, a := range arrivals {
			chans[a.id] = goAcquireNow(c, prio(p.req("m", a.id, ""), a.prio))
		}
		if got := c.Status().QueuedByBand; !cmp.Equal(got, map[string]int{"low": 2, "default": 3, "high": 2}) {
			t.Errorf("queued by band = %v", got)
		}
		if got := m.fsnap().bandQueued; !cmp.Equal(got, map[string]int{"low": 2, "default": 3, "high": 2}) {
			t.Errorf("band gauges = %v", got)
		}
		want := []string{"high1", "high2", "def1", "def2", "def3", "low1", "low2"}
		for _, id := range want {
			held.Release(admission.ReleaseCompleted)
			synctest.Wait()
			held = mustAdmit(t, id, chans[id])
		}
		held.Release(admission.ReleaseCompleted)
		if diff := cmp.Diff(append([]string{"holder"}, want...), p.pickIDs()); diff != "" {
			t.Errorf("admission order (-want +got):\n%s", diff)
		}
		snap := m.fsnap()
		if len(snap.bandWaits["high"]) != 2 || len(snap.bandWaits["low"]) != 2 || len(snap.bandWaits["default"]) != 4 {
			t.Errorf("band waits = %v (the holder counts in default)", snap.bandWaits)
		}
		if !cmp.Equal(snap.bandQueued, map[string]int{"low": 0, "default": 0, "high": 0}) {
			t.Errorf("band gauges at the end = %v", snap.bandQueued)
		}
	})
}

func TestAgingBoundsTheWaitOfLowBands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		const aging = 2 * time.Second
		c := mustNew(t, banded(1, 20, aging), admission.Deps{})
		held := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "holder", "")))
		low := goAcquireNow(c, prio(p.req("m", "low", ""), -5)) // t=0, band low (0 of 0..2)
		time.Sleep(time.Second)
		high1 := goAcquireNow(c, prio(p.req("m", "high1", ""), 10))
		held.Release(admission.ReleaseCompleted) // t=1: low has not aged yet
		synctest.Wait()
		held = mustAdmit(t, "high1 (before the bound)", high1)
		mustWait(t, "low", low)

		time.Sleep(1500 * time.Millisecond) // t=2.5: low has aged into default
		def := goAcquireNow(c, p.req("m", "def", ""))
		time.Sleep(1500 * time.Millisecond) // t=4: low reaches the top band
		high2 := goAcquireNow(c, prio(p.req("m", "high2", ""), 10))
		if got := c.Status().QueuedByBand; !cmp.Equal(got, map[string]int{"low": 1, "default": 1, "high": 1}) {
			t.Errorf("queued by (arrival) band = %v", got)
		}
		chans := map[string]<-chan result{"low": low, "def": def, "high2": high2}
		for _, id := range []string{"low", "high2", "def"} {
			held.Release(admission.ReleaseCompleted)
			synctest.Wait()
			held = mustAdmit(t, id, chans[id])
		}
		held.Release(admission.ReleaseCompleted)
	})
}

func TestHighBandNewcomerSelectsAtOnceAndTakesOverPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A", "B"}})
		c := mustNew(t, banded(1, 20, time.Hour), admission.Deps{})
		onB := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "holder", "B")))
		// The low head waits for B; A is free.
		head := goAcquireNow(c, prio(p.req("m", "lowHead", "B"), -5))
		def := goAcquireNow(c, p.req("m", "def", ""))
		mustWait(t, "lowHead", head)
		// def outranks the low head: it selected at once and got A.
		s := mustAdmit(t, "def", def)
		if s.Worker() != "A" {
			t.Fatalf("def on %s, want A", s.Worker())
		}
		// Now A is busy too; a high newcomer that finds no capacity becomes
		// the head, and the displaced low head stops polling.
		high := goAcquireNow(c, prio(p.req("m", "high", ""), 20))
		mustWait(t, "high", high)
		before := p.callsOf("lowHead")
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		if got := p.callsOf("lowHead") - before; got > 1 {
			t.Errorf("displaced head selected %d more times in 3.5s, want at most 1 (its last poll)", got)
		}
		if got := p.callsOf("high"); got < 3 {
			t.Errorf("new head selected %d times in 3.5s, want its polls", got)
		}
		s.Release(admission.ReleaseCompleted)
		synctest.Wait()
		hs := mustAdmit(t, "high", high)
		mustWait(t, "lowHead (B still busy)", head)
		onB.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "lowHead", head).Release(admission.ReleaseCompleted)
		hs.Release(admission.ReleaseCompleted)
	})
}

func TestBandsShareQueueSizeAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMetrics()
		p := newPlacement(map[string][]string{"m": {"A"}, "n": {"A"}})
		s := banded(1, 2, time.Hour)
		s.QueueTimeout = 5 * time.Second
		c := mustNew(t, s, admission.Deps{Metrics: m})
		held := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "holder", "")))
		low := goAcquireNow(c, prio(p.req("n", "low", ""), -5)) // another model's queue: the bound is global
		high := goAcquireNow(c, prio(p.req("m", "high", ""), 10))
		// The queue is full; a low newcomer ranks below every waiter: rejected.
		if _, err := c.Acquire(bg, prio(p.req("m", "low2", ""), -5)); !errors.Is(err, admission.ErrQueueFull) || errors.Is(err, admission.ErrDisplaced) {
			t.Fatalf("low newcomer to a full queue: %v, want queue full", err)
		}
		// A high newcomer displaces the lowest-ranked waiter, in any queue.
		high2 := goAcquireNow(c, prio(p.req("m", "high2", ""), 10))
		r := mustDone(t, "low", low)
		if !errors.Is(r.err, admission.ErrDisplaced) || !errors.Is(r.err, admission.ErrQueueFull) || admission.OutcomeOf(r.err) != admission.Displaced {
			t.Fatalf("low: %v, want displaced (class queue full)", r.err)
		}
		// Equal ranks never displace each other: a third high is rejected.
		if _, err := c.Acquire(bg, prio(p.req("m", "high3", ""), 10)); !errors.Is(err, admission.ErrQueueFull) || errors.Is(err, admission.ErrDisplaced) {
			t.Fatalf("high newcomer to a queue full of highs: %v, want queue full", err)
		}
		st := c.Status()
		if st.QueuedTotal != 2 || st.Rejections["displaced"] != 1 || st.Rejections["queue_full"] != 2 {
			t.Errorf("queued %d, rejections %v: want 2 waiting, 1 displaced, 2 queue full", st.QueuedTotal, st.Rejections)
		}
		if got := m.snapshot().rejections[admission.Displaced]; got != 1 {
			t.Errorf("displaced metric = %d", got)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		for name, ch := range map[string]<-chan result{"high": high, "high2": high2} {
			if r := mustDone(t, name, ch); !errors.Is(r.err, admission.ErrQueueTimeout) {
				t.Errorf("%s: %v, want the global timeout", name, r.err)
			}
		}
		held.Release(admission.ReleaseCompleted)
	})
}

func TestBandSpanAttributeAndLiveBandChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		held := mustAdmit(t, "holder", goAcquireNow(c, p.req("m", "holder", "")))
		low := goAcquireNow(c, prio(p.req("m", "low", ""), -5))
		high := goAcquireNow(c, prio(p.req("m", "high", ""), 10))
		// One band: priorities are ignored, arrival order rules.
		if got := c.Status().QueuedByBand; len(got) != 0 {
			t.Errorf("queued by band without bands = %v", got)
		}
		// Bands switched on live: the waiters keep their arrival band (0),
		// a newcomer of a high band goes first.
		if err := c.Update(banded(1, 10, time.Hour)); err != nil {
			t.Fatal(err)
		}
		high2 := goAcquireNow(c, prio(p.req("m", "high2", ""), 10))
		for _, id := range []string{"high2", "low", "high"} {
			held.Release(admission.ReleaseCompleted)
			synctest.Wait()
			held = mustAdmit(t, id, map[string]<-chan result{"low": low, "high": high, "high2": high2}[id])
		}
		held.Release(admission.ReleaseCompleted)
	})
}

func TestSettingsValidateFeatures(t *testing.T) {
	tests := []struct {
		name    string
		s       admission.Settings
		wantErr string
	}{
		{name: "bands with aging", s: banded(1, 10, time.Second)},
		{name: "one band needs no aging", s: admission.Settings{Bands: threeBands[:1]}},
		{name: "bands without aging", s: banded(1, 10, 0), wantErr: "aging must be positive"},
		{name: "negative aging", s: admission.Settings{Aging: -1}, wantErr: "aging must be >= 0"},
		{name: "bands out of order", s: admission.Settings{Aging: time.Second, Bands: []admission.Band{{"a", 5}, {"b", 5}}}, wantErr: "must be above"},
		{name: "duplicate band", s: admission.Settings{Aging: time.Second, Bands: []admission.Band{{"a", 1}, {"a", 5}}}, wantErr: "given twice"},
		{name: "bad band name", s: admission.Settings{Aging: time.Second, Bands: []admission.Band{{"A b", 1}, {"c", 5}}}, wantErr: "band name"},
		{name: "too many bands", s: admission.Settings{Aging: time.Second, Bands: make([]admission.Band, admission.MaxBands+1)}, wantErr: "at most"},
		{name: "adaptive", s: admission.Settings{Adaptive: admission.AdaptiveLimit{Min: 1, Max: 8}, QueueTimeout: time.Second, QueueSize: 1}},
		{name: "adaptive min 0", s: admission.Settings{Adaptive: admission.AdaptiveLimit{Min: 0, Max: 8}}, wantErr: "1 <= min <= max"},
		{name: "adaptive inverted", s: admission.Settings{Adaptive: admission.AdaptiveLimit{Min: 8, Max: 2}}, wantErr: "1 <= min <= max"},
		{name: "token budget waits need a timeout", s: admission.Settings{MaxInflightTokensPerWorker: 8, QueueSize: 3}, wantErr: "must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if (err != nil) != (tt.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
	var s admission.Settings
	s.Bands = threeBands
	for prio, want := range map[int]int{-5000: 0, -1000: 0, -1: 0, 0: 1, 9: 1, 10: 2, 1 << 30: 2} {
		if got := s.BandOf(prio); got != want {
			t.Errorf("BandOf(%d) = %d, want %d", prio, got, want)
		}
	}
}
