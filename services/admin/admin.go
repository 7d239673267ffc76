// Package admin implements sluice.admin.v1.AdminService over the core: the worker registry, health
// checking and prefill admission. The same value serves Connect, gRPC, gRPC-Web and (through
// grpc-gateway) REST; core errors become wire codes only through internal/apierror.
//
// admin.go holds the service and what it depends on; each job has its file: workers.go (list, get,
// add, update, drain, remove), admission.go (status and live tuning), engines.go (calls fanned out
// to every engine: loads, cache flush), capacity.go, tenants.go and audit.go.
package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/alias"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/capacity"
	"github.com/sluicegw/sluice/internal/cluster"
	"github.com/sluicegw/sluice/internal/tenant"
	"github.com/sluicegw/sluice/internal/worker"
)

// Deps are the core pieces the admin API manages.
type Deps struct {
	Registry  *worker.Registry
	Admission *admission.Controller
	Checker   *worker.HealthChecker
	// Detector fills in what a new worker's spec leaves out from its engine, and refuses a worker
	// whose engine contradicts its spec; nil registers specs as given.
	Detector Detector
	// HTTP calls the engines (grpc:// workers through backend's worker-protocol transport).
	HTTP   *http.Client
	Logger *slog.Logger
	// FanoutTimeout bounds each worker call of GetLoads and FlushCache; default 5 s.
	FanoutTimeout time.Duration
	// Cluster reports cluster admission (shares of the fleet's limit); nil when coordination is off.
	Cluster func() *cluster.Status
	// PD: the gateway runs prefill/decode disaggregation, so a regular worker would never be routed to.
	PD bool
	// OnAdmissionUpdate, when set, is told the settings an UpdateAdmission applied (metrics drop the
	// series of bands no longer configured).
	OnAdmissionUpdate func(admission.Settings)
	// Capacity answers GetCapacity; nil outside PD mode (capacity.go).
	Capacity *capacity.Recommender
	// Budgets are the tenants' budgets, set live by SetTenantBudgets; nil without a tenant source.
	Budgets *tenant.Budgets
	// Aliases are the model aliases, changed live by SetModelAlias and DeleteModelAlias (aliases.go).
	Aliases *alias.Table
}

// Detector completes a worker spec from its engine (dispatch.Detector).
type Detector interface {
	Complete(ctx context.Context, spec worker.Spec) (worker.Spec, error)
}

// Service implements the admin API.
type Service struct {
	adminv1.UnimplementedAdminServiceServer
	d Deps

	// drains owns the goroutines that remove drained workers once idle.
	drainMu sync.Mutex
	drains  map[string]context.CancelFunc
}

// New builds the service.
func New(d Deps) *Service {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.FanoutTimeout <= 0 {
		d.FanoutTimeout = 5 * time.Second
	}
	return &Service{d: d, drains: map[string]context.CancelFunc{}}
}

func wire(err error) error {
	if err == nil {
		return nil
	}
	return apierror.From(err).Connect()
}

func invalid(param, format string, args ...any) error {
	return apierror.InvalidRequest(param, fmt.Sprintf(format, args...)).Connect()
}

// Close stops pending drain-then-remove goroutines.
func (s *Service) Close() {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	for _, cancel := range s.drains {
		cancel()
	}
}
