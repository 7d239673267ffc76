package admission_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

func Example() {
	c, err := admission.New(admission.Settings{MaxInflightPerWorker: 1, QueueSize: 1, QueueTimeout: time.Minute}, admission.Deps{})
	if err != nil {
		panic(err)
	}
	workers := []string{"http://prefill-0:8000"}
	// The placement callback: drop workers at their limit, run the policy.
	req := admission.Request{Queue: "llama-3", Select: func(hasCapacity func(string) bool) (string, error) {
		for _, w := range workers {
			if hasCapacity(w) {
				return w, nil
			}
		}
		return "", admission.ErrNoCapacity
	}}
	ctx := context.Background()

	first, _ := c.Acquire(ctx, req)
	fmt.Println("first on", first.Worker())

	second := make(chan *admission.Slot)
	go func() {
		s, _ := c.Acquire(ctx, req)
		second <- s
	}()
	for c.Status().QueuedTotal == 0 {
		runtime.Gosched()
	}
	_, err = c.Acquire(ctx, req)
	fmt.Println("third:", admission.OutcomeOf(err), errors.Is(err, admission.ErrRejected))

	// Two prefill sub-requests (n=2) share the first slot.
	g1, g2 := first.Guard(), first.Guard()
	first.Release(admission.ReleaseCompleted)
	g1.Release(admission.ReleaseCompleted)
	fmt.Println("in flight:", c.Status().Inflight[workers[0]])
	g2.Release(admission.ReleaseCompleted) // the last holder frees the slot

	s := <-second
	defer s.Release(admission.ReleaseCompleted)
	fmt.Println("second on", s.Worker())
	// Output:
	// first on http://prefill-0:8000
	// third: queue_full true
	// in flight: 1
	// second on http://prefill-0:8000
}
