package tenant

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// DemandWindow is the time constant of the demand rates: long enough that a tenant's rate does not
// swing with each request, short enough (a few exchange periods of cluster coordination) that its
// share follows a move of its traffic within seconds.
const DemandWindow = 5 * time.Second

// idleRate is the rate (requests per second) below which a tenant counts as not asking here any more.
const idleRate = 1.0 / 600

// minShare keeps a share positive: a bucket of rate 0 would mean no limit.
const minShare = 1e-6

// demand is an exponentially weighted rate of what a tenant asked for: each arrival adds its amount
// over DemandWindow, and the sum decays by e per window, so a steady stream of r a second reads r.
type demand struct {
	req, tok float64 // per second, as of at
	at       time.Time
}

func (d *demand) decayTo(now time.Time) {
	if !d.at.IsZero() && now.After(d.at) {
		f := math.Exp(-now.Sub(d.at).Seconds() / DemandWindow.Seconds())
		d.req, d.tok = d.req*f, d.tok*f
	}
	if now.After(d.at) {
		d.at = now
	}
}

func (d *demand) add(now time.Time, reqs, toks float64) {
	d.decayTo(now)
	d.req += reqs / DemandWindow.Seconds()
	d.tok += toks / DemandWindow.Seconds()
}

func (d *demand) idle(now time.Time) bool {
	d.decayTo(now)
	return d.req < idleRate
}

// Demand is one tenant's recent demand on this replica: the requests and the tokens (as reserved,
// refused ones included) it asked for per second.
type Demand struct {
	Tenant           string
	Requests, Tokens float64
}

// Demand returns the recent demand of at most k tenants that have a budget and asked for some here,
// largest first (by tokens, then requests, then name), and whether it left any out.
func (b *Budgets) Demand(k int) (top []Demand, truncated bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for t, bk := range b.buckets {
		if bk.demand.idle(now) || !b.budgetLocked(t).on() {
			continue
		}
		top = append(top, Demand{Tenant: t, Requests: bk.demand.req, Tokens: bk.demand.tok})
	}
	slices.SortFunc(top, func(x, y Demand) int {
		return cmp.Or(cmp.Compare(y.Tokens, x.Tokens), cmp.Compare(y.Requests, x.Requests), cmp.Compare(x.Tenant, y.Tenant))
	})
	if len(top) > max(k, 0) {
		return top[:max(k, 0)], true
	}
	return top, false
}

// SetShares sets the part of every budget this gateway enforces: per[t] for tenant t, def for every
// tenant not in per (each clamped to (0, 1]). Cluster coordination sets the fractions of its grant, a
// tenant's summing to 1 over the fleet and weighted by where its demand is. Each bucket keeps the
// fraction of its capacity it had (debt included), so moving shares between replicas moves no
// budget from one minute into another.
func (b *Budgets) SetShares(def float64, per map[string]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.snapshotLocked()
	b.share = clampShare(def)
	b.shares = make(map[string]float64, len(per))
	for t, s := range per {
		b.shares[t] = clampShare(s)
	}
	b.rescaleLocked(old, true)
}

// Shares returns the parts of the budgets this gateway enforces, as SetShares takes them.
func (b *Budgets) Shares() (def float64, per map[string]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	per = make(map[string]float64, len(b.shares))
	for t, s := range b.shares {
		per[t] = s
	}
	return b.share, per
}

func clampShare(s float64) float64 {
	if math.IsNaN(s) {
		return 1
	}
	return min(max(s, minShare), 1)
}
