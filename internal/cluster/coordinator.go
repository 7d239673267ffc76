package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// report is what a replica says about itself: an Exchange request, or a Ping answer.
type report struct {
	replica     string
	incarnation string
	// term and version name the grant the replica enforces ("" when none).
	term        string
	version     uint64
	limit       int
	decodeLimit int // of the decode keys (DecodeKey); 0: seats off
	workers     map[string]workerReport
	// other is the cap on workers not in workers.
	other   int
	leaving bool
	// tenants is nil when the replica enforces no tenant shares (an older version, or no budgets).
	tenants *tenantReport
}

type workerReport struct{ inflight, demand, cap int }

// capOf returns the cap r enforces on w.
func (r *report) capOf(w string) int {
	if wr, ok := r.workers[w]; ok {
		return wr.cap
	}
	return r.other
}

// grant is a coordinator's answer: shares leased to one replica.
type grant struct {
	coordinator string
	term        string
	version     uint64
	lease       time.Duration
	shares      map[string]int
	other       int // share of workers not in shares
	limit       int
	decodeLimit int
	members     []string
	// budgets is the newest version of the tenant budgets (nil: the coordinator shares none);
	// tenantShares the fraction of each listed tenant's budget, defaultTenantShare of the others (0:
	// none given, split evenly over members).
	budgets            *budgetSet
	tenantShares       map[string]float64
	defaultTenantShare float64
}

func (g *grant) shareOf(w string) int {
	if s, ok := g.shares[w]; ok {
		return s
	}
	return g.other
}

// Member states, as the coordinator sees them.
const (
	stateFollowing = "following" // reported within its lease
	stateSilent    = "silent"    // reported this term, not lately: its reservation stands
	stateUnknown   = "unknown"   // not heard from this term and not known dead: raises wait for it
	stateDead      = "dead"      // silent for a lease, and refusing connections or gone from the source
)

// coordinator is the books of the replica that coordinates: per member and worker, the slots the member
// may hold (its reservation), and the targets of the last allocation round. See the package doc for the
// invariant it keeps and why.
type coordinator struct {
	self   string
	lease  time.Duration
	period time.Duration
	now    func() time.Time
	peers  *peerTable

	mu         sync.Mutex
	term       string // "" while not coordinating
	termStart  time.Time
	version    uint64
	round      uint64
	planned    time.Time
	rebalances int64
	limit      int            // fleet limit of the last round
	decLimit   int            // fleet decode seat limit of the last round (decode keys)
	blocked    bool           // raises held back in the last round
	live       []string       // members not known dead, in the last round
	fixed      map[string]int // per worker: what the last round counted for members that do not report
	assumed    int            // even splits counted for unreachable members never heard from
	assumedDec int            // the same, of the decode seat limit
	members    map[string]*member
	// budgets is the newest version of the tenant budgets reported (kept across terms: see budgets.go);
	// tenantDefault the fraction of the budgets of tenants not shared by demand, in the last round.
	budgets       budgetSet
	tenantDefault float64
}

type member struct {
	id string
	// known: reported in this term; rep is its last report (or a Ping answer while it is silent).
	known      bool
	rep        report
	lastReport time.Time
	// issued are the grants of this term newer than the one it last said it enforces: any may be in force.
	issued []*grant
	last   *grant // the last grant issued
	target map[string]int
	// Per worker: when its current run of holding a slot (a reservation above 0) began (zero: it holds
	// none), and when it last held one. They decide turns when units are fewer than members with demand.
	holdSince map[string]time.Time
	lastHeld  map[string]time.Time
	state     string // of the last round
	// tenantShares is the fraction of each tenant's budget of the last round (nil: none by demand).
	tenantShares map[string]float64
}

func newCoordinator(self string, lease, period time.Duration, now func() time.Time, peers *peerTable) *coordinator {
	return &coordinator{self: self, lease: lease, period: period, now: now, peers: peers, members: map[string]*member{}}
}

func newTerm() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// start begins a term: everything known about the members is forgotten, because another coordinator may
// have changed their shares meanwhile. Until every live member has reported, shares are only renewed or
// lowered.
func (c *coordinator) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term != "" {
		return
	}
	c.term, c.termStart, c.version, c.rebalances = newTerm(), c.now(), 0, 0
	c.members = map[string]*member{}
	c.planned = time.Time{}
}

// stop ends the term: no more grants.
func (c *coordinator) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.term = ""
	c.members = map[string]*member{}
}

func (c *coordinator) currentTerm() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

func (c *coordinator) member(id string) *member {
	m := c.members[id]
	if m == nil {
		m = &member{id: id, target: map[string]int{}, holdSince: map[string]time.Time{}, lastHeld: map[string]time.Time{}}
		c.members[id] = m
	}
	return m
}

// learn takes a member's own account of what it enforces and holds.
func (m *member) learn(r report, term string) {
	if m.rep.incarnation != "" && r.incarnation != m.rep.incarnation {
		// A new process: grants to the old one are void and its slots are gone.
		m.issued = nil
	}
	if r.term == term {
		// It enforces the grant of version r.version; older ones it will never enforce again.
		m.issued = slices.DeleteFunc(m.issued, func(g *grant) bool { return g.version <= r.version })
	} else {
		// It enforces another coordinator's grant (or none): none of ours is in force.
		m.issued = nil
	}
	m.rep = r
	m.known = true
}

// reserved is the most slots m may hold on w: what it holds, what it enforces, and any grant of ours it
// may have received since it said so. It only grows when we grant more.
func (m *member) reserved(w string) int {
	if !m.known {
		return 0
	}
	r := m.rep.capOf(w)
	if wr, ok := m.rep.workers[w]; ok {
		r = max(r, wr.inflight)
	}
	for _, g := range m.issued {
		r = max(r, g.shareOf(w))
	}
	return r
}

// exchange takes a member's report and returns its grant.
func (c *coordinator) exchange(r report) (*grant, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term == "" {
		return nil, ErrNotCoordinator
	}
	if !c.peers.isMember(r.replica) {
		return nil, fmt.Errorf("%w: %s", ErrNotMember, r.replica)
	}
	now := c.now()
	m := c.member(r.replica)
	wasFollowing := m.known && now.Sub(m.lastReport) < c.lease
	m.learn(r, c.term)
	m.lastReport = now
	c.learnBudgetsLocked(r)
	if !wasFollowing || now.Sub(c.planned) >= c.period {
		c.planLocked(now)
	}
	g := c.grantLocked(m)
	c.version++
	g.version = c.version
	m.issued = append(m.issued, g)
	m.last = g
	return g, nil
}

// pinged takes a silent member's Ping answer: it tells what the member holds and enforces now, and no
// other coordinator can have raised it meanwhile (see the package doc), so its reservation may shrink.
func (c *coordinator) pinged(r report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[r.replica]
	if c.term == "" || m == nil || !m.known || c.now().Sub(m.lastReport) < c.lease {
		return // reports are authoritative while they arrive
	}
	m.learn(r, c.term)
}

// stateLocked classifies a member, and says whether it is reachable. A silent member is reachable while it
// was heard from within a lease. A member never heard from in this term counts as reachable (so it holds
// raises back) until two leases have passed without hearing from it, counted from the later of the term's
// start and the last contact: by then any share an earlier coordinator leased it has ended, and it holds at
// most its fallback once the prefills it admitted before have ended (see the package doc).
func (c *coordinator) stateLocked(id string, now time.Time) (state string, reachable bool) {
	pv := c.peers.view(id)
	m := c.members[id]
	if m != nil && m.known && now.Sub(m.lastReport) < c.lease {
		return stateFollowing, true
	}
	since := c.termStart
	if pv.lastContact.After(since) {
		since = pv.lastContact
	}
	if m != nil && m.lastReport.After(since) {
		since = m.lastReport
	}
	quiet := now.Sub(since) >= c.lease
	switch {
	case quiet && (pv.refused || !pv.present):
		return stateDead, false
	case m != nil && m.known:
		return stateSilent, !quiet
	default:
		return stateUnknown, now.Sub(since) < 2*c.lease
	}
}

// planLocked is one allocation round. It classifies the members, derives the fleet limit and, per worker,
// what the members that do not report may hold (fixed): a silent member its reservation, and never less
// than its even split (it may be on its fallback, or follow a coordinator on another side of a partition,
// which counts us at our even splits and may raise it up to its own); an unreachable member never heard
// from in this term its even split. A reachable member never heard from in this term holds back every
// raise: it may follow another coordinator that can reach us. Then it sets every following member's target
// per worker by fairShares over the budget the others leave.
func (c *coordinator) planLocked(now time.Time) {
	c.round++
	c.planned = now
	type entry struct {
		id        string
		state     string
		reachable bool
	}
	var entries []entry
	var live []string
	for _, id := range c.idsLocked() {
		st, reach := c.stateLocked(id, now)
		if st == stateDead {
			delete(c.members, id) // its slots are gone; if it comes back it reports afresh
			continue
		}
		entries = append(entries, entry{id, st, reach})
		live = append(live, id)
	}
	limit, decLimit := 0, 0
	for _, e := range entries {
		if m := c.members[e.id]; m != nil && m.known {
			if l := m.rep.limit; l > 0 && (limit == 0 || l < limit) {
				limit = l
			}
			if l := m.rep.decodeLimit; l > 0 && (decLimit == 0 || l < decLimit) {
				decLimit = l
			}
		}
	}
	// Every count below is kept per side: a decode key's budget is decLimit, and a member not reporting is
	// counted at its even split of its side's limit.
	blocked, assumed, assumedDec := false, 0, 0
	var following, silent []*member
	var silentFloor, silentFloorDec []int
	workers := map[string]bool{}
	for _, e := range entries {
		m := c.members[e.id]
		switch e.state {
		case stateUnknown:
			if e.reachable {
				blocked = true
			} else {
				assumed += fallbackShare(limit, live, e.id)
				assumedDec += fallbackShare(decLimit, live, e.id)
			}
			continue
		case stateFollowing:
			following = append(following, m)
		case stateSilent:
			silent = append(silent, m)
			silentFloor = append(silentFloor, fallbackShare(limit, live, e.id))
			silentFloorDec = append(silentFloorDec, fallbackShare(decLimit, live, e.id))
		}
		m.state = e.state
		for w := range m.rep.workers {
			workers[w] = true
		}
		for _, g := range m.issued {
			for w := range g.shares {
				workers[w] = true
			}
		}
	}
	c.limit, c.decLimit, c.blocked, c.live = limit, decLimit, blocked, live
	c.fixed = map[string]int{}
	changed := false
	for _, w := range slices.Sorted(maps.Keys(workers)) {
		fixed, floor := assumed, silentFloor
		if _, dec := SplitDecodeKey(w); dec {
			fixed, floor = assumedDec, silentFloorDec
		}
		for i, m := range silent {
			fixed += max(m.reserved(w), floor[i])
		}
		c.fixed[w] = fixed
		cs := make([]claim, len(following))
		for i, m := range following {
			held := m.reserved(w)
			if held > 0 {
				if m.holdSince[w].IsZero() {
					m.holdSince[w] = now
				}
				m.lastHeld[w] = now
			} else {
				delete(m.holdSince, w)
			}
			sticky := held > 0 && now.Sub(m.holdSince[w]) < c.lease
			cs[i] = claim{id: m.id, tie: tieBreak(w, m.id), demand: m.rep.workers[w].demand, held: held, sticky: sticky, lastHeld: m.lastHeld[w]}
		}
		shares := fairShares(limitOf(w, limit, decLimit)-fixed, cs)
		for i, m := range following {
			if old, ok := m.target[w]; !ok || old != shares[i] {
				changed = true
			}
			m.target[w] = shares[i]
		}
	}
	c.assumed, c.assumedDec = assumed, assumedDec
	for _, m := range c.members {
		for w := range m.target {
			if !workers[w] {
				delete(m.target, w)
			}
		}
	}
	if changed {
		c.rebalances++
	}
	c.planTenantsLocked(live, following)
}

// idsLocked lists every member the source lists and every member that reported in this term (a pod whose
// endpoint is gone while it drains still reports), sorted.
func (c *coordinator) idsLocked() []string {
	ids := c.peers.members()
	for id := range c.members {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// grantLocked computes m's shares: its targets, except that a share above what m may already hold is a
// raise, granted only from the budget nobody may be holding (the limit minus every following member's
// reservation and what the last round counted for the others), and only when no reachable member is
// unknown.
func (c *coordinator) grantLocked(m *member) *grant {
	g := &grant{coordinator: c.self, term: c.term, lease: c.lease, shares: map[string]int{}, limit: c.limit, decodeLimit: c.decLimit,
		members: slices.Clone(c.live), budgets: c.budgetsForLocked(m)}
	if g.budgets != nil {
		g.tenantShares, g.defaultTenantShare = m.tenantShares, c.tenantDefault
	}
	ws := maps.Clone(m.target)
	for w := range m.rep.workers {
		if _, ok := ws[w]; !ok {
			ws[w] = 0
		}
	}
	for w, t := range ws {
		held := m.reserved(w)
		share := t
		if t > held {
			share = held
			if !c.blocked {
				total, ok := c.fixed[w]
				if !ok {
					total = limitOf(w, c.assumed, c.assumedDec)
				}
				for _, o := range c.members {
					if o.state == stateFollowing {
						total += o.reserved(w)
					}
				}
				share = min(t, held+max(limitOf(w, c.limit, c.decLimit)-total, 0))
			}
		}
		g.shares[w] = share
	}
	return g
}

// memberStatus is one member as the books see it (for the admin API and metrics).
type memberStatus struct {
	id           string
	state        string
	sinceContact time.Duration
	workers      map[string]memberWorker
}

type memberWorker struct{ granted, reserved, demand, inflight int }

// coordStatus is a snapshot of the books; term is "" when not coordinating.
type coordStatus struct {
	term       string
	limit      int
	blocked    bool
	rebalances int64
	members    []memberStatus
}

func (c *coordinator) status() coordStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := coordStatus{term: c.term, limit: c.limit, blocked: c.blocked, rebalances: c.rebalances}
	if c.term == "" {
		return st
	}
	now := c.now()
	for _, id := range c.idsLocked() {
		state, _ := c.stateLocked(id, now)
		ms := memberStatus{id: id, state: state, workers: map[string]memberWorker{}}
		last := c.peers.view(id).lastContact
		if m := c.members[id]; m != nil {
			last = later(last, m.lastReport)
			ws := map[string]bool{}
			for w := range m.rep.workers {
				ws[w] = true
			}
			for w := range m.target {
				ws[w] = true
			}
			for w := range ws {
				mw := memberWorker{reserved: m.reserved(w), demand: m.rep.workers[w].demand, inflight: m.rep.workers[w].inflight}
				if m.last != nil {
					mw.granted = m.last.shareOf(w)
				}
				ms.workers[w] = mw
			}
		}
		if !last.IsZero() {
			ms.sinceContact = now.Sub(last)
		} else {
			ms.sinceContact = -1
		}
		st.members = append(st.members, ms)
	}
	return st
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
