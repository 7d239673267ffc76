package admin

import (
	"context"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/auth"
)

// Audited is the admin service with an audit line for every mutation: who (the caller's principal id
// and how it authenticated), what (the RPC and its target), the state before and after, and the result.
// Reads are not audited. Worker API keys never appear: the Worker message carries only has_api_key.
// It serves every surface the Service does (Connect, gRPC, gRPC-Web and REST), since the REST gateway
// calls these same methods.
type Audited struct {
	*Service
	log *slog.Logger
}

// NewAudited wraps s; audit lines go to logger at info level with "audit"=true.
func NewAudited(s *Service, logger *slog.Logger) *Audited {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Audited{Service: s, log: logger}
}

var compact = protojson.MarshalOptions{UseProtoNames: true}

func state(m proto.Message) string {
	if m == nil {
		return ""
	}
	b, err := compact.Marshal(m)
	if err != nil {
		return ""
	}
	return string(b)
}

// record writes one audit line.
func (a *Audited) record(ctx context.Context, action, target string, request, before, after proto.Message, err error) {
	who, method := "anonymous", ""
	if p, ok := auth.PrincipalFrom(ctx); ok {
		who, method = p.ID, p.Method
	}
	result := "ok"
	level := slog.LevelInfo
	if err != nil {
		result = connect.CodeOf(err).String()
		if code := apierror.CodeString(err); code != "" {
			result = code
		}
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.Bool("audit", true),
		slog.String("who", who), slog.String("auth_method", method),
		slog.String("action", action), slog.String("target", target),
		slog.String("request", state(request)),
		slog.String("before", state(before)), slog.String("after", state(after)),
		slog.String("result", result),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	a.log.LogAttrs(ctx, level, "admin audit", attrs...)
}

// workerState returns the current view of a worker, or nil.
func (a *Audited) workerState(id string) *adminv1.Worker {
	if id == "" {
		return nil
	}
	w, ok := a.d.Registry.Get(id)
	if !ok {
		return nil
	}
	return a.toProto(w, a.inflight())
}

// redactedSpec is the request of AddWorker without the worker's API key.
func redactedSpec(req *adminv1.AddWorkerRequest) *adminv1.AddWorkerRequest {
	c := proto.CloneOf(req)
	if c.GetWorker().GetApiKey() != "" {
		c.Worker.ApiKey = "[redacted]"
	}
	return c
}

// AddWorker audits Service.AddWorker.
func (a *Audited) AddWorker(ctx context.Context, req *adminv1.AddWorkerRequest) (*adminv1.AddWorkerResponse, error) {
	resp, err := a.Service.AddWorker(ctx, req)
	target := req.GetWorker().GetUrl()
	var after proto.Message
	if err == nil {
		after = resp.GetWorker()
		target = resp.GetWorker().GetId()
	}
	a.record(ctx, "AddWorker", target, redactedSpec(req), nil, after, err)
	return resp, err
}

// UpdateWorker audits Service.UpdateWorker.
func (a *Audited) UpdateWorker(ctx context.Context, req *adminv1.UpdateWorkerRequest) (*adminv1.UpdateWorkerResponse, error) {
	before := a.workerState(req.GetId())
	resp, err := a.Service.UpdateWorker(ctx, req)
	a.record(ctx, "UpdateWorker", req.GetId(), req, orNil(before), orNil(resp.GetWorker()), err)
	return resp, err
}

// DrainWorker audits Service.DrainWorker.
func (a *Audited) DrainWorker(ctx context.Context, req *adminv1.DrainWorkerRequest) (*adminv1.DrainWorkerResponse, error) {
	before := a.workerState(req.GetId())
	resp, err := a.Service.DrainWorker(ctx, req)
	a.record(ctx, "DrainWorker", req.GetId(), req, orNil(before), orNil(a.workerState(req.GetId())), err)
	return resp, err
}

// RemoveWorker audits Service.RemoveWorker.
func (a *Audited) RemoveWorker(ctx context.Context, req *adminv1.RemoveWorkerRequest) (*adminv1.RemoveWorkerResponse, error) {
	before := a.workerState(req.GetId())
	resp, err := a.Service.RemoveWorker(ctx, req)
	a.record(ctx, "RemoveWorker", req.GetId(), req, orNil(before), orNil(a.workerState(req.GetId())), err)
	return resp, err
}

// UpdateAdmission audits Service.UpdateAdmission.
func (a *Audited) UpdateAdmission(ctx context.Context, req *adminv1.UpdateAdmissionRequest) (*adminv1.UpdateAdmissionResponse, error) {
	before := a.status().GetSettings()
	resp, err := a.Service.UpdateAdmission(ctx, req)
	a.record(ctx, "UpdateAdmission", "admission", req, before, a.status().GetSettings(), err)
	return resp, err
}

// FlushCache audits Service.FlushCache.
func (a *Audited) FlushCache(ctx context.Context, req *adminv1.FlushCacheRequest) (*adminv1.FlushCacheResponse, error) {
	resp, err := a.Service.FlushCache(ctx, req)
	a.record(ctx, "FlushCache", "all workers", req, nil, orNil(resp), err)
	return resp, err
}

// SetTenantBudgets audits Service.SetTenantBudgets.
func (a *Audited) SetTenantBudgets(ctx context.Context, req *adminv1.SetTenantBudgetsRequest) (*adminv1.SetTenantBudgetsResponse, error) {
	var before proto.Message
	if b, err := a.GetTenantBudgets(ctx, &adminv1.GetTenantBudgetsRequest{}); err == nil {
		before = b.GetBudgets()
	}
	resp, err := a.Service.SetTenantBudgets(ctx, req)
	a.record(ctx, "SetTenantBudgets", "tenant budgets", req, before, orNil(resp.GetBudgets()), err)
	return resp, err
}

// SetModelAlias audits Service.SetModelAlias.
func (a *Audited) SetModelAlias(ctx context.Context, req *adminv1.SetModelAliasRequest) (*adminv1.SetModelAliasResponse, error) {
	before := a.currentAlias(ctx, req.GetAlias())
	resp, err := a.Service.SetModelAlias(ctx, req)
	a.record(ctx, "SetModelAlias", "model alias "+req.GetAlias(), req, before, orNil(resp.GetAlias()), err)
	return resp, err
}

// DeleteModelAlias audits Service.DeleteModelAlias.
func (a *Audited) DeleteModelAlias(ctx context.Context, req *adminv1.DeleteModelAliasRequest) (*adminv1.DeleteModelAliasResponse, error) {
	before := a.currentAlias(ctx, req.GetAlias())
	resp, err := a.Service.DeleteModelAlias(ctx, req)
	a.record(ctx, "DeleteModelAlias", "model alias "+req.GetAlias(), req, before, nil, err)
	return resp, err
}

// currentAlias is the alias named name as it stands, nil when there is none.
func (a *Audited) currentAlias(ctx context.Context, name string) proto.Message {
	l, err := a.ListModelAliases(ctx, &adminv1.ListModelAliasesRequest{})
	if err != nil {
		return nil
	}
	for _, m := range l.GetAliases() {
		if m.GetAlias() == name {
			return m
		}
	}
	return nil
}

// orNil turns a typed nil message into an untyped nil, so that "no state" logs as empty.
func orNil[M interface {
	proto.Message
	comparable
}](m M) proto.Message {
	var zero M
	if m == zero {
		return nil
	}
	return m
}
