package admission

import "github.com/sluicegw/sluice/internal/waitq"

// fifo serves waiters in arrival order. Each band keeps one whatever its
// fairness: a band ranks by its oldest waiter (bands.go), displacement takes
// its newest (displace.go), and a change of fairness rebuilds from it.
//
// It is the queue's waiter list, the gateway's one FIFO of waiters (waitq,
// shared with concurrency's limiter and the simulator): a waiter leaves it
// answered (granted, or failed with a final error: waitq's Take, and
// removeLocked wakes it last) or cancelled (its goroutine gave up: it is
// never answered).
type fifo struct{ q waitq.Queue[*waiter] }

func (f *fifo) push(w *waiter) {
	w.Value = w // the list gives back the waiter that embeds its entry
	f.q.PushWaiter(&w.Waiter)
}

func (f *fifo) remove(w *waiter) {
	if w.state == waiting {
		f.q.Cancel(&w.Waiter)
		return
	}
	f.q.Take(&w.Waiter)
}

func (f *fifo) head() *waiter { return valueOf(f.q.Front()) }

// last is the newest waiter; nil when empty.
func (f *fifo) last() *waiter { return valueOf(f.q.Back()) }

func (f *fifo) ahead(newcomer) int { return f.q.Len() }

func (f *fifo) len() int { return f.q.Len() }

// each calls fn for the waiters, oldest first, until it returns false.
func (f *fifo) each(fn func(w *waiter) bool) {
	f.q.Each(func(e *waitq.Waiter[*waiter]) bool { return fn(e.Value) })
}

func valueOf(e *waitq.Waiter[*waiter]) *waiter {
	if e == nil {
		return nil
	}
	return e.Value
}
