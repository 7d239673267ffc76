package admission_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/benchcpu"
)

// BenchmarkTenantsQueued measures one release and the grant it causes with 1,000 requests queued
// for one slot, each of its own tenant, each re-queueing as soon as it is granted and released: the
// queue stays 1,000 long, and with fairness each grant passes the turn around a ring of 1,000
// tenants; "share" also updates the rates and the heap of waiting tenants by rate at each grant
// (share.go). "fifo" is the same without tenancy, the baseline of the 1.5x bound.
// The -early variants add early rejection, whose prediction runs at every re-queue.
func BenchmarkTenantsQueued(b *testing.B) {
	const tenants = 1000
	fair := on(1, 2*tenants)
	fair.Tenants = admission.TenantSettings{Fair: true, MaxQueued: 10, Weights: map[string]int{"t0": 3}, Burst: 4}
	share := fair
	share.Tenants.UnderShareFirst = true
	early := func(s admission.Settings) admission.Settings {
		s.EarlyRejection = true // every re-queue predicts its position (fair.go, share.go)
		return s
	}
	for _, bc := range []struct {
		name string
		s    admission.Settings
	}{
		{"fifo", on(1, 2*tenants)},
		{"fair", fair},
		{"share", share},
		{"fifo-early", early(on(1, 2*tenants))},
		{"fair-early", early(fair)},
		{"share-early", early(share)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := mustNew(b, bc.s, admission.Deps{PollInterval: time.Hour})
			req := benchSelect("A")
			ctx, cancel := context.WithCancel(context.Background())
			hold, err := c.Acquire(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			slots := make(chan *admission.Slot)
			var wg sync.WaitGroup
			for i := range tenants {
				r := req
				r.Tenant = fmt.Sprint("t", i)
				wg.Go(func() {
					for {
						s, err := c.Acquire(ctx, r)
						if err != nil {
							return
						}
						select {
						case slots <- s:
						case <-ctx.Done():
							s.Release(admission.ReleaseCancelled)
							return
						}
					}
				})
			}
			deadline := time.Now().Add(30 * time.Second)
			for c.Status().QueuedTotal < tenants {
				if time.Now().After(deadline) {
					b.Fatal("the waiters did not queue")
				}
				time.Sleep(time.Millisecond) // polling for setup, outside the measurement
			}
			cur := hold
			b.ReportAllocs()
			stop := benchcpu.Start(b)
			for b.Loop() {
				cur.Release(admission.ReleaseCompleted)
				cur = <-slots
			}
			stop()
			cancel()
			cur.Release(admission.ReleaseCompleted)
			wg.Wait()
		})
	}
}
