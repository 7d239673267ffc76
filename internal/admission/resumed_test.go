package admission_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/sluicegw/sluice/internal/admission"
)

// only is a selection that wants worker w alone.
func only(w string) func(func(string) bool) (string, error) {
	return func(hasCapacity func(string) bool) (string, error) {
		if hasCapacity(w) {
			return w, nil
		}
		return "", admission.ErrNoCapacity
	}
}

// TestResumedSelectsAheadOfTheWaiters: the head waits for worker A (full) while B is free. A newcomer
// that would take B queues behind the head, as the FIFO contract says; a Resumed request (a migrated
// stream's continuation, which already waited once) takes B at once. Everything is given back.
func TestResumedSelectsAheadOfTheWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mustNew(t, on(1, 10), admission.Deps{})
		held, err := c.Acquire(bg, admission.Request{Queue: "m", Select: only("A")})
		if err != nil {
			t.Fatal(err)
		}
		type got struct {
			s   *admission.Slot
			err error
		}
		wait := func(ctx context.Context, r admission.Request) <-chan got {
			ch := make(chan got, 1)
			go func() {
				s, err := c.Acquire(ctx, r)
				ch <- got{s, err}
			}()
			return ch
		}
		head := wait(bg, admission.Request{Queue: "m", Select: only("A")})
		synctest.Wait()
		ctx, cancel := context.WithCancel(bg)
		newcomer := wait(ctx, admission.Request{Queue: "m", Select: only("B")})
		synctest.Wait()
		if q := c.Status().QueuedTotal; q != 2 {
			t.Fatalf("queued = %d, want the head and the newcomer behind it", q)
		}
		resumed, err := c.Acquire(bg, admission.Request{Queue: "m", Select: only("B"), Resumed: true})
		if err != nil || resumed.Worker() != "B" {
			t.Fatalf("resumed request: %v on %v, want B at once", err, resumed)
		}
		if st := c.Status(); st.QueuedTotal != 2 || st.Inflight["B"] != 1 {
			t.Fatalf("after the resumed grant: queued %d, B in flight %d", st.QueuedTotal, st.Inflight["B"])
		}
		cancel()
		if r := <-newcomer; r.err == nil {
			t.Fatalf("the newcomer got %s while the head waited", r.s.Worker())
		}
		held.Release(admission.ReleaseCompleted)
		h := <-head
		if h.err != nil || h.s.Worker() != "A" {
			t.Fatalf("head: %v", h.err)
		}
		h.s.Release(admission.ReleaseCompleted)
		resumed.Release(admission.ReleaseCompleted)
		if st := c.Status(); st.QueuedTotal != 0 || st.Inflight["A"] != 0 || st.Inflight["B"] != 0 {
			t.Fatalf("not everything given back: %+v", st)
		}
	})
}
