// Package admission bounds the prefill requests in flight on each worker and
// queues the rest: it is the per-worker prefill admission controller of a PD
// (prefill/decode) deployment, and, with a decode bound, the one gate of the
// whole pipeline (decode seats, below).
//
// It knows workers only by key (their URL, also the metric label) and
// candidate pools only by queue key (one per model). Placement is reached
// through the [Request.Select] callback, which filters candidates with the
// hasCapacity function it is given, runs the prefill policy and returns a
// worker key, [ErrNoCapacity] (wait), or a final error (no healthy worker,
// model not served: returned at once, never queued).
//
// # Concepts
//
// In reading order, the few things the code is made of:
//
//  1. A [Request] asks for a slot: its placement callbacks and its cost
//     (estimated prompt tokens, a prefix-cache hook, a decode KV
//     reservation), carried inside as one value (ask, cost: grant.go) into
//     every check and grant.
//  2. The [Controller] only orchestrates, under one lock: it asks the gate
//     whether a request fits, and the order which waiter asks next.
//  3. The gate (gate.go) is capacity, apart from any queue: per worker a
//     request limit (fixed or adaptive), a token budget and cluster
//     admission's cap; per decode worker a seat bound, a KV reservation and
//     a seat cap. It answers the callbacks' hasCapacity and hasSeat, and
//     takes and gives back what a grant holds.
//  4. A queue (queue.go) per queue key holds waiters; its order (order.go)
//     names the head, the one waiter that selects. After llm-d's flow
//     control it is band, then fairness: bands.go ranks priority bands with
//     aging, and each band's fairness order is fifo.go (arrival order),
//     roundrobin.go (weighted deficit round robin across tenants) or
//     share.go (under-share tenants first).
//  5. A waiter (controller.go) is one queued request, owned by the goroutine
//     that called Acquire, an entry of a waitq list granted by closing its
//     channel.
//  6. A [Slot] (with its [Guard]s) and a [Seat] are what a grant holds; each
//     is released exactly once.
//  7. A [Side] says which half of the pipeline, prefill or decode, held a
//     request back; it only names a rejection.
//
// Beyond the source contract, each behind its own setting and off in the
// zero value (so that [DefaultSettings] and settings naming only the limit,
// queue size and timeout behave exactly as the contract says):
//
//   - a token budget per worker (MaxInflightTokensPerWorker): the estimated
//     prompt tokens of the slots held on a worker stay within it, except
//     that a request larger than the budget is admitted on an idle worker,
//     alone, so it is never starved; the head waits for room and nobody
//     overtakes it;
//   - priority bands with aging (Bands, Aging): higher bands are served
//     first, FIFO within a band, and aging bounds how long a low band can be
//     overtaken (bands.go); queue size and timeout stay global, and a full
//     queue makes room for a newcomer by displacing its lowest-ranked
//     waiter, if that ranks below the newcomer ([ErrDisplaced]);
//   - early rejection (EarlyRejection): a request whose predicted wait (its
//     queue position over the measured slot-release rate) exceeds its
//     timeout is rejected at once ([ErrPredictedTimeout]); a client's
//     deadline also counts the TTFT the caller predicts ([Request.PredictedTTFT]);
//   - adaptive limits (Adaptive): each worker's request limit moves inside a
//     range from the measured prefill time per token (adaptive.go);
//   - tenants (Tenants): FIFO within a tenant and, across the tenants of a
//     band, one of three orders: one FIFO (Fair off; a per-tenant queue
//     bound, MaxQueued, may still apply: [ErrTenantQueueFull]), weighted
//     deficit round robin (Fair; roundrobin.go), or under-share first (Fair and
//     UnderShareFirst, the gateway's default; share.go): the tenants whose
//     recent grants are under their weighted share of the band's go first,
//     most under-served first, and the round robin orders the rest. Early
//     rejection predicts a newcomer's position from the order in force;
//   - decode seats (DecodeMaxInflightPerWorker, DecodeAuto; seat.go): a PD
//     request is admitted only when its prefill slot AND a seat on its decode
//     worker (per DP rank where ranks are known) are free, chosen together by
//     [Request.SelectPair] under the one lock, with a decode KV reservation
//     (prompt + max_tokens) against the decode worker's KV capacity when it
//     is known ([Controller.SetDecodeCapacity]). Rejections name the side
//     that holds the request back when it is refused ([ErrDecodeQueueFull],
//     [ErrDecodeQueueTimeout] when it is decode, also for a displacement or
//     a predicted timeout; the prefill errors otherwise), and
//     [Controller.RetryAfterFor] answers from that side's release rate.
//     A pair selection may also grant a seat alone (local prefill: the
//     decode worker computes the prompt; [Slot.SeatOnly]), by the same
//     head-only FIFO selection. Without a decode bound Select runs exactly
//     as before.
//
// # Concurrency Model
//
// One mutex guards everything mutable: the settings, the gate's counters,
// the queues' orders and waiters, and the statistics. Select runs
// under that mutex, so "filter workers at their limit, run the policy,
// reserve the slot" is one atomic step and a stateful policy never picks a
// worker it then fails to get. Metrics are reported under it too, so gauges
// see changes in order.
//
// Each queue keeps its waiters in waitq's lists (one per band, in arrival
// order: fifo.go), the gateway's one FIFO waiter list, as in
// x/sync/semaphore. A waiter is owned by the goroutine that called Acquire;
// only that goroutine ends its wait. A grant (or a final error) is delivered
// by recording the result under the mutex, then removing the waiter from its
// queue, which closes its Ready channel. Cancellation and timeout re-check under the mutex: a grant that
// raced in before a cancellation is given back (cancellation wins, no slot
// leaks); one that raced in before a timeout is kept.
//
// Only the head of a queue selects (the waiter its order names: order.go),
// and only the head's request reaches the gate. Heads select when a slot is released
// (in the releaser's goroutine, every queue in rotating order), when
// settings change (in Update's goroutine), on [Controller.Wake] (which only
// signals the heads; they select in their own goroutines, so Wake never calls
// Select) and on the head's own poll timer, because circuit breakers turn
// half-open lazily without an event. Only the head runs a poll timer; it
// lives in the head's waiting goroutine, and a head displaced by a higher
// band or by aging stops it at its next tick and hands polling to the new
// head. The controller owns no goroutines.
//
// With decode seats on, the head's selection is the pair callback: it
// filters prefill workers by hasSlot and decode workers by hasSeat and
// returns both, so "free slot and free seat" is the same atomic step. A seat
// release wakes the heads exactly as a slot release does (a head may wait
// for either), and the head remembers which side held it back (the queue
// too). Only the head selects, so a waiter's side is judged again when it is
// refused (a timeout, a displacement; a newcomer behind waiters refused for a
// full queue or a predicted timeout): its pair selection runs once as a probe
// in which no decode worker has a seat, so no stateful policy runs and
// nothing is picked, and the side is decode when no decode worker has a seat
// for it, prefill when no prefill worker has a slot, else the queue's
// (seat.go, sideNowLocked). FIFO, strict targets, the head poll,
// cancellation and timeout are unchanged: the side only picks the
// rejection's name. A seat is held from the pair's choice, so a decode can be
// out of seats only because their requests are still in prefill; the side is
// then prefill (gate.go, fullByPrefill), since the decode waits for the
// prefills ahead of it.
//
// A [Slot] is freed exactly once: each holder ([Slot] itself and every
// [Guard]) releases at most once (an atomic flag), an atomic holder count
// frees the slot on the last release, and a slot whose worker was removed
// meanwhile releases without touching the new counters. A [Seat] is freed
// exactly once the same way (an atomic flag; it has one holder), on its own,
// when the decode leg ends; a grant that loses to a cancellation gives back
// its slot and its seat.
//
// # Request Lifecycle
//
//  1. Acquire with admission off: Select runs with unlimited capacity and
//     without the lock; the slot is uncounted.
//  2. Acquire with admission on and nobody waiting in the request's queue:
//     Select runs; a worker is reserved at once (outcome admitted, queue
//     position 0), a final error is returned (unavailable), ErrNoCapacity
//     moves on to step 4.
//  3. Acquire with waiters in the queue: newcomers never overtake them. Select
//     runs once as an availability probe with no capacity anywhere; a final
//     error is returned at once (a request for a model without workers gets
//     503/404, not 429). Otherwise step 4.
//     With priority bands, a newcomer ranked above the head (a higher band)
//     selects at once like step 2 and, if it finds no capacity, becomes the
//     head.
//  4. If the waiters of all queues already reach QueueSize (including
//     QueueSize 0) the request is rejected with ErrQueueFull, unless, with
//     priority bands, a waiter ranked below it can be displaced. With early
//     rejection, a request whose predicted wait exceeds its timeout is
//     rejected with ErrPredictedTimeout. It is enqueued otherwise (after
//     the displaced waiter, if any, has left with ErrDisplaced).
//  5. While queued, the request is tied to no worker. As head it selects on
//     every wake; it is granted, or fails with its final error (the next
//     waiter then becomes head and tries at once), or leaves on timeout
//     (ErrQueueTimeout) or cancellation (an error matching ctx.Err()).
//  6. The caller holds the slot while prefill runs, adds a [Guard] per
//     sub-request, and releases each (deferred) when prefill ends. The last
//     release frees the slot, records the release rate behind
//     [Controller.RetryAfter] (and early rejection), feeds the worker's
//     adaptive limit, and lets the heads select.
//  7. With decode seats, the caller holds [Slot.Seat] until the decode leg
//     ends (stream end, error, cancellation, timeout, panic) and releases it
//     once; its release records the seat-release rate and lets the heads
//     select.
//  8. On shutdown, [Controller.Drain] answers every waiter with
//     ErrShuttingDown (503) under the lock and refuses every later Acquire
//     with it, admission on or off; slots and seats already granted are
//     left to finish and release as in steps 6 and 7.
//
// With a tracer, each admission-on Acquire records a "sluice.admission.wait"
// span and each granted slot a "sluice.admission.slot" span, both children of
// the context's span. The wait span carries the band (with bands) and the
// estimated tokens (with a token budget); with decode seats, the side that
// held the request back (sluice.admission.side: prefill or decode) and the
// decode worker, and each granted seat gets a "sluice.admission.seat" span.
//
// # Caps (cluster admission)
//
// [Controller.SetWorkerCaps] adds a per-worker bound on top of
// MaxInflightPerWorker: the share of a fleet-wide limit that cluster
// admission (internal/cluster) grants this replica. It is read under the same
// lock as the limit, so enforcing it costs nothing on the request path; a cap
// below the slots held revokes nothing, and setting caps lets the heads
// select. A wait span whose request a cap held back carries
// sluice.admission.share_limited=true.
//
// # Where things are
//
// Every file below works under the one mutex of controller.go; each holds
// one flow:
//
//   - controller.go: the Controller type, its state, New and the lock;
//   - acquire.go: Acquire, the admission-off path, an arrival's steps (the
//     fast path, the bounds on waiting, queueing);
//   - grant.go: a request's ask and cost, selection with its cost bound,
//     grant and release of a slot; seat.go: the same for decode seats, the
//     pair selection and the side;
//   - gate.go: capacity (limits, token budget, seats, KV) and its counters;
//     caps.go: cluster shares; adaptive.go: adaptive limits;
//   - heads.go: enqueue, the heads' selection, dispatch, wait and leave;
//   - queue.go: queues; order.go: the order interface; bands.go, fifo.go,
//     roundrobin.go, share.go: its policies, each with its predicted
//     positions; tenants.go: tenant settings and counts;
//   - displace.go: displacement from a full queue, early rejection's
//     predicted wait, rejection counts;
//   - update.go: Update, Wake and RemoveWorker (settings and worker events);
//     drain.go: shutdown;
//   - slot.go: Slot and Guard; settings.go, errors.go, metrics.go (the one
//     metrics interface), status.go: the types they name.
package admission
