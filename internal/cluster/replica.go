package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicegw/sluice/gen/sluice/cluster/v1/clusterv1connect"
	"github.com/sluicegw/sluice/internal/tenant"
)

// Replica is this gateway's part in cluster admission: it reports its usage to the coordinator every
// period, enforces the shares it is granted through Local.SetCaps, falls back when its lease ends, pings
// its peers, and coordinates when elected. See the package documentation.
type Replica struct {
	cfg         Config
	d           Deps
	log         *slog.Logger
	now         func() time.Time
	incarnation string
	metrics     *metrics

	// Set once by Run before started is stored; read only after started.Load().
	self  string
	peers *peerTable
	coord *coordinator
	elect election

	started atomic.Bool
	leaving atomic.Bool
	leave   chan struct{} // closed by Leave
	once    sync.Once

	clientsMu sync.Mutex
	clients   map[string]clusterv1connect.AdmissionCoordinationServiceClient

	mu sync.Mutex
	st replicaState
}

// replicaState is what this replica enforces and last heard; guarded by Replica.mu, changed only by the
// exchange loop.
type replicaState struct {
	coordinator     string // of the last grant
	leader          string // whom the last exchange went to
	term            string
	version         uint64
	granted         map[string]int
	grantedOther    int
	limit           int
	decodeLimit     int
	members         []string
	leaseEnd        time.Time
	lastGrant       time.Time
	caps            map[string]int // enforced
	other           int
	fallback        bool
	fallbackOver    int            // members the fallback's even split is over
	demand          map[string]Use // last reported
	lastErr         string
	coordChanges    int64
	exchangeResults [numResults]int64
	// Tenant budgets (budgets.go): the version the last grant named, and the shares last enforced.
	budgetsAck    tenant.Version
	tenantsSet    bool
	tenantDefault float64
	tenantShares  map[string]float64
}

// Exchange results (a metric label).
const (
	resultOK = iota
	resultNoCoordinator
	resultRefused // the callee is not the coordinator, or not serving coordination
	resultFailed  // transport error, timeout
	numResults
)

var resultNames = [numResults]string{"ok", "no_coordinator", "refused", "failed"}

// election says who coordinates.
type election interface {
	// coordinator returns the current coordinator's id ("" when none is known) and whether it is this
	// replica.
	coordinator() (id string, self bool)
}

// New checks the configuration and closes Local to new admissions (caps 0) until the first grant; nothing
// runs until Run.
func New(cfg Config, d Deps) (*Replica, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	if d.Local == nil {
		return nil, fmt.Errorf("%w: Local is required", ErrInvalidConfig)
	}
	if cfg.Mode == ModeKubernetes && d.Kube == nil {
		return nil, fmt.Errorf("%w: kubernetes mode needs a Kubernetes client", ErrInvalidConfig)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.HTTP == nil {
		d.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	r := &Replica{
		cfg: cfg, d: d, log: d.Logger.With("component", "cluster"), now: d.Now, incarnation: hex.EncodeToString(b),
		leave: make(chan struct{}), clients: map[string]clusterv1connect.AdmissionCoordinationServiceClient{},
	}
	// Nothing is admitted before the first grant.
	d.Local.SetCaps(nil, 0)
	r.metrics = newMetrics(r)
	if d.Registerer != nil {
		if err := d.Registerer.Register(r.metrics); err != nil {
			return nil, fmt.Errorf("cluster metrics: %w", err)
		}
	}
	return r, nil
}

// Run coordinates as replica self (the base URL of this replica's admin listener, as the peers know it)
// until ctx ends. Until the first grant, this replica admits nothing.
func (r *Replica) Run(ctx context.Context, self string) error {
	r.self = self
	r.peers = newPeerTable(self, r.now)
	r.coord = newCoordinator(self, r.cfg.Lease, r.cfg.Period, r.now, r.peers)
	var kube *kubeElection
	switch r.cfg.Mode {
	case ModeStatic:
		if !slices.Contains(r.cfg.Peers, self) {
			return fmt.Errorf("%w: %s", ErrSelfNotFound, self)
		}
		r.peers.setMembers(r.cfg.Peers)
		r.elect = staticElection{r}
	case ModeKubernetes:
		kube = &kubeElection{r: r}
		r.elect = kube
	}
	if r.d.Budgets != nil {
		r.d.Budgets.SetOrigin(self)
	}
	r.started.Store(true)
	r.log.Info("cluster admission started", "mode", r.cfg.Mode, "replica", self, "period", r.cfg.Period, "lease", r.cfg.Lease)

	var wg sync.WaitGroup
	if kube != nil {
		if err := kube.start(ctx, &wg); err != nil {
			return err
		}
	}
	wg.Go(func() { r.pingLoop(ctx) })
	r.exchangeLoop(ctx)
	wg.Wait()
	r.coord.stop()
	return nil
}

// Leave tells the fleet that this replica is shutting down: it stops coordinating (and pinging, so it is
// not elected again) but keeps reporting, so its slots stay counted while its requests drain.
func (r *Replica) Leave() {
	r.once.Do(func() {
		r.leaving.Store(true)
		close(r.leave)
	})
}

type staticElection struct{ r *Replica }

func (e staticElection) coordinator() (string, bool) {
	id := e.r.peers.lowestLive(e.r.cfg.Lease, e.r.leaving.Load())
	return id, id == e.r.self
}

func (r *Replica) exchangeLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Period)
	defer t.Stop()
	for {
		r.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick is one exchange: follow the election, report, and enforce what comes back (or fall back).
func (r *Replica) tick(ctx context.Context) {
	leader, isSelf := r.elect.coordinator()
	if isSelf && !r.leaving.Load() {
		r.coord.start()
	} else {
		r.coord.stop()
	}
	rep := r.report()
	if r.d.Budgets != nil {
		rep.tenants = r.tenantsReport()
	}
	sent := r.now()
	var g *grant
	var err error
	switch {
	case leader == "":
		err = errNoCoordinator
	case isSelf:
		g, err = r.coord.exchange(rep)
	default:
		g, err = r.remoteExchange(ctx, leader, rep)
	}
	if ctx.Err() != nil {
		return
	}
	r.settle(leader, g, err, sent)
}

// report builds this replica's report from its admission usage and what it enforces. Only the exchange
// loop changes what it enforces, so the usage is measured under the caps the report names.
func (r *Replica) report() report {
	limits, use := r.d.Local.Usage()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := report{replica: r.self, incarnation: r.incarnation, term: r.st.term, version: r.st.version,
		limit: limits.Prefill, decodeLimit: limits.Decode, workers: make(map[string]workerReport, len(use)),
		other: r.st.other, leaving: r.leaving.Load()}
	for w, u := range use {
		rep.workers[w] = workerReport{inflight: u.Inflight, demand: u.Demand, cap: r.capLocked(w)}
	}
	for w, c := range r.st.caps {
		if _, ok := rep.workers[w]; !ok {
			rep.workers[w] = workerReport{cap: c}
		}
	}
	r.st.demand = use
	return rep
}

func (r *Replica) capLocked(w string) int {
	if c, ok := r.st.caps[w]; ok {
		return c
	}
	return r.st.other
}

// settle enforces a grant, or falls back when the lease has ended: then each share becomes the smaller
// of the last granted share and an even split of the limit over the members of the last grant and those
// the membership source lists.
func (r *Replica) settle(leader string, g *grant, err error, sent time.Time) {
	now := r.now()
	r.mu.Lock()
	if leader != r.st.leader {
		r.st.coordChanges++
		r.st.leader = leader
	}
	oldCaps, oldOther, wasFallback := r.st.caps, r.st.other, r.st.fallback
	if err == nil {
		r.st.exchangeResults[resultOK]++
		r.st.coordinator, r.st.term, r.st.version = g.coordinator, g.term, g.version
		r.st.granted, r.st.grantedOther = g.shares, g.other
		r.st.limit, r.st.decodeLimit, r.st.members = g.limit, g.decodeLimit, g.members
		r.st.leaseEnd, r.st.lastGrant = sent.Add(g.lease), now
		r.st.caps, r.st.other = maps.Clone(g.shares), g.other
		if r.st.fallback {
			r.log.Info("cluster admission lease renewed", "coordinator", g.coordinator)
		}
		r.st.fallback = false
		r.st.lastErr = ""
	} else {
		switch {
		case errors.Is(err, errNoCoordinator):
			r.st.exchangeResults[resultNoCoordinator]++
		case errors.Is(err, ErrNotCoordinator), errors.Is(err, ErrNotMember), errors.Is(err, ErrNotStarted), errors.Is(err, ErrProtocolVersion):
			r.st.exchangeResults[resultRefused]++
		default:
			r.st.exchangeResults[resultFailed]++
		}
		r.st.lastErr = err.Error()
		// The even split is over the last grant's members and every member the source lists: one that
		// came back after that grant (a restart behind a one-way cut) is counted by its coordinator at
		// its own even split over all of them, so ours must leave it that. Recomputed while the set grows.
		if over := fallbackMembers(r.st.members, r.peers.members()); r.st.granted != nil && !now.Before(r.st.leaseEnd) &&
			(!r.st.fallback || len(over) != r.st.fallbackOver) {
			fb := fallbackShare(r.st.limit, over, r.self)
			fbDec := fallbackShare(r.st.decodeLimit, over, r.self)
			caps := make(map[string]int, len(r.st.granted))
			for w, s := range r.st.granted {
				caps[w] = min(s, limitOf(w, fb, fbDec))
			}
			other := min(r.st.grantedOther, fb)
			if r.st.decodeLimit > 0 { // other caps decode keys too
				other = min(other, fbDec)
			}
			if !r.st.fallback {
				r.log.Warn("cluster admission lease ended without a new grant; falling back to an even split",
					"coordinator", r.st.coordinator, "members", len(over), "share", fb, "err", err)
			}
			r.st.caps, r.st.other, r.st.fallback, r.st.fallbackOver = caps, other, true, len(over)
		}
	}
	caps, other, members := r.st.caps, r.st.other, len(r.st.members)
	changed := other != oldOther || !maps.Equal(caps, oldCaps)
	fellBack := r.st.fallback && !wasFallback
	r.mu.Unlock()
	if changed {
		r.d.Local.SetCaps(caps, other)
	}
	if r.d.Budgets != nil {
		if err != nil {
			g = nil
		}
		r.settleTenants(g, fellBack, members)
	}
}

// fallbackMembers is the sorted union of a grant's members and the members the source lists.
func fallbackMembers(granted, listed []string) []string {
	out := slices.Concat(granted, listed)
	slices.Sort(out)
	return slices.Compact(out)
}

// client returns the coordination client of a peer.
func (r *Replica) client(peer string) clusterv1connect.AdmissionCoordinationServiceClient {
	r.clientsMu.Lock()
	defer r.clientsMu.Unlock()
	c := r.clients[peer]
	if c == nil {
		var opts []connect.ClientOption
		if r.d.Token != "" {
			opts = append(opts, connect.WithInterceptors(bearerInterceptor(r.d.Token)))
		}
		c = clusterv1connect.NewAdmissionCoordinationServiceClient(r.d.HTTP, peer, opts...)
		r.clients[peer] = c
	}
	return c
}

// pingLoop keeps liveness: in static mode every replica pings every peer each period (election needs
// it); in Kubernetes mode only the coordinator pings (telling silent members from dead ones). A leaving
// replica stops pinging, so its peers stop counting it as a candidate.
func (r *Replica) pingLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.leave:
			return
		case <-t.C:
		}
		if r.cfg.Mode == ModeKubernetes && r.coord.currentTerm() == "" {
			continue
		}
		var wg sync.WaitGroup
		for _, p := range r.peers.members() {
			if p != r.self {
				wg.Go(func() { r.ping(ctx, p) })
			}
		}
		wg.Wait()
	}
}

func (r *Replica) ping(ctx context.Context, peer string) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	resp, err := r.client(peer).Ping(ctx, pingRequest(r))
	if err != nil {
		if refused(err) {
			r.peers.refuse(peer)
		}
		return
	}
	if resp.GetReplica() != peer {
		r.log.Warn("peer answered with another replica id; check --admission-peers", "peer", peer, "answered", resp.GetReplica())
		return
	}
	r.peers.contact(peer, resp.GetIncarnation(), resp.GetLeaving())
	r.coord.pinged(pingReport(resp))
}
