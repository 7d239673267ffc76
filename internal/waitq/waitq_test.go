package waitq_test

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/internal/waitq"
)

func TestGrantWhileIsStrictlyFIFO(t *testing.T) {
	var q waitq.Queue[int]
	ws := []*waitq.Waiter[int]{q.Push(2), q.Push(5), q.Push(1)}
	free := 4
	take := func(need int) bool {
		if need > free {
			return false
		}
		free -= need
		return true
	}
	if n := q.GrantWhile(take); n != 1 {
		t.Fatalf("granted %d, want 1: the 5 must hold back the 1 behind it", n)
	}
	if !isClosed(ws[0].Ready()) || isClosed(ws[1].Ready()) || isClosed(ws[2].Ready()) {
		t.Fatal("only the first waiter may be granted")
	}
	free += 4
	if n := q.GrantWhile(take); n != 2 || q.Len() != 0 {
		t.Fatalf("granted %d (len %d), want the last two", n, q.Len())
	}
}

func TestCancel(t *testing.T) {
	var q waitq.Queue[string]
	a, b := q.Push("a"), q.Push("b")
	if granted, wasFront := q.Cancel(b); granted || wasFront {
		t.Fatalf("Cancel(b) = %v, %v; want removed, not the front", granted, wasFront)
	}
	if granted, _ := q.Cancel(b); granted || q.Len() != 1 {
		t.Fatal("a second Cancel must be a no-op")
	}
	q.Grant(a)
	if granted, _ := q.Cancel(a); !granted {
		t.Fatal("Cancel after a grant must report the grant, to be given back")
	}
	c := q.Push("c")
	if _, wasFront := q.Cancel(c); !wasFront {
		t.Fatal("the only waiter is the front")
	}
}

// TestEveryGrantCountedOnce: many goroutines acquire a bounded resource through one Queue, some give up
// at random; at the end nothing is held and no waiter is left, so each grant was taken or given back
// exactly once. Run with -race.
func TestEveryGrantCountedOnce(t *testing.T) {
	const capacity, goroutines, rounds = 3, 16, 200
	var (
		mu   sync.Mutex
		q    waitq.Queue[int]
		held int
	)
	take := func(need int) bool {
		if held+need > capacity {
			return false
		}
		held += need
		return true
	}
	release := func(need int) {
		mu.Lock()
		held -= need
		q.GrantWhile(take)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range rounds {
				need := 1 + r.IntN(capacity)
				mu.Lock()
				if q.Len() == 0 && take(need) {
					mu.Unlock()
					release(need)
					continue
				}
				w := q.Push(need)
				mu.Unlock()
				if r.IntN(2) == 0 { // give up at once, racing any grant
					mu.Lock()
					granted, wasFront := q.Cancel(w)
					switch {
					case granted:
						held -= need
						q.GrantWhile(take)
					case wasFront:
						q.GrantWhile(take)
					}
					mu.Unlock()
					continue
				}
				<-w.Ready()
				release(need)
			}
		})
	}
	wg.Wait()
	if held != 0 || q.Len() != 0 {
		t.Fatalf("held %d, queued %d at the end; want 0 and 0", held, q.Len())
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestMatchesASlice: random pushes, cancellations (anywhere in the queue) and grants of the front keep
// Front, Back, Len and Each in step with a slice holding the same waiters.
func TestMatchesASlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 33))
	var q waitq.Queue[int]
	var model []*waitq.Waiter[int]
	for op := range 5000 {
		switch r := rng.IntN(10); {
		case r < 5 || len(model) == 0:
			model = append(model, q.Push(op))
		case r < 8:
			i := rng.IntN(len(model))
			if granted, wasFront := q.Cancel(model[i]); granted || wasFront != (i == 0) {
				t.Fatalf("op %d: Cancel(#%d) = %v, %v", op, i, granted, wasFront)
			}
			model = append(model[:i], model[i+1:]...)
		default:
			q.Grant(model[0])
			model = model[1:]
		}
		if q.Len() != len(model) {
			t.Fatalf("op %d: Len %d, want %d", op, q.Len(), len(model))
		}
		var front, back *waitq.Waiter[int]
		if len(model) > 0 {
			front, back = model[0], model[len(model)-1]
		}
		if q.Front() != front || q.Back() != back {
			t.Fatalf("op %d: Front/Back differ from the model", op)
		}
		i := 0
		q.Each(func(w *waitq.Waiter[int]) bool {
			if i >= len(model) || w != model[i] {
				t.Fatalf("op %d: Each's waiter %d differs from the model", op, i)
			}
			i++
			return true
		})
		if i != len(model) {
			t.Fatalf("op %d: Each visited %d of %d", op, i, len(model))
		}
	}
}

// TestPushWaiterEmbedded: an owner's waiter type embedding Waiter queues, is granted and cancels
// through the same Queue as Push's waiters, in arrival order with them.
func TestPushWaiterEmbedded(t *testing.T) {
	type own struct {
		waitq.Waiter[*own]
		name string
	}
	var q waitq.Queue[*own]
	a, b := &own{name: "a"}, &own{name: "b"}
	a.Value, b.Value = a, b
	q.PushWaiter(&a.Waiter)
	c := q.Push(&own{name: "c"})
	q.PushWaiter(&b.Waiter)
	if q.Len() != 3 || q.Front().Value != a || q.Back().Value != b {
		t.Fatal("PushWaiter and Push must queue in arrival order")
	}
	if granted, wasFront := q.Cancel(c); granted || wasFront {
		t.Fatal("c is neither granted nor the front")
	}
	q.Grant(q.Front())
	if !isClosed(a.Ready()) || isClosed(b.Ready()) || q.Front().Value != b {
		t.Fatal("granting the front must answer a alone and leave b the front")
	}
}

// TestTakeThenWake: Take grants without waking (Cancel sees the grant, Ready stays open) until Wake.
func TestTakeThenWake(t *testing.T) {
	var q waitq.Queue[int]
	a, b := q.Push(1), q.Push(2)
	q.Take(a)
	if q.Len() != 1 || q.Front() != b || isClosed(a.Ready()) {
		t.Fatal("Take must remove a without closing its Ready channel")
	}
	if granted, _ := q.Cancel(a); !granted {
		t.Fatal("Cancel after Take must report the grant")
	}
	a.Wake()
	if !isClosed(a.Ready()) {
		t.Fatal("Wake must close Ready")
	}
}
