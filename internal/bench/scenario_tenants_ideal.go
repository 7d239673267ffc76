package bench

import (
	"container/heap"
	"math/rand/v2"
	"slices"
)

// idealGate is the best a gate that never preempts can do for the quiet tenants of the tenants
// scenario: a discrete-event model of slots identical prefill slots, each serving one request at a
// time for its prompt's prefill time, with the quiet requests (Poisson, quietRate a second) served
// strictly first and in arrival order, and, when noisy, a flood that takes every slot no quiet request
// is waiting for. It returns the quiet requests' TTFT p99 (wait + own prefill, seconds) with the flood
// and without it. Nothing of the gateway, the engines' decode or the network is in it, so its ratio
// is the floor of what the scenario can measure: a work-conserving gate cannot leave a slot idle for
// a quiet request that has not arrived, so a quiet arrival under the flood waits for the first of the
// running prefills to end. With random, the waiting quiet requests are served in random order instead
// (what "the most under-served tenant first" comes to between quiet tenants of nearly equal rates).
func idealGate(slots int, quietRate float64, prefill func(*rand.Rand) float64, requests int, seed uint64, random bool) (flood, alone float64) {
	return idealGateRun(slots, quietRate, prefill, requests, seed, true, random), idealGateRun(slots, quietRate, prefill, requests, seed, false, random)
}

func idealGateRun(slots int, quietRate float64, prefill func(*rand.Rand) float64, requests int, seed uint64, noisy, random bool) float64 {
	r := rand.New(rand.NewPCG(seed, 0x1dea1))
	var ends endHeap // running prefills' end times
	var waiting []float64
	ttft := make([]float64, 0, requests)
	free := slots
	fill := func(now float64) {
		for free > 0 && len(waiting) > 0 {
			s := prefill(r)
			k := 0
			if random {
				k = r.IntN(len(waiting))
			}
			ttft = append(ttft, now-waiting[k]+s)
			waiting = slices.Delete(waiting, k, k+1)
			heap.Push(&ends, now+s)
			free--
		}
		for noisy && free > 0 {
			heap.Push(&ends, now+prefill(r))
			free--
		}
	}
	next := r.ExpFloat64() / quietRate
	fill(0)
	for len(ttft) < requests {
		if ends.Len() > 0 && ends[0] < next {
			now := heap.Pop(&ends).(float64)
			free++
			fill(now)
			continue
		}
		waiting = append(waiting, next)
		now := next
		next += r.ExpFloat64() / quietRate
		fill(now)
	}
	slices.Sort(ttft)
	return Percentile(ttft, 0.99)
}

type endHeap []float64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(float64)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
