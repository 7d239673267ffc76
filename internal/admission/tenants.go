package admission

import (
	"maps"
	"slices"

	"github.com/sluicegw/sluice/internal/fielderr"
)

// Tenants (Settings.Tenants): a request names its tenant, which orders it
// within its band (roundrobin.go, share.go) and may bound its waiters over
// all queues (MaxQueued).

// DefaultTenant is the tenant of requests without one.
const DefaultTenant = "default"

// TenantSettings configure tenancy in admission. The zero value is off: no
// per-tenant state, behaviour exactly as without tenants.
type TenantSettings struct {
	// Fair turns on deficit round robin across tenants within a band.
	Fair bool
	// Weights are the tenants' weights (grants per round); a tenant not
	// named weighs 1. Used with Fair.
	Weights map[string]int
	// MaxQueued bounds one tenant's waiters over all queues; a newcomer
	// beyond it is rejected with ErrTenantQueueFull. <= 0 means no bound.
	MaxQueued int
	// Burst is the grants a new tenant (one back from idle) may take in its
	// first turn, repaid in its later turns; a tenant's weight when larger.
	// <= 1: its weight, no burst. Used with Fair.
	Burst int
	// UnderShareFirst serves first the tenants below their share (share.go):
	// the head is the front waiter of the tenant whose recent grant rate per
	// weight is lowest, if that is under its weighted share of the band's,
	// else the round robin's. Used with Fair.
	UnderShareFirst bool
}

// on reports whether admission tracks tenants at all.
func (t *TenantSettings) on() bool { return t.Fair || t.MaxQueued > 0 }

func (t *TenantSettings) weight(tenant string) int {
	if w, ok := t.Weights[tenant]; ok {
		return w
	}
	return 1
}

// burst is the first turn's quantum of a tenant new to a band.
func (t *TenantSettings) burst(tenant string) int { return max(t.weight(tenant), t.Burst) }

func (t TenantSettings) clone() TenantSettings {
	t.Weights = maps.Clone(t.Weights)
	return t
}

func (t *TenantSettings) validate(l *fielderr.List) {
	if t.MaxQueued < 0 {
		l.Add("Tenants.MaxQueued", "must be at least 0, got %d", t.MaxQueued)
	}
	if t.Burst < 0 || t.Burst > maxTenantWeight {
		l.Add("Tenants.Burst", "must be 0-%d (0 and 1: one turn of the tenant's weight), got %d", maxTenantWeight, t.Burst)
	}
	for _, name := range slices.Sorted(maps.Keys(t.Weights)) {
		if w := t.Weights[name]; name == "" {
			l.Add("Tenants.Weights", "need a tenant name for weight %d", w)
		} else if w < 1 || w > maxTenantWeight {
			l.Add("Tenants.Weights", "of tenant %q must be 1-%d, got %d", name, maxTenantWeight, w)
		}
	}
}

// maxTenantWeight bounds a weight or burst, hence the grants one tenant gets in a row.
const maxTenantWeight = 1000

func tenantName(t string) string {
	if t == "" {
		return DefaultTenant
	}
	return t
}

// tenantFullLocked reports whether tenant already has MaxQueued waiters.
func (c *Controller) tenantFullLocked(tenant string) bool {
	m := c.settings.Tenants.MaxQueued
	return m > 0 && c.qs.byTenant[tenantName(tenant)] >= m
}

// countTenantLocked moves the waiters of w's tenant by delta, with tenancy
// on; tenant names do not accumulate.
func (c *Controller) countTenantLocked(w *waiter, delta int) {
	if !c.settings.Tenants.on() {
		return
	}
	if c.qs.byTenant == nil {
		c.qs.byTenant = make(map[string]int)
	}
	if n := c.qs.byTenant[w.tenant] + delta; n > 0 {
		c.qs.byTenant[w.tenant] = n
	} else {
		delete(c.qs.byTenant, w.tenant)
	}
}

// reorderLocked rebuilds the tenant counts and every queue's fairness
// orders from the arrival lists, after tenancy or fairness changed live.
// Turns and rates restart.
func (c *Controller) reorderLocked() {
	clear(c.qs.byTenant)
	kind := fairnessOf(&c.settings)
	for _, q := range c.qs.active {
		q.order.refill(kind)
		for i := range q.order.fifo {
			q.order.fifo[i].each(func(w *waiter) bool {
				c.countTenantLocked(w, 1)
				return true
			})
		}
	}
}
