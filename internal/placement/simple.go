package placement

import (
	"sync/atomic"

	"github.com/sluicegw/sluice/internal/worker"
)

// randIndex maps a random 64-bit value to [0, n) with Lemire's
// multiply-shift (no division, bias below 2^-32 for realistic n).
func randIndex(r uint64, n int) int {
	hi := (r >> 32) * uint64(n)
	return int(hi >> 32)
}

// Random picks a uniformly random candidate.
type Random struct{ rand func() uint64 }

func newRandom(r func() uint64) *Random { return &Random{rand: r} }

// Name implements Policy.
func (*Random) Name() string { return PolicyRandom }

// Pick implements Policy.
func (p *Random) Pick(cands []*worker.Worker, _ *Request) int {
	if len(cands) == 0 {
		return -1
	}
	return randIndex(p.rand(), len(cands))
}

// RoundRobin cycles through the candidates with one shared atomic counter.
type RoundRobin struct{ next atomic.Uint64 }

// Name implements Policy.
func (*RoundRobin) Name() string { return PolicyRoundRobin }

// Pick implements Policy.
func (p *RoundRobin) Pick(cands []*worker.Worker, _ *Request) int {
	if len(cands) == 0 {
		return -1
	}
	return int((p.next.Add(1) - 1) % uint64(len(cands)))
}

// PowerOfTwo samples two distinct random candidates and picks the one with
// the lower load (the first on a tie).
type PowerOfTwo struct{ rand func() uint64 }

func newPowerOfTwo(r func() uint64) *PowerOfTwo { return &PowerOfTwo{rand: r} }

// Name implements Policy.
func (*PowerOfTwo) Name() string { return PolicyPowerOfTwo }

// Pick implements Policy.
func (p *PowerOfTwo) Pick(cands []*worker.Worker, _ *Request) int {
	switch n := len(cands); n {
	case 0:
		return -1
	case 1:
		return 0
	default:
		r := p.rand()
		i := randIndex(r, n)
		// The low half of the same draw picks the second, distinct index.
		j := randIndex(r<<32, n-1)
		if j >= i {
			j++
		}
		if cands[j].Load() < cands[i].Load() {
			return j
		}
		return i
	}
}
