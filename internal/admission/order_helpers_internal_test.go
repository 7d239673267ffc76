package admission

import (
	"fmt"
	"time"

	"pgregory.net/rapid"
)

// orderRig drives one order with waiters of a few tenants and bands, as the
// controller does under its lock: push the newest, remove the head (a
// grant) or any waiter (a cancellation).
type orderRig struct {
	o       order
	seq     uint64
	now     time.Time
	waiting []*waiter // in arrival order
}

func (r *orderRig) push(band int, tenant string) *waiter {
	r.seq++
	w := &waiter{band: band, seq: r.seq, enq: r.now, tenant: tenant}
	r.o.push(w)
	r.waiting = append(r.waiting, w)
	return w
}

// remove takes out w, granted or cancelled.
func (r *orderRig) remove(w *waiter, grant bool) {
	if grant {
		w.state = granted
	} else {
		w.state = failed
	}
	r.o.remove(w)
	for i, x := range r.waiting {
		if x == w {
			r.waiting = append(r.waiting[:i], r.waiting[i+1:]...)
			return
		}
	}
}

// step draws one operation: a push (of up to tenants tenants and bands
// bands), a grant of the head or a cancellation; it returns the granted
// waiter, if any.
func (r *orderRig) step(t *rapid.T, tenants, bands int) *waiter {
	switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
	case op < 5 || len(r.waiting) == 0:
		r.push(rapid.IntRange(0, bands-1).Draw(t, "band"), fmt.Sprint("t", rapid.IntRange(0, tenants-1).Draw(t, "tenant")))
	case op < 9:
		h := r.o.head()
		r.remove(h, true)
		return h
	default:
		r.remove(r.waiting[rapid.IntRange(0, len(r.waiting)-1).Draw(t, "who")], false)
	}
	return nil
}

// checkTenantFIFO fails unless h is the oldest waiter of its tenant and band.
func (r *orderRig) checkTenantFIFO(t *rapid.T, h *waiter) {
	for _, w := range r.waiting {
		if w.tenant == h.tenant && w.band == h.band && w.seq < h.seq {
			t.Fatalf("head %d of %s passes its tenant's older waiter %d", h.seq, h.tenant, w.seq)
		}
	}
}
