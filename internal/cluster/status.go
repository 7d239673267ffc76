package cluster

import (
	"maps"
	"slices"
	"time"
)

// Status is a snapshot of cluster admission on this replica, for the admin API and the metrics.
type Status struct {
	Mode    string
	Replica string
	// Coordinator is the replica this one follows (itself when it coordinates; "" when it knows none).
	Coordinator   string
	IsCoordinator bool
	// Term of the grant enforced.
	Term string
	// Fallback: the lease ended without a new grant; the shares are an even split, never above the last
	// granted ones.
	Fallback bool
	// LeaseAge is the time since the last grant; negative when there was none.
	LeaseAge time.Duration
	// FleetLimit is the limit per worker of the last grant.
	FleetLimit int
	// FleetDecodeLimit is the decode seat limit per decode worker of the last grant (0: seats not shared).
	FleetDecodeLimit int
	// Members of the last grant.
	Members []string
	// Workers: this replica's share (enforced cap), demand and slots held, per worker.
	Workers map[string]WorkerStatus
	// Other is the share of workers not in Workers.
	Other     int
	LastError string
	// CoordinatorChanges counts changes of the replica exchanged with.
	CoordinatorChanges int64
	// Exchanges counts exchanges by result (ok, no_coordinator, refused, failed).
	Exchanges map[string]int64

	// Coordinator only.
	Replicas      []MemberStatus
	RaisesBlocked bool
	Rebalances    int64
}

// WorkerStatus is this replica's state on one worker.
type WorkerStatus struct{ Share, Demand, Inflight int }

// MemberStatus is one member as the coordinator sees it.
type MemberStatus struct {
	Replica string
	// State is following, silent, unknown or dead (see the package doc).
	State string
	// SinceContact is the time since the coordinator last heard from it; negative when never.
	SinceContact time.Duration
	Workers      map[string]MemberWorker
}

// MemberWorker is one member's state on one worker.
type MemberWorker struct{ Granted, Reserved, Demand, Inflight int }

// Status returns a snapshot. Before Run it has only the mode.
func (r *Replica) Status() Status {
	st := Status{Mode: r.cfg.Mode, LeaseAge: -1}
	if !r.started.Load() {
		return st
	}
	st.Replica = r.self
	st.Coordinator, st.IsCoordinator = r.elect.coordinator()
	now := r.now()
	r.mu.Lock()
	st.Term, st.Fallback, st.FleetLimit, st.Members = r.st.term, r.st.fallback, r.st.limit, slices.Clone(r.st.members)
	st.FleetDecodeLimit = r.st.decodeLimit
	if !r.st.lastGrant.IsZero() {
		st.LeaseAge = now.Sub(r.st.lastGrant)
	}
	st.Other, st.LastError, st.CoordinatorChanges = r.st.other, r.st.lastErr, r.st.coordChanges
	st.Exchanges = map[string]int64{}
	for i, n := range r.st.exchangeResults {
		st.Exchanges[resultNames[i]] = n
	}
	st.Workers = map[string]WorkerStatus{}
	ws := map[string]bool{}
	for w := range r.st.caps {
		ws[w] = true
	}
	for w := range r.st.demand {
		ws[w] = true
	}
	for w := range ws {
		u := r.st.demand[w]
		st.Workers[w] = WorkerStatus{Share: r.capLocked(w), Demand: u.Demand, Inflight: u.Inflight}
	}
	r.mu.Unlock()

	cs := r.coord.status()
	if cs.term != "" {
		st.RaisesBlocked, st.Rebalances = cs.blocked, cs.rebalances
		for _, m := range cs.members {
			ms := MemberStatus{Replica: m.id, State: m.state, SinceContact: m.sinceContact, Workers: map[string]MemberWorker{}}
			for _, w := range slices.Sorted(maps.Keys(m.workers)) {
				mw := m.workers[w]
				ms.Workers[w] = MemberWorker{Granted: mw.granted, Reserved: mw.reserved, Demand: mw.demand, Inflight: mw.inflight}
			}
			st.Replicas = append(st.Replicas, ms)
		}
	}
	return st
}
