package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics exposes cluster admission to Prometheus from a Status snapshot taken at scrape time, so series
// of workers and replicas that went away disappear with them.
type metrics struct {
	r *Replica

	share, demand, leaseAge, fallback, coordinator, isCoordinator *prometheus.Desc
	coordChanges, exchanges                                       *prometheus.Desc
	granted, reserved, memberDemand, memberContact, blocked       *prometheus.Desc
	rebalances, members                                           *prometheus.Desc
}

func newMetrics(r *Replica) *metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sluice_cluster_admission_"+name, help, labels, nil)
	}
	return &metrics{
		r:             r,
		share:         d("share", "This replica's share of the fleet's limit per worker (prefill slots; decode seats on workers labelled decode:<worker>): the cap on its new admissions.", "worker"),
		demand:        d("demand", "This replica's demand per worker as last reported: slots held plus waiting requests the worker could serve.", "worker"),
		leaseAge:      d("lease_age_seconds", "Time since this replica last received a grant from the coordinator (absent before the first)."),
		fallback:      d("fallback", "1 while this replica's lease has ended and it enforces the fallback (an even split, never above its last share)."),
		coordinator:   d("coordinator", "The coordinator this replica follows (value 1; the label names it).", "coordinator"),
		isCoordinator: d("is_coordinator", "1 when this replica coordinates."),
		coordChanges:  d("coordinator_changes_total", "Changes of the coordinator this replica reports to."),
		exchanges:     d("exchanges_total", "Exchanges with the coordinator by result: ok, no_coordinator, refused (not the coordinator), failed (transport).", "result"),
		granted:       d("granted", "Coordinator: share last granted per worker and replica.", "worker", "replica"),
		reserved:      d("reserved", "Coordinator: slots counted as possibly held per worker and replica (at least its share and its slots held).", "worker", "replica"),
		memberDemand:  d("replica_demand", "Coordinator: demand reported per worker and replica.", "worker", "replica"),
		memberContact: d("replica_last_contact_seconds", "Coordinator: time since each member was last heard from.", "replica"),
		blocked:       d("raises_blocked", "Coordinator: 1 while a reachable member has not reported in this term, so no share may rise."),
		rebalances:    d("rebalances_total", "Coordinator: allocation rounds that changed a share, in the current term."),
		members:       d("members", "Coordinator: members by state (following, silent, unknown, dead).", "state"),
	}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.share, m.demand, m.leaseAge, m.fallback, m.coordinator, m.isCoordinator,
		m.coordChanges, m.exchanges, m.granted, m.reserved, m.memberDemand, m.memberContact, m.blocked, m.rebalances, m.members} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.r.Status()
	if st.Replica == "" {
		return // not started
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for w, ws := range st.Workers {
		gauge(m.share, float64(ws.Share), w)
		gauge(m.demand, float64(ws.Demand), w)
	}
	if st.LeaseAge >= 0 {
		gauge(m.leaseAge, st.LeaseAge.Seconds())
	}
	gauge(m.fallback, b(st.Fallback))
	if st.Coordinator != "" {
		gauge(m.coordinator, 1, st.Coordinator)
	}
	gauge(m.isCoordinator, b(st.IsCoordinator))
	counter(m.coordChanges, float64(st.CoordinatorChanges))
	for res, n := range st.Exchanges {
		counter(m.exchanges, float64(n), res)
	}
	if !st.IsCoordinator {
		return
	}
	gauge(m.blocked, b(st.RaisesBlocked))
	counter(m.rebalances, float64(st.Rebalances))
	states := map[string]int{stateFollowing: 0, stateSilent: 0, stateUnknown: 0, stateDead: 0}
	for _, ms := range st.Replicas {
		states[ms.State]++
		if ms.SinceContact >= 0 {
			gauge(m.memberContact, ms.SinceContact.Seconds(), ms.Replica)
		}
		for w, mw := range ms.Workers {
			gauge(m.granted, float64(mw.Granted), w, ms.Replica)
			gauge(m.reserved, float64(mw.Reserved), w, ms.Replica)
			gauge(m.memberDemand, float64(mw.Demand), w, ms.Replica)
		}
	}
	for s, n := range states {
		gauge(m.members, float64(n), s)
	}
}
