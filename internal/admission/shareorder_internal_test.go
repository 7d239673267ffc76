package admission

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Under-share first: whenever a waiting tenant is under its share, the head
// is the front waiter of the most under-served waiting tenant (lowest rate
// per weight, then waiting longest); FIFO within a tenant always holds.
// The clock stands still, so rates change only by grants.
func TestPropertyShareServesTheMostUnderServed(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ts := TenantSettings{Fair: true, UnderShareFirst: true, Weights: map[string]int{"t0": rapid.IntRange(1, 3).Draw(rt, "w0")}}
		now := time.Unix(1000, 0)
		o := newShareOrder(&ts, nil, func() time.Time { return now })
		r := &orderRig{o: o, now: now}
		for range rapid.IntRange(1, 200).Draw(rt, "ops") {
			if h := r.step(rt, 4, 1); h != nil {
				r.checkTenantFIFO(rt, h)
			}
			if len(r.waiting) == 0 {
				continue
			}
			var lowest *shareTenant
			for _, st := range o.s.waiting {
				if lowest == nil || st.score < lowest.score || st.score == lowest.score && st.since < lowest.since {
					lowest = st
				}
			}
			if !o.s.under(lowest) {
				continue // nobody under share: the round robin's head
			}
			if h := o.head(); h.tenant != lowest.name {
				rt.Fatalf("head of %s while %s is the most under-served", h.tenant, lowest.name)
			}
		}
	})
}
