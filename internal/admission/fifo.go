package admission

import "container/list"

// fifo serves waiters in arrival order. Each band keeps one whatever its
// fairness: a band ranks by its oldest waiter (bands.go), displacement takes
// its newest (displace.go), and a change of fairness rebuilds from it.
type fifo struct{ l list.List } // of *waiter

func (f *fifo) push(w *waiter) { w.elem = f.l.PushBack(w) }

func (f *fifo) remove(w *waiter) {
	f.l.Remove(w.elem)
	w.elem = nil
}

func (f *fifo) head() *waiter { return waiterAt(f.l.Front()) }

// last is the newest waiter; nil when empty.
func (f *fifo) last() *waiter { return waiterAt(f.l.Back()) }

func (f *fifo) ahead(newcomer) int { return f.l.Len() }

func (f *fifo) len() int { return f.l.Len() }

func waiterAt(e *list.Element) *waiter {
	if e == nil {
		return nil
	}
	return e.Value.(*waiter)
}
