package admission_test

import (
	"errors"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// pairPlacement is a fake PD placement: prefill workers and decode workers
// of one pool, first fit on each side, the decode side checked first (as
// the contract asks, so the prefill "policy" never records a refused pick).
// A decode target makes the pair selection strict on that decode worker.
type pairPlacement struct {
	mu      sync.Mutex
	prefill []string
	decode  []string
	vetoed  map[string]bool // decode workers vetoed by engine load
	picks   []string        // request ids, in admission order
	onPick  func(id string)
	selects int // prefill-only Select calls
}

func newPairPlacement(prefill, decode []string) *pairPlacement {
	return &pairPlacement{prefill: prefill, decode: decode, vetoed: map[string]bool{}}
}

func (p *pairPlacement) req(id, decodeTarget string) admission.Request {
	return p.reqMode(id, decodeTarget, modePair)
}

// Local prefill modes of a fake request (seat-only grants).
const (
	modePair  = iota // always a pair
	modeLocal        // always seat-only (a short prompt)
	modeSpill        // seat-only when no prefill worker has a slot
)

// reqMode is req whose pair selection may grant a seat alone (mode).
func (p *pairPlacement) reqMode(id, decodeTarget string, mode int) admission.Request {
	return admission.Request{
		Queue: "m",
		Select: func(hasCap func(string) bool) (string, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.selects++
			for _, w := range p.prefill {
				if hasCap(w) {
					p.picks = append(p.picks, id)
					return w, nil
				}
			}
			return "", admission.ErrNoCapacity
		},
		SelectPair: func(hasSlot, hasSeat func(string) bool) (string, string, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.prefill) == 0 || len(p.decode) == 0 {
				return "", "", errNoWorkers
			}
			dec := ""
			for _, d := range p.decode {
				if (decodeTarget == "" || d == decodeTarget) && !p.vetoed[d] && hasSeat(d) {
					dec = d
					break
				}
			}
			if dec == "" {
				return "", "", admission.ErrNoSeat
			}
			if mode == modeLocal {
				p.picks = append(p.picks, id)
				if p.onPick != nil {
					p.onPick(id)
				}
				return "", dec, nil
			}
			for _, w := range p.prefill {
				if hasSlot(w) {
					p.picks = append(p.picks, id)
					if p.onPick != nil {
						p.onPick(id)
					}
					return w, dec, nil
				}
			}
			if mode == modeSpill {
				p.picks = append(p.picks, id)
				if p.onPick != nil {
					p.onPick(id)
				}
				return "", dec, nil
			}
			return "", "", admission.ErrNoCapacity
		},
	}
}

func (p *pairPlacement) pickIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.picks...)
}

// seatMetrics is fakeMetrics plus the decode series; it flags a seat count
// above bound.
type seatMetrics struct {
	*fakeMetrics
	smu        sync.Mutex
	bound      int
	seats      map[string]int
	limits     map[string]int
	decodeWait int
	seatViol   []string
}

func newSeatMetrics(bound int) *seatMetrics {
	return &seatMetrics{fakeMetrics: newFakeMetrics(), bound: bound, seats: map[string]int{}, limits: map[string]int{}}
}

func (m *seatMetrics) SetSeats(w string, n int) {
	m.smu.Lock()
	defer m.smu.Unlock()
	if n < 0 {
		m.seatViol = append(m.seatViol, "negative seats on "+w)
	}
	if m.bound > 0 && n > m.seats[w] && n > m.bound {
		m.seatViol = append(m.seatViol, "seat over the bound on "+w)
	}
	m.seats[w] = n
}

func (m *seatMetrics) SetSeatLimit(w string, n int) {
	m.smu.Lock()
	defer m.smu.Unlock()
	m.limits[w] = n
}

func (m *seatMetrics) ObserveDecodeWait(string, time.Duration) {
	m.smu.Lock()
	defer m.smu.Unlock()
	m.decodeWait++
}

func (m *seatMetrics) DeleteSeatWorker(w string) {
	m.smu.Lock()
	defer m.smu.Unlock()
	delete(m.seats, w)
	delete(m.limits, w)
}

func (m *seatMetrics) seatsOf(w string) int {
	m.smu.Lock()
	defer m.smu.Unlock()
	return m.seats[w]
}

func seatsOn(prefillLimit, seats, queue int) admission.Settings {
	s := on(prefillLimit, queue)
	s.DecodeMaxInflightPerWorker = seats
	return s
}

var errUnexpected = errors.New("unexpected")
