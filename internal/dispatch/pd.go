package dispatch

import (
	"context"
	"errors"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a PD request starts, whatever the engines: admission reserves a slot on a prefill worker chosen
// by the prefill policy among those whose KV handoff some routable decode worker speaks; the chosen
// worker's handoff then decides the flow, each in its own file:
//
//   - pd_sglang.go: SGLang's bootstrap handoff (both legs at once; n > 1 split into single samples);
//   - pd_vllm.go: vLLM's NIXL connector (prefill, then decode with kv_transfer_params);
//   - pd_mooncake.go: vLLM's Mooncake connector (both legs at once, the decode told where the KV is);
//   - pd_workerrpc.go: sluice.worker.v1 (both legs at once over gRPC).
//
// A new connector is one more pdAdapter and one more worker.Handoff.

// pdAdapter runs one PD attempt for pairs of one KV handoff.
type pdAdapter interface {
	// run sends the legs. It owns a.slot: it must release it on every path, as soon as the prefill
	// is over (read, failed or cancelled), independently of the decode.
	run(ctx context.Context, a *pdAttempt) (*Response, error)
}

// pdAttempt is one admitted PD attempt.
type pdAttempt struct {
	r    *Request
	br   *body.Request
	preq *placement.Request // the request's placement inputs (no handoff filter)
	slot *admission.Slot
	pw   *worker.Worker
	// dw is the decode worker admission chose with the slot (decode seats on), nil otherwise: the
	// adapter then picks one itself (decodeOf).
	dw *worker.Worker
}

// adapter returns the flow of a handoff; nil for one that cannot run PD.
func (x *Dispatcher) adapter(h worker.Handoff) pdAdapter {
	switch h {
	case worker.HandoffBootstrap:
		return sglangPD{x}
	case worker.HandoffNIXL:
		return vllmNIXL{x}
	case worker.HandoffWorkerRPC:
		return workerRPCPD{x}
	case worker.HandoffMooncake:
		return &x.mooncake
	}
	return nil
}

var (
	vllmHandoffs = worker.HandoffSet(0).Add(worker.HandoffNIXL).Add(worker.HandoffMooncake)
	allHandoffs  = vllmHandoffs.Add(worker.HandoffBootstrap).Add(worker.HandoffWorkerRPC)
)

// routeHandoffs is the handoffs that can serve a route: SGLang's native /generate has no vLLM form.
func routeHandoffs(route body.Route) worker.HandoffSet {
	if route == body.RouteGenerate {
		return allHandoffs &^ vllmHandoffs
	}
	return allHandoffs
}

// oneConsumer reports a request that vLLM's handoffs cannot carry: their KV transfer has one consumer
// (and NIXL's answer one kv_transfer_params object), so with n > 1 each decode sample would pull the
// same blocks (the first to finish frees them under its siblings; the Rust gateway skips the transfer
// for the same reason), and a batch of prompts would get the parameters of one of them. Such a request
// runs on a decode worker alone, which computes the prompt itself.
func oneConsumer(br *body.Request) bool { return br.N > 1 || br.BatchSize > 1 }

// skipReason is the IncPrefillSkipped reason of a request oneConsumer refuses.
func skipReason(br *body.Request) string {
	if br.N > 1 {
		return ReasonNGreaterThanOne
	}
	return ReasonBatch
}

// onlySingleConsumer reports a set of handoffs that are all single-consumer.
func onlySingleConsumer(set worker.HandoffSet) bool { return set != 0 && set&^vllmHandoffs == 0 }

// pd runs one PD attempt.
func (x *Dispatcher) pd(ctx context.Context, r *Request, br *body.Request, preq *placement.Request) (*Response, error) {
	snap := x.d.Registry.Snapshot()
	paired := snap.Handoffs(worker.RolePrefill) & snap.Handoffs(worker.RoleDecode)
	allowed := paired & routeHandoffs(br.Route)
	if allowed == 0 && paired != 0 {
		return nil, apierror.InvalidRequest("", br.Route.Path()+" is SGLang's native API; the PD workers here speak vLLM: use /v1/chat/completions or /v1/completions")
	}
	if ph := snap.Handoffs(worker.RolePrefill); oneConsumer(br) && ph.Single() && onlySingleConsumer(ph) {
		x.d.Metrics.IncPrefillSkipped(handoffOf(ph).String(), skipReason(br))
		return x.decodeOnly(ctx, r, br, preq, handoffOf(ph))
	}
	ar := x.admissionRequest(r, br, preq)
	// With decode seats, local prefill is chosen in admission's selection (it needs a seat).
	if x.cfg.LocalPrefillMaxTokens <= 0 || !x.d.Admission.SeatsOn() {
		if dw := x.localPrefill(ctx, preq, allowed, ar); dw != nil {
			return x.single(ctx, r, br, dw, "decode")
		}
	}
	slot, pw, dw, local, err := x.admitPrefill(ctx, preq, allowed, ar)
	if err != nil {
		return nil, err
	}
	return holdSeat(ctx, slot.Seat(), func() (*Response, error) {
		if slot.SeatOnly() {
			slot.Release(admission.ReleaseCompleted) // holds no prefill slot: ends its span
			x.noteLocal(ctx, local.reason, local.uncached)
			return x.single(ctx, r, br, dw, "decode") // on the seat it was admitted with
		}
		if oneConsumer(br) && pw.Handoff().SingleConsumer() {
			slot.Release(admission.ReleaseCompleted)
			x.d.Metrics.IncPrefillSkipped(pw.Handoff().String(), skipReason(br))
			if dw != nil {
				return x.single(ctx, r, br, dw, "decode") // on the seat it was admitted with
			}
			return x.decodeOnly(ctx, r, br, preq, pw.Handoff())
		}
		ad := x.adapter(pw.Handoff())
		if ad == nil {
			slot.Release(admission.ReleaseFailed)
			return nil, errors.New("dispatch: no PD flow for handoff " + pw.Handoff().String())
		}
		if pw.Handoff() != worker.HandoffWorkerRPC {
			// The HTTP flows rewrite the JSON body per leg; the worker-RPC flow takes the typed call.
			jbr, err := r.withJSON(br)
			if err != nil {
				slot.Release(admission.ReleaseFailed)
				return nil, err
			}
			br = jbr
		}
		return ad.run(ctx, &pdAttempt{r: r, br: br, preq: preq, slot: slot, pw: pw, dw: dw})
	})
}

// holdSeat is the one place a decode seat is released: it runs the decode leg and gives the seat
// back exactly once when the leg ends — when the response body is closed (stream end, client gone,
// timeout: whoever relays the response closes it), when run fails (the seat goes back before a
// retry's backoff, and the retry is admitted again), or when run panics. A nil seat (seats off)
// costs nothing.
func holdSeat(ctx context.Context, seat *admission.Seat, run func() (*Response, error)) (resp *Response, err error) {
	if seat == nil {
		return run()
	}
	handed := false
	defer func() {
		if !handed {
			reason := admission.ReleaseFailed
			if ctx.Err() != nil {
				reason = admission.ReleaseCancelled
			}
			seat.Release(reason)
		}
	}()
	resp, err = run()
	if err != nil {
		return nil, err
	}
	// A migration gives the seat back as failed when the stream leaves this decode (migrate.go).
	holdDecode(ctx, resp.Stream, func() { seat.Release(admission.ReleaseFailed) })
	resp.Body = &onClose{ReadCloser: resp.Body, fn: func() { seat.Release(admission.ReleaseCompleted) }}
	handed = true
	return resp, nil
}

// admitPrefill reserves an admission slot on a prefill worker chosen by the prefill policy, under the
// admission lock (so a stateful policy never picks a worker that then has no slot for it). Only
// prefill workers with a handoff in allowed that a routable decode worker also speaks are candidates;
// the decode side is re-read at every try of a waiting head, since decode workers come and go too.
// ar carries the request's admission inputs (admit.go); an engine reporting too many waiting requests
// counts as at capacity.
//
// With decode seats on, the same selection also picks the decode worker (selectPair) and returns it:
// the request then holds a seat on it, and the adapter uses it instead of picking one. It may also
// choose local prefill (local.go: a seat-only grant, slot.SeatOnly()): the decode worker alone, and why.
func (x *Dispatcher) admitPrefill(ctx context.Context, preq *placement.Request, allowed worker.HandoffSet, ar admission.Request) (*admission.Slot, *worker.Worker, *worker.Worker, localChoice, error) {
	// What the selection chose, in one variable the two closures share (one allocation, not three).
	var c struct {
		chosen, chosenDecode *worker.Worker
		local                localChoice
	}
	slot, err := x.d.Admission.Acquire(ctx, admission.Request{
		Queue: preq.Model, Tokens: ar.Tokens, CachedTokens: ar.CachedTokens, Priority: ar.Priority, MaxWait: ar.MaxWait,
		PredictedTTFT: ar.PredictedTTFT, DecodeTokens: ar.DecodeTokens, Tenant: ar.Tenant,
		Select: func(hasCapacity func(string) bool) (string, error) {
			w, err := x.selectPrefill(preq, allowed, hasCapacity)
			if err != nil {
				return "", err
			}
			c.chosen = w
			return w.URL(), nil
		},
		SelectPair: func(hasSlot, hasSeat func(string) bool) (string, string, error) {
			if lc, ok := x.localSeated(preq, allowed, ar, false, hasSeat); ok {
				c.chosen, c.chosenDecode, c.local = nil, lc.dw, lc
				return "", lc.dw.Key(), nil
			}
			pw, dw, err := x.selectPair(preq, allowed, hasSlot, hasSeat)
			if errors.Is(err, admission.ErrNoCapacity) {
				if lc, ok := x.localSeated(preq, allowed, ar, true, hasSeat); ok {
					c.chosen, c.chosenDecode, c.local = nil, lc.dw, lc
					return "", lc.dw.Key(), nil
				}
			}
			if err != nil {
				return "", "", err
			}
			c.chosen, c.chosenDecode = pw, dw
			return pw.URL(), dw.Key(), nil
		},
	})
	if err != nil {
		return nil, nil, nil, localChoice{}, err
	}
	if slot.Seat() == nil {
		c.chosenDecode = nil // prefill-only selection (seats off, or turned off while waiting)
	}
	if !slot.SeatOnly() {
		c.local = localChoice{}
	}
	return slot, c.chosen, c.chosenDecode, c.local, nil
}

// selectPrefill is admission's prefill-only selection (seats off): the prefill policy's pick among the
// workers with capacity whose handoff a routable decode worker speaks.
func (x *Dispatcher) selectPrefill(preq *placement.Request, allowed worker.HandoffSet, hasCapacity func(string) bool) (*worker.Worker, error) {
	snap := x.d.Registry.Snapshot()
	now := x.now()
	p := *preq
	if !homogeneous(snap, allowed) {
		p.Handoffs = placement.RoutableHandoffs(snap, worker.RoleDecode, preq.Model, now) & allowed
		if p.Handoffs == 0 {
			// No decode partner at all: the decode selection says why (404 or 503).
			if _, err := placement.SelectDecode(snap, preq, x.d.Policies.Decode, now); err != nil {
				return nil, err
			}
			return nil, errNoCompatibleDecode
		}
	}
	ok := func(w *worker.Worker) bool { return hasCapacity(w.URL()) && !x.overloaded(w) }
	if x.pairingOn(snap) {
		if err := x.pairCheck(snap, preq, allowed, now); err != nil {
			return nil, err
		}
		partners := x.partners(snap, preq, nil, now)
		ok = func(w *worker.Worker) bool {
			return hasCapacity(w.URL()) && !x.overloaded(w) && x.hasPartner(w, partners)
		}
	}
	p.Partners = x.pairScoring(snap, preq, nil, now, nil)
	w, err := placement.SelectPrefill(snap, &p, x.d.Policies.Prefill, ok, now)
	if errors.Is(err, placement.ErrAtCapacity) {
		return nil, admission.ErrNoCapacity
	}
	return w, err
}

// errNoCompatibleDecode: routable decode workers exist, but none speaks an allowed handoff.
var errNoCompatibleDecode = errors.Join(placement.ErrUnavailable, placement.ErrNoCompatibleWorkers)

// handoffOf returns the one handoff of a single-element set.
func handoffOf(set worker.HandoffSet) worker.Handoff {
	for h := worker.Handoff(0); h < 8; h++ {
		if set.Has(h) {
			return h
		}
	}
	return worker.HandoffNone
}

// homogeneous reports whether every prefill and decode worker speaks the same single handoff and it
// is allowed: then every pair is compatible and no filtering is needed (the common case).
func homogeneous(snap *worker.Snapshot, allowed worker.HandoffSet) bool {
	p, d := snap.Handoffs(worker.RolePrefill), snap.Handoffs(worker.RoleDecode)
	return p == d && p.Single() && p&allowed == p
}

// selectDecode picks the decode partner of prefill worker pw: a routable decode worker with the same
// handoff.
func (x *Dispatcher) selectDecode(preq *placement.Request, h worker.Handoff) (*worker.Worker, error) {
	p := *preq
	p.Handoffs = worker.HandoffSet(0).Add(h)
	return placement.SelectDecode(x.d.Registry.Snapshot(), &p, x.d.Policies.Decode, x.now())
}

// decodeOf is the attempt's decode worker: the one admission chose with the slot (and holds a seat on),
// else a routable decode worker with handoff h picked now.
func (x *Dispatcher) decodeOf(a *pdAttempt, h worker.Handoff) (*worker.Worker, error) {
	dw := a.dw
	if dw == nil {
		var err error
		if dw, err = x.selectPartner(a.preq, a.pw, h); err != nil {
			return nil, err
		}
	}
	x.notePair(a.pw, dw)
	a.preq.Picks.Paired(a.pw, dw) // predicted_latency learns from the pair that runs (placement/pairs.go)
	return dw, nil
}

// selectPartner picks the decode partner of prefill worker pw with handoff h (seats off): with
// pairing on, among the compatible ones of least load plus penalty (topology.go).
func (x *Dispatcher) selectPartner(preq *placement.Request, pw *worker.Worker, h worker.Handoff) (*worker.Worker, error) {
	snap := x.d.Registry.Snapshot()
	p := *preq
	p.Prefill = pw
	p.Handoffs = worker.HandoffSet(0).Add(h)
	if !x.pairingOn(snap) { // selectDecode's pick, on this copy rather than one more
		return placement.SelectDecode(snap, &p, x.d.Policies.Decode, x.now())
	}
	now := x.now()
	dw, err := placement.Select(snap, worker.RoleDecode, &p, x.d.Policies.Decode, x.partnerFilter(preq, pw, x.partners(snap, preq, nil, now)), now)
	if errors.Is(err, placement.ErrAtCapacity) {
		// No compatible partner is left (the fleet changed since admission): say why.
		for _, dw := range snap.Candidates(worker.RoleDecode, preq.Model) {
			if dw.Routable(now) && dw.Handoff() == h && dw.Place().Revision == pw.Place().Revision {
				return nil, errTopologyForbidden
			}
		}
		return nil, errNoSameRevision
	}
	return dw, err
}

// decodeOnly sends the request to a decode worker alone, which computes the prompt itself.
func (x *Dispatcher) decodeOnly(ctx context.Context, r *Request, br *body.Request, preq *placement.Request, h worker.Handoff) (*Response, error) {
	dw, err := x.selectDecode(preq, h)
	if err != nil {
		return nil, err
	}
	return x.single(ctx, r, br, dw, "decode")
}
