package cluster

import (
	"cmp"
	"hash/fnv"
	"slices"
	"time"
)

// claim is one replica's claim on one worker's budget in an allocation round.
type claim struct {
	id string
	// tie breaks the last ties: a hash of the worker and the replica, so that replicas left without a unit
	// on one worker are not always the same on every worker.
	tie uint64
	// demand is the slots the replica could use now: its slots held plus the requests it has waiting that
	// this worker could serve.
	demand int
	// held is the slots the coordinator counts as possibly held by the replica (its reservation): the
	// replica that already holds a unit keeps it when units do not divide evenly, so shares do not churn.
	held int
	// When there are fewer units than replicas with demand, units go first to the replicas that began
	// holding one less than a turn ago (sticky), then to the one that held one longest ago (lastHeld;
	// zero = never, first of all): each replica with demand gets a turn.
	sticky   bool
	lastHeld time.Time
}

// fairShares splits budget among the claims. First max-min fair over demand (water-filling): every claim
// gets min(demand, level) for the highest level the budget allows; then, once every demand is met, what is
// left is spread evenly over all claims as headroom, so a replica whose load rises can admit at once.
//
// Units that do not divide evenly go one each, in an order that depends on whether some claim would
// otherwise get nothing. When the budget is smaller than the number of claims with demand (the floor of
// the even split is 0), replicas take turns: a replica keeps its unit while its turn lasts (sticky), then
// the unit goes to the replica that has gone longest without one (lastHeld); the others hold 0 and wait.
// Otherwise they go to the claims that hold the most already, which keeps shares stable.
//
// The shares sum to max(budget, 0) exactly when there is at least one claim; a share is never negative.
func fairShares(budget int, cs []claim) []int {
	shares := make([]int, len(cs))
	if budget <= 0 || len(cs) == 0 {
		return shares
	}
	rem := budget
	var unmet []int
	for i, c := range cs {
		if c.demand > 0 {
			unmet = append(unmet, i)
		}
	}
	for len(unmet) > 0 && rem > 0 {
		level := rem / len(unmet)
		if level == 0 {
			starving := false
			for _, i := range unmet {
				starving = starving || shares[i] == 0
			}
			if starving {
				slices.SortStableFunc(unmet, func(a, b int) int { return rotating(cs[a], cs[b]) })
			} else {
				slices.SortStableFunc(unmet, func(a, b int) int { return sticky(cs[a], cs[b]) })
			}
			for _, i := range unmet[:rem] {
				shares[i]++
			}
			return shares
		}
		next := unmet[:0:0]
		for _, i := range unmet {
			give := min(level, cs[i].demand-shares[i])
			shares[i] += give
			rem -= give
			if shares[i] < cs[i].demand {
				next = append(next, i)
			}
		}
		unmet = next
	}
	if rem == 0 {
		return shares
	}
	// Every demand is met: the rest is headroom, spread evenly.
	each := rem / len(cs)
	for i := range shares {
		shares[i] += each
	}
	rem -= each * len(cs)
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return sticky(cs[a], cs[b]) })
	for _, i := range order[:rem] {
		shares[i]++
	}
	return shares
}

// rotating orders replicas within their turn first, then the one without a unit for longest, then the
// larger holder, then the id.
func rotating(a, b claim) int {
	if a.sticky != b.sticky {
		if a.sticky {
			return -1
		}
		return 1
	}
	return cmp.Or(a.lastHeld.Compare(b.lastHeld), cmp.Compare(b.held, a.held), cmp.Compare(a.tie, b.tie), cmp.Compare(a.id, b.id))
}

// sticky orders the larger holder first, then the one without a unit for longest, then the id.
func sticky(a, b claim) int {
	return cmp.Or(cmp.Compare(b.held, a.held), a.lastHeld.Compare(b.lastHeld), cmp.Compare(a.tie, b.tie), cmp.Compare(a.id, b.id))
}

// tieBreak is claim.tie for a replica on a worker.
func tieBreak(worker, id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(worker))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// fallbackShare is a replica's share of limit in an even split over members (in their order): the floor
// of limit/len(members), plus one for the first limit mod len(members) members. The shares of all members
// sum to limit exactly. A replica not among the members gets 0.
func fallbackShare(limit int, members []string, self string) int {
	i := slices.Index(members, self)
	if i < 0 || limit <= 0 {
		return 0
	}
	n := len(members)
	share := limit / n
	if i < limit%n {
		share++
	}
	return share
}
