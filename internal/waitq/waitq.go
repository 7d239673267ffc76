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

import "container/list"

// Waiter is one queued request; Value is the owner's data about it (what it needs, when it came).
type Waiter[T any] struct {
	Value   T
	ready   chan struct{}
	elem    *list.Element
	granted bool
}

// Ready is closed when the waiter is granted.
func (w *Waiter[T]) Ready() <-chan struct{} { return w.ready }

// Granted reports whether the waiter was granted. Call it with the owner's mutex held.
func (w *Waiter[T]) Granted() bool { return w.granted }

// Queue is a FIFO list of waiters. The zero value is an empty queue.
type Queue[T any] struct {
	l list.List // of *Waiter[T], oldest first
}

// Len is the number of waiters not yet granted or removed.
func (q *Queue[T]) Len() int { return q.l.Len() }

// Push queues a waiter for v at the back.
func (q *Queue[T]) Push(v T) *Waiter[T] {
	w := &Waiter[T]{Value: v, ready: make(chan struct{})}
	w.elem = q.l.PushBack(w)
	return w
}

// Front is the oldest waiter, or nil.
func (q *Queue[T]) Front() *Waiter[T] {
	if e := q.l.Front(); e != nil {
		return e.Value.(*Waiter[T])
	}
	return nil
}

// Grant removes w from the queue and closes its Ready channel. w must be queued in q.
func (q *Queue[T]) Grant(w *Waiter[T]) {
	q.l.Remove(w.elem)
	w.elem = nil
	w.granted = true
	close(w.ready)
}

// GrantWhile grants waiters from the front while take accepts the front one, strictly in order: a
// waiter that does not fit holds back the ones behind it, so a large request is never starved by small
// ones. take is called with the owner's lock held and, when it returns true, has already charged the
// grant to the owner's counters. It returns how many were granted.
func (q *Queue[T]) GrantWhile(take func(v T) bool) int {
	n := 0
	for w := q.Front(); w != nil && take(w.Value); w = q.Front() {
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
	if w.elem == nil {
		return false, false // already cancelled
	}
	wasFront = q.l.Front() == w.elem
	q.l.Remove(w.elem)
	w.elem = nil
	return false, wasFront
}

// Each calls f for the waiters from the front until f returns false.
func (q *Queue[T]) Each(f func(w *Waiter[T]) bool) {
	for e := q.l.Front(); e != nil; e = e.Next() {
		if !f(e.Value.(*Waiter[T])) {
			return
		}
	}
}
