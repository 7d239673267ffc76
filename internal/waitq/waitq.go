// Package waitq is the FIFO list of waiters that the gateway's and the simulator's queues share: each
// waiter has its own channel, closed to grant it (golang.org/x/sync/semaphore's shape), and the list is
// guarded by its owner's mutex, so an owner can keep several lists and its own counters under one lock.
//
// # Concurrency Model
//
// A Queue has no lock of its own: every method must be called with the owner's mutex held. A waiting
// goroutine blocks on Waiter.Ready without the lock. When it gives up (its context ends, a timeout), it
// takes the lock and calls Queue.Cancel, which settles the race with a grant: either the grant had already
// happened (Cancel reports it, and the owner gives the grant back) or the waiter is removed and can never
// be granted. Cancellation therefore beats a grant that has not happened yet, and a grant that has is
// returned exactly once.
package waitq

// Waiter is one queued request; Value is the owner's data about it (what it needs, when it came).
type Waiter[T any] struct {
	Value      T
	ready      chan struct{}
	prev, next *Waiter[T] // in its queue, oldest first; linked in the waiter itself, so a Push allocates once
	queued     bool
	granted    bool
}

// Ready is closed when the waiter is granted.
func (w *Waiter[T]) Ready() <-chan struct{} { return w.ready }

// Granted reports whether the waiter was granted. Call it with the owner's mutex held.
func (w *Waiter[T]) Granted() bool { return w.granted }

// Queue is a FIFO list of waiters. The zero value is an empty queue.
type Queue[T any] struct {
	front, back *Waiter[T]
	n           int
}

// Len is the number of waiters not yet granted or removed.
func (q *Queue[T]) Len() int { return q.n }

// Push queues a waiter for v at the back.
func (q *Queue[T]) Push(v T) *Waiter[T] {
	w := &Waiter[T]{Value: v}
	q.PushWaiter(w)
	return w
}

// PushWaiter queues w at the back. w is a new Waiter (a zero value, with Value set): an owner that
// embeds Waiter in its own waiter type queues it so, which saves Push's allocation.
func (q *Queue[T]) PushWaiter(w *Waiter[T]) {
	w.ready, w.prev, w.queued = make(chan struct{}), q.back, true
	if q.back != nil {
		q.back.next = w
	} else {
		q.front = w
	}
	q.back = w
	q.n++
}

// Front is the oldest waiter, or nil.
func (q *Queue[T]) Front() *Waiter[T] { return q.front }

// Back is the newest waiter, or nil.
func (q *Queue[T]) Back() *Waiter[T] { return q.back }

// unlink takes w, queued in q, out of it.
func (q *Queue[T]) unlink(w *Waiter[T]) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.front = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.back = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.n--
}

// Grant removes w from the queue and closes its Ready channel. w must be queued in q.
func (q *Queue[T]) Grant(w *Waiter[T]) {
	q.Take(w)
	w.Wake()
}

// Take is the first half of Grant: it removes w from the queue as granted (Cancel reports the grant)
// but leaves its Ready channel open until Wake. An owner that also wakes other goroutines under its
// lock (the next head of its queue) wakes the granted one last: the Go scheduler runs the goroutine
// readied last first, and the granted one has the work to do. w must be queued in q.
func (q *Queue[T]) Take(w *Waiter[T]) {
	q.unlink(w)
	w.granted = true
}

// Wake closes the Ready channel of a waiter Take removed; once, with the owner's mutex held.
func (w *Waiter[T]) Wake() { close(w.ready) }

// GrantWhile grants waiters from the front while take accepts the front one, strictly in order: a
// waiter that does not fit holds back the ones behind it, so a large request is never starved by small
// ones. take is called with the owner's lock held and, when it returns true, has already charged the
// grant to the owner's counters. It returns how many were granted.
func (q *Queue[T]) GrantWhile(take func(v T) bool) int {
	n := 0
	for w := q.front; w != nil && take(w.Value); w = q.front {
		q.Grant(w)
		n++
	}
	return n
}

// Cancel settles a waiter that gives up. If it was granted already, Cancel returns granted true and the
// caller must give the grant back. Otherwise it is removed (it will never be granted) and wasFront says
// whether it was at the head, in which case the caller should grant again: the waiter behind it may fit.
func (q *Queue[T]) Cancel(w *Waiter[T]) (granted, wasFront bool) {
	if w.granted {
		return true, false
	}
	if !w.queued {
		return false, false // already cancelled
	}
	wasFront = q.front == w
	q.unlink(w)
	return false, wasFront
}

// Each calls f for the waiters from the front until f returns false. f must not remove waiters.
func (q *Queue[T]) Each(f func(w *Waiter[T]) bool) {
	for w := q.front; w != nil; w = w.next {
		if !f(w) {
			return
		}
	}
}
