package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/sluicegw/sluice/gen/sluice/cluster/v1"
	"github.com/sluicegw/sluice/gen/sluice/cluster/v1/clusterv1connect"
)

// Handler returns the Connect handler of sluice.cluster.v1.AdmissionCoordinationService and its path, to
// be served on the admin listener behind the admin API key.
func (r *Replica) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return clusterv1connect.NewAdmissionCoordinationServiceHandler(service{r}, opts...)
}

// ServiceName is the coordination service's name (for gRPC reflection).
const ServiceName = clusterv1connect.AdmissionCoordinationServiceName

// service implements the coordination service over a Replica.
type service struct{ r *Replica }

func (s service) Exchange(_ context.Context, req *clusterv1.ExchangeRequest) (*clusterv1.ExchangeResponse, error) {
	r := s.r
	if !r.started.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, ErrNotStarted)
	}
	if err := checkCaller(req.GetProtocolVersion(), req.GetReplica()); err != nil {
		return nil, err
	}
	rep, err := fromExchangeRequest(req)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	r.peers.contact(rep.replica, rep.incarnation, rep.leaving)
	g, err := r.coord.exchange(rep)
	if err != nil {
		if errors.Is(err, ErrNotCoordinator) {
			if id, _ := r.elect.coordinator(); id != "" && id != r.self {
				err = fmt.Errorf("%w; this replica follows %s", err, id)
			}
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return toExchangeResponse(g), nil
}

func (s service) Ping(_ context.Context, req *clusterv1.PingRequest) (*clusterv1.PingResponse, error) {
	r := s.r
	if !r.started.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, ErrNotStarted)
	}
	if err := checkCaller(req.GetProtocolVersion(), req.GetReplica()); err != nil {
		return nil, err
	}
	r.peers.contact(req.GetReplica(), req.GetIncarnation(), req.GetLeaving())
	rep := r.report()
	following, _ := r.elect.coordinator()
	resp := &clusterv1.PingResponse{
		Replica: r.self, Incarnation: r.incarnation, Coordinator: following, Term: rep.term, Version: rep.version,
		DefaultCap: int32(rep.other), Leaving: rep.leaving,
	}
	resp.Workers = toUsage(rep.workers)
	return resp, nil
}

func checkCaller(version uint32, replica string) error {
	if version != ProtocolVersion {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w: caller speaks %d, this replica %d", ErrProtocolVersion, version, ProtocolVersion))
	}
	if replica == "" {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w: replica is required", ErrBadRequest))
	}
	return nil
}

func fromExchangeRequest(req *clusterv1.ExchangeRequest) (report, error) {
	rep := report{
		replica: req.GetReplica(), incarnation: req.GetIncarnation(), term: req.GetTerm(), version: req.GetVersion(),
		limit: int(req.GetLimit()), decodeLimit: int(req.GetDecodeLimit()), other: int(req.GetDefaultCap()), leaving: req.GetLeaving(),
		workers: make(map[string]workerReport, len(req.GetWorkers())),
	}
	if rep.other < 0 {
		return report{}, fmt.Errorf("%w: default_cap %d is negative", ErrBadRequest, rep.other)
	}
	for _, w := range req.GetWorkers() {
		if w.GetWorker() == "" || w.GetInflight() < 0 || w.GetDemand() < 0 || w.GetCap() < 0 {
			return report{}, fmt.Errorf("%w: worker %q: counts must be >= 0 and the worker named", ErrBadRequest, w.GetWorker())
		}
		if _, dup := rep.workers[w.GetWorker()]; dup {
			return report{}, fmt.Errorf("%w: worker %q listed twice", ErrBadRequest, w.GetWorker())
		}
		rep.workers[w.GetWorker()] = workerReport{inflight: int(w.GetInflight()), demand: int(w.GetDemand()), cap: int(w.GetCap())}
	}
	if req.GetTenantShares() {
		tr, err := fromTenantReport(req)
		if err != nil {
			return report{}, err
		}
		rep.tenants = tr
	}
	return rep, nil
}

func toUsage(ws map[string]workerReport) []*clusterv1.WorkerUsage {
	out := make([]*clusterv1.WorkerUsage, 0, len(ws))
	for w, u := range ws {
		out = append(out, &clusterv1.WorkerUsage{Worker: w, Inflight: int32(u.inflight), Demand: int32(u.demand), Cap: int32(u.cap)})
	}
	return out
}

func toExchangeRequest(rep report) *clusterv1.ExchangeRequest {
	req := &clusterv1.ExchangeRequest{
		ProtocolVersion: ProtocolVersion, Replica: rep.replica, Incarnation: rep.incarnation, Term: rep.term,
		Version: rep.version, Limit: int32(rep.limit), Workers: toUsage(rep.workers), DefaultCap: int32(rep.other),
		Leaving: rep.leaving, DecodeLimit: int32(rep.decodeLimit),
	}
	if tr := rep.tenants; tr != nil {
		req.TenantShares, req.TenantDemandTruncated, req.Budgets = true, tr.truncated, toBudgets(tr.budgets)
		for _, d := range tr.demand {
			req.TenantDemand = append(req.TenantDemand, &clusterv1.TenantDemand{Tenant: d.Tenant, RequestsPerSecond: d.Requests, TokensPerSecond: d.Tokens})
		}
	}
	return req
}

func toExchangeResponse(g *grant) *clusterv1.ExchangeResponse {
	resp := &clusterv1.ExchangeResponse{
		Coordinator: g.coordinator, Term: g.term, Version: g.version, Lease: durationpb.New(g.lease),
		DefaultShare: int32(g.other), Limit: int32(g.limit), DecodeLimit: int32(g.decodeLimit), Members: g.members,
	}
	for w, s := range g.shares {
		resp.Shares = append(resp.Shares, &clusterv1.WorkerShare{Worker: w, Share: int32(s)})
	}
	if g.budgets != nil {
		resp.Budgets, resp.DefaultTenantShare = toBudgets(*g.budgets), g.defaultTenantShare
		for t, s := range g.tenantShares {
			resp.TenantShares = append(resp.TenantShares, &clusterv1.TenantShare{Tenant: t, Share: s})
		}
	}
	return resp
}

// fromExchangeResponse checks a grant before it is enforced: a malformed one is an error (the replica
// keeps its lease), never a share.
func fromExchangeResponse(resp *clusterv1.ExchangeResponse) (*grant, error) {
	g := &grant{
		coordinator: resp.GetCoordinator(), term: resp.GetTerm(), version: resp.GetVersion(), lease: resp.GetLease().AsDuration(),
		other: int(resp.GetDefaultShare()), limit: int(resp.GetLimit()),
		decodeLimit: int(resp.GetDecodeLimit()), members: resp.GetMembers(), shares: map[string]int{},
	}
	if g.term == "" || g.coordinator == "" || g.lease <= 0 || g.other < 0 || g.limit < 0 || g.decodeLimit < 0 {
		return nil, fmt.Errorf("%w: grant without term, coordinator or lease, or with negative counts", ErrBadRequest)
	}
	for _, s := range resp.GetShares() {
		if s.GetShare() < 0 || s.GetWorker() == "" {
			return nil, fmt.Errorf("%w: share %d for worker %q", ErrBadRequest, s.GetShare(), s.GetWorker())
		}
		g.shares[s.GetWorker()] = int(s.GetShare())
	}
	if resp.GetBudgets() != nil {
		bs, err := fromBudgets(resp.GetBudgets())
		if err != nil {
			return nil, err
		}
		g.budgets = &bs
		if g.defaultTenantShare = resp.GetDefaultTenantShare(); !validShare(g.defaultTenantShare) && g.defaultTenantShare != 0 {
			return nil, fmt.Errorf("%w: default tenant share %v", ErrBadRequest, g.defaultTenantShare)
		}
		g.tenantShares = make(map[string]float64, len(resp.GetTenantShares()))
		for _, ts := range resp.GetTenantShares() {
			if ts.GetTenant() == "" || !validShare(ts.GetShare()) {
				return nil, fmt.Errorf("%w: tenant share %v for tenant %q", ErrBadRequest, ts.GetShare(), ts.GetTenant())
			}
			g.tenantShares[ts.GetTenant()] = ts.GetShare()
		}
	}
	return g, nil
}

func (r *Replica) remoteExchange(ctx context.Context, peer string, rep report) (*grant, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	resp, err := r.client(peer).Exchange(ctx, toExchangeRequest(rep))
	if err != nil {
		if refused(err) {
			r.peers.refuse(peer)
		}
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return nil, fmt.Errorf("%w: %w", ErrNotCoordinator, err)
		}
		return nil, err
	}
	r.peers.contact(peer, "", false)
	return fromExchangeResponse(resp)
}

func pingRequest(r *Replica) *clusterv1.PingRequest {
	return &clusterv1.PingRequest{ProtocolVersion: ProtocolVersion, Replica: r.self, Incarnation: r.incarnation, Leaving: r.leaving.Load()}
}

func pingReport(resp *clusterv1.PingResponse) report {
	rep := report{
		replica: resp.GetReplica(), incarnation: resp.GetIncarnation(), term: resp.GetTerm(), version: resp.GetVersion(),
		other: int(resp.GetDefaultCap()), leaving: resp.GetLeaving(), workers: map[string]workerReport{},
	}
	for _, w := range resp.GetWorkers() {
		rep.workers[w.GetWorker()] = workerReport{inflight: int(max(w.GetInflight(), 0)), demand: int(max(w.GetDemand(), 0)), cap: int(max(w.GetCap(), 0))}
	}
	return rep
}

// bearerInterceptor sends the admin API key with every call.
type bearerInterceptor string

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
