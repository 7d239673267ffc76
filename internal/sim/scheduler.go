package sim

import (
	"context"
	"errors"
	"sync"

	"github.com/sluicegw/sluice/internal/waitq"
)

// errTooLong: the request needs more KV than the engine has; it could never run.
var errTooLong = errors.New("request needs more KV cache than the engine's capacity")

// scheduler is one DP rank's continuous-batching admission: at most maxRunning running requests holding
// at most kvCap tokens of KV, and a FIFO waiting queue. It also owns the rank's single prefill executor.
type scheduler struct {
	mu         sync.Mutex
	maxRunning int
	kvCap      int64
	running    int
	kvUsed     int64
	waiting    waitq.Queue[int64] // of the KV tokens each needs
	maxWaiting int

	prefillBusy    bool
	prefillWaiting waitq.Queue[struct{}]

	// The pre-allocation stage of an SGLang decode (decode.go); preSlots 0 means the rank has none.
	// preHeld requests hold a request slot and their KV (counted in kvUsed) from pre-allocation
	// until their decode ends; preWaiting are the requests still waiting for one, FIFO.
	preSlots   int
	preHeld    int
	preWaiting waitq.Queue[int64]
}

func newScheduler(maxRunning int, kvCap int64) *scheduler {
	return &scheduler{maxRunning: maxRunning, kvCap: kvCap}
}

func (s *scheduler) fits(need int64) bool {
	return s.running < s.maxRunning && s.kvUsed+need <= s.kvCap
}

// admit blocks until the request may run with need tokens of KV, FIFO. On success the caller must call
// release(need) exactly once.
func (s *scheduler) admit(ctx context.Context, need int64) error {
	s.mu.Lock()
	if need > s.kvCap {
		s.mu.Unlock()
		return errTooLong
	}
	if s.waiting.Len() == 0 && s.fits(need) {
		s.running++
		s.kvUsed += need
		s.mu.Unlock()
		return nil
	}
	w := s.waiting.Push(need)
	s.maxWaiting = max(s.maxWaiting, s.waiting.Len()+s.preWaiting.Len())
	s.mu.Unlock()
	return s.wait(ctx, &s.waiting, w, func() {
		s.running--
		s.kvUsed -= need
	})
}

// wait blocks until w is granted or ctx ends. On giving up it settles the race under the lock: a grant
// already made is handed back with giveBack; otherwise w leaves q. Either way the lists are granted
// again, since what w held or blocked may now fit the waiters behind it.
func (s *scheduler) wait(ctx context.Context, q *waitq.Queue[int64], w *waitq.Waiter[int64], giveBack func()) error {
	select {
	case <-w.Ready():
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if granted, wasFront := q.Cancel(w); granted {
			giveBack()
			s.grantLocked()
			s.grantPreLocked()
		} else if wasFront {
			s.grantLocked()
			s.grantPreLocked()
		}
		return ctx.Err()
	}
}

// release gives back an admitted request's slot and KV.
func (s *scheduler) release(need int64) {
	s.mu.Lock()
	s.running--
	s.kvUsed -= need
	s.grantLocked()
	s.grantPreLocked()
	s.mu.Unlock()
}

// grantLocked admits waiters from the front while they fit; strictly FIFO so a large request is not starved.
func (s *scheduler) grantLocked() {
	s.waiting.GrantWhile(func(need int64) bool {
		if !s.fits(need) {
			return false
		}
		s.running++
		s.kvUsed += need
		return true
	})
}

// acquirePrefill blocks until the prefill executor is free, FIFO. On success call releasePrefill once.
func (s *scheduler) acquirePrefill(ctx context.Context) error {
	s.mu.Lock()
	if !s.prefillBusy && s.prefillWaiting.Len() == 0 {
		s.prefillBusy = true
		s.mu.Unlock()
		return nil
	}
	w := s.prefillWaiting.Push(struct{}{})
	s.mu.Unlock()
	select {
	case <-w.Ready():
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if granted, _ := s.prefillWaiting.Cancel(w); granted {
			s.handOffPrefillLocked()
		}
		return ctx.Err()
	}
}

func (s *scheduler) releasePrefill() {
	s.mu.Lock()
	s.handOffPrefillLocked()
	s.mu.Unlock()
}

// handOffPrefillLocked passes the (busy) executor to the next waiter, or frees it.
func (s *scheduler) handOffPrefillLocked() {
	w := s.prefillWaiting.Front()
	if w == nil {
		s.prefillBusy = false
		return
	}
	s.prefillWaiting.Grant(w)
}

type schedSnapshot struct {
	running, waiting, maxWaiting, prefillQueue int
	// preWaiting counts an SGLang decode's requests waiting for pre-allocation, preHeld those holding one.
	preWaiting, preHeld int
	// prefillWaiting counts the admitted requests queued for the prefill executor, not yet started.
	prefillWaiting int
	kvUsed, kvCap  int64
}

// reportedRunning and reportedWaiting are the load as the engines report it (SGLang's get_load and
// /v1/loads, vLLM's gauges, the worker protocol's GetLoad): a request admitted here but still queued for
// the prefill executor has not started computing, so it counts as waiting, as SGLang counts its
// waiting queue (scheduler.py get_load: len(self.waiting_queue), plus the bootstrap queue on a prefill
// server and the pre-allocation queue on a decode server) rather than as running.
func (s schedSnapshot) reportedRunning() int { return s.running - s.prefillWaiting }
func (s schedSnapshot) reportedWaiting() int { return s.waiting + s.prefillWaiting + s.preWaiting }

func (s *scheduler) snapshot() schedSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	pq := s.prefillWaiting.Len()
	if s.prefillBusy {
		pq++
	}
	return schedSnapshot{
		preWaiting: s.preWaiting.Len(), preHeld: s.preHeld,
		running: s.running, waiting: s.waiting.Len(), maxWaiting: s.maxWaiting,
		prefillQueue: pq, prefillWaiting: s.prefillWaiting.Len(), kvUsed: s.kvUsed, kvCap: s.kvCap,
	}
}

func (s *scheduler) resetMaxWaiting() {
	s.mu.Lock()
	s.maxWaiting = s.waiting.Len() + s.preWaiting.Len()
	s.mu.Unlock()
}
