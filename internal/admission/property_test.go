package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/admission"
)

type opKind int

const (
	opAcquire opKind = iota
	opRelease
	opCancel
	opAdvance
	opRemoveWorker
	opAddWorker
	opToggleBreaker
	opUpdate
	opWake
	opDrain
)

func (k opKind) String() string {
	return [...]string{"acquire", "release", "cancel", "advance", "remove", "add", "breaker", "update", "wake", "drain"}[k]
}

type op struct {
	Kind   opKind
	Queue  int           // acquire
	Target int           // acquire: -1 any, else a strict target worker
	Index  int           // release, cancel; worker for remove/add/breaker
	D      time.Duration // advance
	Limit  int           // update (0 = off)
	Size   int           // update
	Tenant int           // acquire: its tenant, t0-t2 (ignored without tenancy)
	Mode   fairMode      // update: the fairness mode, in runs that change it live
}

var propWorkers = []string{"W0", "W1", "W2"}

const propTimeout = 3 * time.Second

func genOp() *rapid.Generator[op] {
	return genOpOf([]opKind{opAcquire, opAcquire, opAcquire, opAcquire, opRelease, opRelease, opRelease,
		opCancel, opAdvance, opAdvance, opRemoveWorker, opAddWorker, opToggleBreaker, opUpdate, opWake}, true)
}

// genOpOf draws ops of kinds (each as often as it is listed) and, rarely,
// a drain when drain is set.
func genOpOf(kinds []opKind, drain bool) *rapid.Generator[op] {
	return rapid.Custom(func(t *rapid.T) op {
		// Rare, since everything after a drain is refused.
		if drain && rapid.IntRange(0, 63).Draw(t, "drain") == 0 {
			return op{Kind: opDrain}
		}
		o := op{Kind: rapid.SampledFrom(kinds).Draw(t, "kind")}
		switch o.Kind {
		case opAcquire:
			o.Queue = rapid.IntRange(0, 1).Draw(t, "queue")
			o.Target = rapid.IntRange(-3, 2).Draw(t, "target") // mostly "any"
			o.Target = max(o.Target, -1)
			o.Tenant = rapid.IntRange(0, 2).Draw(t, "tenant")
		case opRelease, opCancel:
			o.Index = rapid.IntRange(0, 7).Draw(t, "index")
		case opAdvance:
			o.D = rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}).Draw(t, "d")
		case opRemoveWorker, opAddWorker, opToggleBreaker:
			o.Index = rapid.IntRange(0, len(propWorkers)-1).Draw(t, "worker")
		case opUpdate:
			o.Limit = rapid.IntRange(0, 3).Draw(t, "limit")
			o.Size = rapid.IntRange(0, 4).Draw(t, "size")
			o.Mode = fairMode(rapid.IntRange(0, 2).Draw(t, "mode"))
		}
		return o
	})
}

// TestPropertyAdmissionInvariants runs random sequences of acquire, release,
// cancel, time passing (timeouts, polls), worker churn, breaker flips and
// live updates, one step at a time inside a synctest bubble, and checks after
// every step: no reservation exceeds the limit, no counter goes negative,
// the controller's in-flight equals the slots the test holds, the queue holds
// exactly the callers still blocked, each queue admits in arrival order, and
// every caller ends exactly once with an expected outcome; at the end all
// counters are back to 0.
func TestPropertyAdmissionInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(1, 3).Draw(rt, "limit")
		size := rapid.IntRange(0, 4).Draw(rt, "size")
		ops := rapid.SliceOfN(genOp(), 1, 50).Draw(rt, "ops")
		var problems []string
		synctest.Test(t, func(t *testing.T) {
			problems = runProperty(limit, size, ops, admission.TenantSettings{}, false)
		})
		if len(problems) > 0 {
			rt.Fatalf("invariants broken:\n%v", problems)
		}
	})
}

type propWaiter struct {
	id     string
	ch     <-chan result
	cancel context.CancelFunc
}

type propSlot struct {
	slot    *admission.Slot
	guard   *admission.Guard
	counted bool
	stale   bool // its worker was removed since the grant
}

// runProperty runs ops and returns the invariants they broke. With
// liveModes, each update also switches tenants to the fairness mode it drew.
func runProperty(limit, size int, ops []op, tenants admission.TenantSettings, liveModes bool) (problems []string) {
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	cur := tenants
	settings := func(limit, size int) admission.Settings {
		return admission.Settings{MaxInflightPerWorker: limit, QueueSize: size, QueueTimeout: propTimeout, Tenants: cur}
	}
	// FIFO holds within each tenant whenever fairness is or was on (a switch
	// to one FIFO leaves earlier grants out of arrival order).
	perTenant := tenants.Fair || liveModes
	m := newFakeMetrics()
	m.setLimit(limit)
	p := newPlacement(map[string][]string{"q0": {"W0", "W1"}, "q1": {"W1", "W2"}})
	targets := map[string]string{} // waiter id -> strict target
	// Picks happen in other goroutines under p.mu: record there.
	lastSeq := map[string]int{}
	var fifo []string
	p.onPick = func(pk pick, hasCap func(string) bool) {
		var q string
		var seq int
		if _, err := fmt.Sscanf(pk.id, "%2s#%d", &q, &seq); err != nil {
			fifo = append(fifo, fmt.Sprintf("bad id %q", pk.id))
			return
		}
		if perTenant { // FIFO within a tenant only
			q += pk.id[strings.IndexByte(pk.id, '@'):]
		}
		if seq <= lastSeq[q] {
			fifo = append(fifo, fmt.Sprintf("FIFO broken in %s: #%d admitted after #%d", q, seq, lastSeq[q]))
		}
		lastSeq[q] = seq
	}
	c, err := admission.New(settings(limit, size), admission.Deps{Metrics: m})
	if err != nil {
		return []string{err.Error()}
	}
	enabled, curLimit := true, limit
	// dirty: a breaker closed with no event since; heads may legitimately
	// miss capacity until their next poll or an event.
	dirty := false
	pools := map[string][]string{"q0": {"W0", "W1"}, "q1": {"W1", "W2"}}
	var pending []propWaiter
	var held []propSlot
	seq := 0
	drained := false

	// collect takes the results of callers that returned during the step.
	collect := func(step int) {
		synctest.Wait()
		kept := pending[:0]
		for _, w := range pending {
			r, ok := done(w.ch)
			if !ok {
				kept = append(kept, w)
				continue
			}
			w.cancel()
			switch o := admission.OutcomeOf(r.err); {
			case drained && r.err == nil:
				fail("step %d: %s admitted after the drain", step, w.id)
				r.slot.Release(admission.ReleaseCompleted)
			case drained && o != admission.ShuttingDown && o != admission.Cancelled:
				fail("step %d: %s after the drain: %v, want ErrShuttingDown", step, w.id, r.err)
			case r.err == nil:
				held = append(held, propSlot{slot: r.slot, guard: r.slot.Guard(), counted: enabled})
			case o == admission.Unavailable && !errors.Is(r.err, errNoWorkers):
				fail("step %d: %s: unexpected error %v", step, w.id, r.err)
			}
		}
		pending = kept
	}
	check := func(step int) {
		st := c.Status()
		if st.QueuedTotal != len(pending) {
			fail("step %d: queued %d, but %d callers are blocked", step, st.QueuedTotal, len(pending))
		}
		want := map[string]int{}
		for _, h := range held {
			if h.counted && !h.stale {
				want[h.slot.Worker()]++
			}
		}
		for _, w := range propWorkers {
			if st.Inflight[w] != want[w] {
				fail("step %d: in-flight on %s = %d, held %d", step, w, st.Inflight[w], want[w])
			}
		}
		if dirty {
			return
		}
		// Liveness: no head waits while it could be admitted or failed.
		seen := map[string]bool{}
		for _, w := range pending {
			q := w.id[:2]
			if seen[q] {
				continue
			}
			seen[q] = true
			if cur.Fair {
				// The head is some waiter of q, not necessarily the oldest.
				var ok bool
				if w, ok = fairLivenessWaiter(pending, q, targets); !ok {
					continue
				}
			}
			var live []string
			available := false
			p.set(func(p *placement) {
				for _, c := range pools[q] {
					if p.down[c] || (targets[w.id] != "" && targets[w.id] != c) {
						continue
					}
					available = true
					if !p.open[c] {
						live = append(live, c)
					}
				}
			})
			if !available {
				fail("step %d: head %s waits though its model has no worker", step, w.id)
			}
			for _, c := range live {
				if want[c] < curLimit {
					fail("step %d: head %s waits while %s has capacity", step, w.id, c)
				}
			}
		}
	}

	for i, o := range ops {
		switch o.Kind {
		case opAcquire:
			seq++
			q := fmt.Sprintf("q%d", o.Queue)
			id := fmt.Sprintf("%s#%d@t%d", q, seq, o.Tenant)
			target := ""
			if o.Target >= 0 {
				target = propWorkers[o.Target]
			}
			targets[id] = target
			ctx, cancel := context.WithCancel(bg)
			r := p.req(q, id, target)
			r.Tenant = id[strings.IndexByte(id, '@')+1:]
			pending = append(pending, propWaiter{id: id, ch: goAcquire(ctx, c, r), cancel: cancel})
		case opRelease:
			if len(held) > 0 {
				j := o.Index % len(held)
				h := held[j]
				held = append(held[:j], held[j+1:]...)
				h.guard.Release(admission.ReleaseCompleted)
				h.slot.Release(admission.ReleaseFailed)
				h.slot.Release(admission.ReleaseFailed) // idempotent
				if h.counted {
					dirty = false // the release let every head select
				}
			}
		case opCancel:
			if len(pending) > 0 {
				pending[o.Index%len(pending)].cancel()
			}
		case opAdvance:
			time.Sleep(o.D)
			if o.D >= time.Second {
				dirty = false // every head polled
			}
		case opRemoveWorker:
			w := propWorkers[o.Index]
			p.set(func(p *placement) { p.down[w] = true })
			c.RemoveWorker(w)
			dirty = false // Wake below
			for j := range held {
				if held[j].slot.Worker() == w {
					held[j].stale = true
				}
			}
			c.Wake()
		case opAddWorker:
			w := propWorkers[o.Index]
			p.set(func(p *placement) { p.down[w] = false })
			c.Wake()
			dirty = false
		case opToggleBreaker:
			w := propWorkers[o.Index]
			p.set(func(p *placement) { p.open[w] = !p.open[w] }) // lazily: no event
			dirty = true
		case opUpdate:
			m.setLimit(o.Limit)
			if liveModes {
				cur = o.Mode.apply(tenants)
			}
			if err := c.Update(settings(o.Limit, o.Size)); err != nil {
				fail("step %d: Update: %v", i, err)
			}
			enabled, curLimit, dirty = o.Limit > 0, o.Limit, false
		case opWake:
			c.Wake()
			dirty = false
		case opDrain:
			c.Drain()
			drained = true
		}
		collect(i)
		if drained && len(pending) != 0 {
			fail("step %d: %d callers still blocked after the drain", i, len(pending))
		}
		check(i)
	}

	// Drain: every caller ends, every slot is released, counters return to 0.
	for _, w := range pending {
		w.cancel()
	}
	collect(len(ops))
	if len(pending) != 0 {
		fail("%d callers still blocked after cancellation", len(pending))
	}
	for _, h := range held {
		h.slot.Release(admission.ReleaseCompleted)
		h.guard.Release(admission.ReleaseCompleted)
	}
	held = nil
	check(len(ops))
	snap := m.snapshot()
	problems = append(problems, snap.violations...)
	p.set(func(*placement) { problems = append(problems, fifo...) })
	for w, n := range snap.inflight {
		if n != 0 {
			fail("in-flight gauge on %s = %d at the end", w, n)
		}
	}
	if snap.queued != 0 {
		fail("queued gauge = %d at the end", snap.queued)
	}
	return problems
}
