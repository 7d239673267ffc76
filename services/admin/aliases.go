package admin

import (
	"context"
	"errors"
	"net/http"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/alias"
	"github.com/sluicegw/sluice/internal/apierror"
)

// ListModelAliases returns every alias, sorted by name.
func (s *Service) ListModelAliases(context.Context, *adminv1.ListModelAliasesRequest) (*adminv1.ListModelAliasesResponse, error) {
	out := &adminv1.ListModelAliasesResponse{}
	if s.d.Aliases == nil {
		return out, nil
	}
	for _, r := range s.d.Aliases.Rules() {
		out.Aliases = append(out.Aliases, aliasToProto(r))
	}
	return out, nil
}

// SetModelAlias adds or replaces one alias, live; InvalidArgument (400) for a rule alias.Rule.Validate
// refuses.
func (s *Service) SetModelAlias(_ context.Context, req *adminv1.SetModelAliasRequest) (*adminv1.SetModelAliasResponse, error) {
	if s.d.Aliases == nil {
		return nil, errNoAliases()
	}
	r := alias.Rule{Alias: req.GetAlias()}
	for _, t := range req.GetTargets() {
		r.Targets = append(r.Targets, alias.Target{Model: t.GetModel(), Weight: int(t.GetWeight())})
	}
	if err := s.d.Aliases.Set(r); err != nil {
		if errors.Is(err, alias.ErrInvalid) {
			return nil, invalid("targets", "%s", err.Error())
		}
		return nil, err
	}
	s.d.Logger.Info("model alias set", "alias", r.Alias, "targets", r.String())
	return &adminv1.SetModelAliasResponse{Alias: aliasToProto(r)}, nil
}

// DeleteModelAlias removes one alias; NotFound (404) when there is none of that name.
func (s *Service) DeleteModelAlias(_ context.Context, req *adminv1.DeleteModelAliasRequest) (*adminv1.DeleteModelAliasResponse, error) {
	if s.d.Aliases == nil || !s.d.Aliases.Delete(req.GetAlias()) {
		return nil, apierror.New(http.StatusNotFound, apierror.CodeNotFound, "no model alias "+req.GetAlias(), nil).Connect()
	}
	s.d.Logger.Info("model alias deleted", "alias", req.GetAlias())
	return &adminv1.DeleteModelAliasResponse{}, nil
}

func aliasToProto(r alias.Rule) *adminv1.ModelAlias {
	out := &adminv1.ModelAlias{Alias: r.Alias}
	for _, t := range r.Targets {
		out.Targets = append(out.Targets, &adminv1.ModelAliasTarget{Model: t.Model, Weight: int32(t.Weight)})
	}
	return out
}

func errNoAliases() error {
	return apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, "model aliases are not enabled on this gateway", nil).Connect()
}
