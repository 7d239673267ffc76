package placement

import (
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// Picks carries one request's predicted_latency picks from placement to the dispatcher, which
// reports when the request's first token came ([Picks.FirstToken]) and when it ended ([Picks.Done]).
// The dispatcher sets Request.Picks when a policy of its Set is predicted_latency; a copy of the
// Request shares it, so every attempt's pick lands in one place. A nil *Picks records nothing.
//
// A pick adds its uncached prompt to its worker's queued work (a feature of the model); the work is
// taken off at the first token, at the end of the request, or when the same policy picks again for
// the request (a retry), whichever comes first, exactly once.
type Picks struct {
	mu  sync.Mutex // picks may come from an admission head's goroutine, the first token from the relay's
	all []pickRecord
}

// pickRecord is one policy's latest pick for the request.
type pickRecord struct {
	policy    *PredictedLatency
	st        *predState
	worker    string
	x         [nFeatures]float64
	work      int64     // characters added to st.queued
	predicted float64   // seconds; negative when the model was cold or the pick a refresh
	at        time.Time // the pick, by the policy's clock
	open      bool      // work is still on st.queued
	first     bool      // the request's first token came (FirstToken)
	itlSeen   bool      // its inter-token latency was learned (Finished)
}

// Outcome is a request's prediction against its measurement, for metrics: the worker the first
// predicted_latency pick chose, the TTFT its model predicted (Predicted false: the model was cold)
// and the TTFT measured from that pick.
type Outcome struct {
	Worker              string
	Predicted           bool
	PredictedTTFT, TTFT time.Duration
}

func (p *Picks) record(r pickRecord) {
	if p == nil {
		return
	}
	r.open = true
	r.st.queued.Add(r.work)
	r.st.open.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.all {
		if p.all[i].policy == r.policy {
			p.all[i].release()
			p.all[i] = r
			return
		}
	}
	p.all = append(p.all, r)
}

func (r *pickRecord) release() {
	if r.open {
		r.open = false
		r.st.queued.Add(-r.work)
		r.st.open.Add(-1)
	}
}

// FirstToken reports that the request's first token arrived: every open pick's measured TTFT is fed
// to its worker's model and its work released. It returns the first pick's outcome; ok is false
// when there was none (or the first token was already reported).
func (p *Picks) FirstToken() (o Outcome, ok bool) {
	if p == nil {
		return Outcome{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.all {
		r := &p.all[i]
		if !r.open {
			continue
		}
		ttft := r.policy.cfg.Now().Sub(r.at)
		r.first = true
		r.release()
		r.policy.observe(r.st, r.x, ttft.Seconds())
		if !ok {
			o, ok = Outcome{Worker: r.worker, Predicted: r.predicted >= 0, TTFT: ttft,
				PredictedTTFT: time.Duration(r.predicted * float64(time.Second))}, true
		}
	}
	return o, ok
}

// Finished reports the mean inter-token latency of the finished request's stream, which worker
// generated: the picks of that worker whose first token came learn it (a prefill worker's pick in
// PD mode does not: the decode worker set the pace).
func (p *Picks) Finished(worker string, itl time.Duration) {
	if p == nil || itl <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.all {
		if r := &p.all[i]; r.first && !r.itlSeen && r.worker == worker {
			r.itlSeen = true
			r.policy.observeITL(r.st, r.x[featLoad], itl.Seconds())
		}
	}
}

// prefillPick is the open pick of prefill worker url by a predicted_latency policy other than self
// (the prefill side's, for the decode side's pair scoring); ok is false when there is none.
func (p *Picks) prefillPick(url string, self *PredictedLatency) (r pickRecord, ok bool) {
	if p == nil {
		return pickRecord{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.all {
		if r.open && r.policy != self && r.worker == url {
			return r, true
		}
	}
	return pickRecord{}, false
}

// Paired reports the decode partner dw chosen for prefill worker pw: the prefill pick's pair features
// become those of the pair that runs, so its model learns what that partner added to the TTFT.
func (p *Picks) Paired(pw, dw *worker.Worker) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.all {
		if r := &p.all[i]; r.open && r.worker == pw.URL() {
			pairFeatures(&r.x, pw, dw)
		}
	}
}

// Done reports that the request ended: work still queued (no first token came) is released, and
// nothing is learned from it.
func (p *Picks) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.all {
		p.all[i].release()
	}
}
