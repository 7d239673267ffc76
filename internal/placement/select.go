package placement

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// Selection errors. ErrNoHealthyWorkers and ErrAtCapacity are returned
// wrapped in the class ErrUnavailable ("%w: %w"); test with errors.Is.
var (
	// ErrModelNotFound: no worker of the role serves the model (404).
	ErrModelNotFound = errors.New("no worker serves the model")
	// ErrUnavailable is the class of "workers exist but none can take the
	// request now".
	ErrUnavailable = errors.New("no worker available")
	// ErrNoHealthyWorkers: none is routable (health, breaker) (503).
	ErrNoHealthyWorkers = errors.New("no healthy workers")
	// ErrAtCapacity: routable workers exist but all are at their admission
	// limit; admission waits.
	ErrAtCapacity = errors.New("all workers at capacity")
	// ErrInvalidTarget: the strict target index is out of range (400).
	ErrInvalidTarget = errors.New("invalid target worker")
	// ErrNoCompatibleWorkers: routable workers exist, but none speaks a KV handoff its PD partner can
	// use (503).
	ErrNoCompatibleWorkers = errors.New("no routable worker speaks a compatible KV handoff")
)

// ModelNotFoundError is ErrModelNotFound naming the model asked for, so the client's error can name
// it; errors.Is(err, ErrModelNotFound) holds.
type ModelNotFoundError struct{ Model string }

func (e *ModelNotFoundError) Error() string { return fmt.Sprintf("%v: %q", ErrModelNotFound, e.Model) }

// Is makes a ModelNotFoundError match ErrModelNotFound.
func (e *ModelNotFoundError) Is(target error) bool { return target == ErrModelNotFound }

// Prebuilt so the hot rejection paths (an admission head polling while all
// workers are full) do not allocate.
var (
	errNoHealthy  = fmt.Errorf("%w: %w", ErrUnavailable, ErrNoHealthyWorkers)
	errAtCapacity = fmt.Errorf("%w: %w", ErrUnavailable, ErrAtCapacity)
	errNoCompat   = fmt.Errorf("%w: %w", ErrUnavailable, ErrNoCompatibleWorkers)
)

// Reason returns a low-cardinality label for a selection error, for metrics
// and logs: "" for nil, "model_not_found", "no_healthy_workers",
// "at_capacity", "invalid_target", or "other".
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrModelNotFound):
		return "model_not_found"
	case errors.Is(err, ErrNoHealthyWorkers):
		return "no_healthy_workers"
	case errors.Is(err, ErrAtCapacity):
		return "at_capacity"
	case errors.Is(err, ErrInvalidTarget):
		return "invalid_target"
	case errors.Is(err, ErrNoCompatibleWorkers):
		return "no_compatible_workers"
	}
	return "other"
}

// SelectPrefill picks a prefill worker for req. Candidates are the prefill
// workers serving req.Model. hasCapacity, when not nil, filters out workers
// at their admission limit. Errors: ErrModelNotFound when no candidate
// exists, ErrNoHealthyWorkers when none is routable at now, ErrAtCapacity
// when every routable one fails hasCapacity. A strict target
// (req.TargetWorker >= 0) considers only that candidate: out of range is
// ErrInvalidTarget, and the caller waits for that worker on ErrAtCapacity.
func SelectPrefill(snap *worker.Snapshot, req *Request, pol Policy, hasCapacity func(*worker.Worker) bool, now time.Time) (*worker.Worker, error) {
	return Select(snap, worker.RolePrefill, req, pol, hasCapacity, now)
}

// SelectDecode picks a decode worker for req; there is no capacity filter.
func SelectDecode(snap *worker.Snapshot, req *Request, pol Policy, now time.Time) (*worker.Worker, error) {
	return Select(snap, worker.RoleDecode, req, pol, nil, now)
}

// SelectRegular picks a regular worker for req (non-PD mode).
func SelectRegular(snap *worker.Snapshot, req *Request, pol Policy, hasCapacity func(*worker.Worker) bool, now time.Time) (*worker.Worker, error) {
	return Select(snap, worker.RoleRegular, req, pol, hasCapacity, now)
}

// bufPool holds candidate buffers for filtered selections.
var bufPool = sync.Pool{New: func() any {
	s := make([]*worker.Worker, 0, 64)
	return &s
}}

// Select is the role-generic form of SelectPrefill.
func Select(snap *worker.Snapshot, role worker.Role, req *Request, pol Policy, hasCapacity func(*worker.Worker) bool, now time.Time) (*worker.Worker, error) {
	cands := snap.Candidates(role, req.Model)
	if len(cands) == 0 {
		return nil, &ModelNotFoundError{Model: req.Model}
	}
	if req.TargetWorker >= 0 {
		return selectTarget(cands, req, pol, hasCapacity, now)
	}
	if !req.IgnoreRanks {
		// A data-parallel engine's ranks are candidates of their own (their own queue, KV cache and
		// load); they share the engine's health, breaker and admission slots.
		cands = snap.RankCandidates(role, req.Model)
	}

	// Filter lazily: until the first excluded worker, the snapshot's own
	// slice serves as the candidate list and nothing is allocated.
	var (
		bufp               *[]*worker.Worker
		out                []*worker.Worker
		routable, eligible int
	)
	for i, w := range cands {
		ok := w.Routable(now)
		if ok {
			routable++
			ok = req.Handoffs == 0 || req.Handoffs.Has(w.Handoff())
		}
		if ok {
			eligible++
			ok = hasCapacity == nil || hasCapacity(w)
		}
		switch {
		case ok && bufp != nil:
			out = append(out, w)
		case !ok && bufp == nil:
			bufp = bufPool.Get().(*[]*worker.Worker)
			out = append((*bufp)[:0], cands[:i]...)
		}
	}
	if bufp == nil {
		out = cands
	} else {
		defer func() {
			clear(out[:cap(out)])
			*bufp = out[:0]
			bufPool.Put(bufp)
		}()
	}
	if len(out) == 0 {
		return nil, noCandidate(routable, eligible)
	}
	if len(req.Avoid) > 0 {
		out = avoid(out, req.Avoid)
	}
	i := pol.Pick(out, req)
	if i < 0 || i >= len(out) {
		return nil, fmt.Errorf("%w: policy %s picked %d of %d", ErrUnavailable, pol.Name(), i, len(out))
	}
	return out[i], nil
}

// selectTarget is Select with a strict target (req.TargetWorker): that worker or an error, never
// another; a data-parallel engine's rank is the policy's pick.
func selectTarget(cands []*worker.Worker, req *Request, pol Policy, hasCapacity func(*worker.Worker) bool, now time.Time) (*worker.Worker, error) {
	if req.TargetWorker >= len(cands) {
		return nil, fmt.Errorf("%w: index %d, %d candidates", ErrInvalidTarget, req.TargetWorker, len(cands))
	}
	w := cands[req.TargetWorker]
	if !w.Routable(now) {
		return nil, errNoHealthy
	}
	if req.Handoffs != 0 && !req.Handoffs.Has(w.Handoff()) {
		return nil, errNoCompat
	}
	if hasCapacity != nil && !hasCapacity(w) {
		return nil, errAtCapacity
	}
	if ranks := w.Ranks(); len(ranks) > 0 && !req.IgnoreRanks {
		// The target names the engine; the policy picks its rank.
		i := pol.Pick(ranks, req)
		if i < 0 || i >= len(ranks) {
			return nil, fmt.Errorf("%w: policy %s picked rank %d of %d", ErrUnavailable, pol.Name(), i, len(ranks))
		}
		return ranks[i], nil
	}
	return w, nil
}

// noCandidate is why a selection found nobody: no routable worker, none speaking a usable handoff,
// or every one at capacity.
func noCandidate(routable, eligible int) error {
	switch {
	case routable == 0:
		return errNoHealthy
	case eligible == 0:
		return errNoCompat
	}
	return errAtCapacity
}

// avoid drops the workers that already failed the request while another remains: an engine that just
// died has the least load, and until its health probe fails a load-based policy would pick it for
// every retry. It allocates (only retries get here) and leaves out itself untouched.
func avoid(out []*worker.Worker, failed []string) []*worker.Worker {
	kept := make([]*worker.Worker, 0, len(out))
	for _, w := range out {
		if !slices.Contains(failed, w.URL()) {
			kept = append(kept, w)
		}
	}
	if len(kept) == 0 {
		return out
	}
	return kept
}

// RoutableHandoffs returns the KV handoffs spoken by the routable workers of role serving model at
// now: the handoffs a PD partner may use. It does not allocate.
func RoutableHandoffs(snap *worker.Snapshot, role worker.Role, model string, now time.Time) worker.HandoffSet {
	var set worker.HandoffSet
	for _, w := range snap.Candidates(role, model) {
		if w.Routable(now) {
			set = set.Add(w.Handoff())
		}
	}
	return set
}
