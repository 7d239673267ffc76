package admission_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/admission"
)

// Issue #32 point 3: a waiter's side is what holds it back when it is
// refused, not what held the queue's head back when it joined. Waiters that
// joined while the decode's seats were full with requests still in prefill
// (the prefill's doing) and time out after those prefills are over, prefill
// idle and every seat held by a running decode, are all decode timeouts:
// the error, the outcome, the rejection metric, the decode wait histogram
// and the wait span's side. Before, only the head (the one waiter that
// selects) was re-judged; the others kept naming prefill.
func TestWaiterTimeoutNamesTheSideAtRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(bg) }()
		m := newSeatMetrics(2)
		p := newPairPlacement([]string{"P0"}, []string{"D0"})
		c := mustNew(t, seatsOn(2, 2, 10), admission.Deps{Metrics: m, Tracer: tp.Tracer("test")})
		// a and b hold both of P0's slots and both of D0's seats, in prefill.
		a, err := c.Acquire(bg, p.req("a", ""))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Acquire(bg, p.req("b", ""))
		if err != nil {
			t.Fatal(err)
		}
		var waiters []<-chan result
		for _, id := range []string{"w1", "w2", "w3", "w4"} {
			ch := goAcquire(bg, c, p.req(id, ""))
			synctest.Wait()
			mustWait(t, id, ch)
			waiters = append(waiters, ch)
		}
		// Their prefills end; their decodes hold the seats: prefill is idle
		// (0/2), decode full (2/2).
		a.Release(admission.ReleaseCompleted)
		b.Release(admission.ReleaseCompleted)
		synctest.Wait()
		if st := c.Status(); st.Inflight["P0"] != 0 || st.Seats["D0"] != 2 || st.QueuedTotal != 4 {
			t.Fatalf("inflight %v seats %v queued %d, want P0 idle, D0 2/2, 4 waiting", st.Inflight, st.Seats, st.QueuedTotal)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		for i, ch := range waiters {
			r := mustDone(t, "waiter", ch)
			if !errors.Is(r.err, admission.ErrDecodeQueueTimeout) || errors.Is(r.err, admission.ErrQueueTimeout) ||
				admission.OutcomeOf(r.err) != admission.DecodeQueueTimeout {
				t.Errorf("w%d: err = %v, want a decode queue timeout (prefill idle, decode full)", i+1, r.err)
			}
		}
		st := c.Status()
		if st.Rejections["decode_queue_timeout"] != 4 || st.Rejections["queue_timeout"] != 0 {
			t.Errorf("rejections %v, want 4 decode_queue_timeout and no queue_timeout", st.Rejections)
		}
		if got := m.snapshot().rejections; got[admission.DecodeQueueTimeout] != 4 || got[admission.QueueTimeout] != 0 {
			t.Errorf("rejection metric: decode_queue_timeout %d queue_timeout %d, want 4 and 0",
				got[admission.DecodeQueueTimeout], got[admission.QueueTimeout])
		}
		if m.decodeWait != 4 {
			t.Errorf("decode waits observed %d, want 4", m.decodeWait)
		}
		var sides []string
		for _, w := range spanAttrs(exp, "sluice.admission.wait") {
			if w["sluice.admission.outcome"] != "admitted" {
				sides = append(sides, w["sluice.admission.side"]+"/"+w["sluice.admission.outcome"])
			}
		}
		if want := slices.Repeat([]string{"decode/decode_queue_timeout"}, 4); !slices.Equal(sides, want) {
			t.Errorf("refused wait spans (side/outcome) %v, want %v", sides, want)
		}
		if got := p.pickIDs(); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("picks %v, want [a b]: naming the side must not pick", got)
		}
		a.Seat().Release(admission.ReleaseCompleted)
		b.Seat().Release(admission.ReleaseCompleted)
		if len(m.seatViol) > 0 {
			t.Fatal(m.seatViol)
		}
	})
}

// The reverse: a waiter that joined while decode held the head back and is
// refused when the decode has seats again but prefill is full names
// prefill.
func TestWaiterTimeoutNamesPrefillOnceDecodeFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPairPlacement([]string{"P0"}, []string{"D0", "D1"})
		c := mustNew(t, seatsOn(1, 1, 10), admission.Deps{})
		a, err := c.Acquire(bg, p.req("a", "D0")) // P0 + D0
		if err != nil {
			t.Fatal(err)
		}
		a.Release(admission.ReleaseCompleted) // P0 idle; D0 full with a running decode
		// The head waits for D0 (a strict target): decode.
		h := goAcquire(bg, c, p.req("h", "D0"))
		synctest.Wait()
		mustWait(t, "h", h)
		w := goAcquire(bg, c, p.req("w", ""))
		synctest.Wait()
		mustWait(t, "w", w)
		// D0's decode ends: h is admitted on P0 + D0 and holds P0 in prefill.
		a.Seat().Release(admission.ReleaseCompleted)
		synctest.Wait()
		hs := mustAdmit(t, "h", h)
		// w now waits for P0 (prefill); D1 has a seat for it.
		time.Sleep(time.Minute)
		synctest.Wait()
		r := mustDone(t, "w", w)
		if !errors.Is(r.err, admission.ErrQueueTimeout) || errors.Is(r.err, admission.ErrDecodeQueueTimeout) {
			t.Errorf("w: err = %v, want the prefill queue timeout (P0 busy, D1 free)", r.err)
		}
		hs.Release(admission.ReleaseCompleted)
		hs.Seat().Release(admission.ReleaseCompleted)
	})
}

// A waiter displaced from a full queue, and a newcomer whose predicted wait
// exceeds its timeout, are refused too: with the decode full and prefill
// idle, both name decode (pd_decode_queue_full, pd_decode_queue_timeout),
// still counted under their own outcomes.
func TestDisplacedAndPredictedNameTheSideAtRefusal(t *testing.T) {
	t.Run("displaced", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newPairPlacement([]string{"P0"}, []string{"D0"})
			s := seatsOn(2, 2, 3)
			s.Bands, s.Aging = threeBands, time.Hour
			c := mustNew(t, s, admission.Deps{})
			a, _ := c.Acquire(bg, p.req("a", ""))
			b, _ := c.Acquire(bg, p.req("b", ""))
			var waiters []<-chan result
			for _, id := range []string{"w1", "w2", "w3"} {
				r := p.req(id, "")
				r.Priority = -5 // the low band
				ch := goAcquire(bg, c, r)
				synctest.Wait()
				mustWait(t, id, ch)
				waiters = append(waiters, ch)
			}
			a.Release(admission.ReleaseCompleted)
			b.Release(admission.ReleaseCompleted)
			synctest.Wait()
			hi := p.req("hi", "")
			hi.Priority = 50
			hc := goAcquire(bg, c, hi)
			synctest.Wait()
			mustWait(t, "hi", hc)
			r := mustDone(t, "w3 (displaced)", waiters[2])
			if !errors.Is(r.err, admission.ErrDisplaced) || !errors.Is(r.err, admission.ErrDecodeQueueFull) ||
				errors.Is(r.err, admission.ErrQueueFull) || admission.OutcomeOf(r.err) != admission.Displaced {
				t.Errorf("w3: err = %v (outcome %v), want a decode-side displacement", r.err, admission.OutcomeOf(r.err))
			}
			a.Seat().Release(admission.ReleaseCompleted)
			b.Seat().Release(admission.ReleaseCompleted)
			synctest.Wait()
			for _, ch := range []<-chan result{hc, waiters[0]} {
				s := mustAdmit(t, "admitted", ch)
				s.Release(admission.ReleaseCompleted)
				s.Seat().Release(admission.ReleaseCompleted)
				synctest.Wait()
			}
			s2 := mustAdmit(t, "w2", waiters[1])
			s2.Release(admission.ReleaseCompleted)
			s2.Seat().Release(admission.ReleaseCompleted)
		})
	})
	t.Run("predicted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newPairPlacement([]string{"P0"}, []string{"D0"})
			s := seatsOn(2, 1, 100)
			s.QueueTimeout, s.EarlyRejection = 3500*time.Millisecond, true
			c := mustNew(t, s, admission.Deps{})
			// About one release a second, of slots and seats.
			for range 21 {
				w, err := c.Acquire(bg, p.req("warm", ""))
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				w.Release(admission.ReleaseCompleted)
				w.Seat().Release(admission.ReleaseCompleted)
			}
			a, err := c.Acquire(bg, p.req("a", ""))
			if err != nil {
				t.Fatal(err)
			}
			// a's prefill lasts a second, keeping the release rate at one a
			// second; then P0 is idle and D0's one seat held by a's decode.
			time.Sleep(time.Second)
			a.Release(admission.ReleaseCompleted)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			for range 3 {
				ch := goAcquire(ctx, c, p.req("w", ""))
				synctest.Wait()
				mustWait(t, "waiter within the predicted bound", ch)
			}
			_, err = c.Acquire(bg, p.req("late", ""))
			if !errors.Is(err, admission.ErrPredictedTimeout) || !errors.Is(err, admission.ErrDecodeQueueTimeout) ||
				errors.Is(err, admission.ErrQueueTimeout) || admission.OutcomeOf(err) != admission.PredictedTimeout {
				t.Errorf("late: err = %v (outcome %v), want a decode-side predicted timeout", err, admission.OutcomeOf(err))
			}
			cancel()
			synctest.Wait()
			a.Seat().Release(admission.ReleaseCompleted)
		})
	})
}
