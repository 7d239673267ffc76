// Package admin implements sluice.admin.v1.AdminService over the core: the worker registry, health
// checking and prefill admission. The same value serves Connect, gRPC, gRPC-Web and (through
// grpc-gateway) REST; core errors become wire codes only through internal/apierror.
package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/capacity"
	"github.com/sluicegw/sluice/internal/cluster"
	"github.com/sluicegw/sluice/internal/kvevents"
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

// inflight returns the admission slots held per worker URL.
func (s *Service) inflight() map[string]int {
	if s.d.Admission == nil {
		return nil
	}
	return s.d.Admission.Status().Inflight
}

func (s *Service) toProto(w *worker.Worker, inflight map[string]int) *adminv1.Worker {
	spec := w.Spec()
	return &adminv1.Worker{
		Id:                w.ID(),
		Url:               w.URL(),
		Role:              string(w.Role()),
		Protocol:          string(w.Protocol()),
		Models:            w.Models(),
		BootstrapPort:     uint32(spec.BootstrapPort),
		Labels:            spec.Labels,
		Health:            w.Health().String(),
		CircuitBreaker:    w.Breaker().State(time.Now()).String(),
		Load:              clamp32(w.Load()),
		AdmissionInflight: clamp32(int64(inflight[w.URL()])),
		HasApiKey:         spec.APIKey != "",
		ProtocolSource:    spec.ProtocolSource,
		DpSize:            uint32(spec.DPSize),
		Source:            string(spec.Source),
		Namespace:         spec.Namespace,
		Pod:               spec.Pod,
		Ranks:             rankLoads(w),
		KvConnector:       spec.KVConnector,
		DecodeWindow:      uint32(spec.DecodeWindow),
		KvEvents:          spec.KVEvents,
		KvRole:            spec.KVRole,
	}
}

// rankLoads is the load sluice puts on each data-parallel rank of an engine (nil without ranks).
func rankLoads(w *worker.Worker) []*adminv1.RankLoad {
	ranks := w.Ranks()
	if len(ranks) == 0 {
		return nil
	}
	out := make([]*adminv1.RankLoad, len(ranks))
	for i, r := range ranks {
		out[i] = &adminv1.RankLoad{Rank: uint32(r.Rank()), Load: clamp32(r.Load())}
	}
	return out
}

// refuseManaged stops the admin API from removing or draining a worker that service discovery owns:
// discovery would register it again at its next pass (or keep a ready pod's traffic stopped), so the
// operator is told where the worker's lifecycle lives instead.
func refuseManaged(w *worker.Worker, action string) error {
	spec := w.Spec()
	if !spec.Managed() {
		return nil
	}
	return wire(fmt.Errorf("%w: cannot %s %s: it follows Kubernetes pod %s/%s; delete the pod, scale its workload or change its labels instead",
		worker.ErrManaged, action, w.ID(), spec.Namespace, spec.Pod))
}

// ListWorkers lists workers, filtered by role, model and health.
func (s *Service) ListWorkers(_ context.Context, req *adminv1.ListWorkersRequest) (*adminv1.ListWorkersResponse, error) {
	if req.GetRole() != "" {
		if _, err := worker.ParseRole(req.GetRole()); err != nil {
			return nil, invalid("role", "%v", err)
		}
	}
	if h := req.GetHealth(); h != "" && !slices.Contains(healthStates(), h) {
		return nil, invalid("health", "unknown health %q: want one of %s", h, strings.Join(healthStates(), ", "))
	}
	out := &adminv1.ListWorkersResponse{Workers: []*adminv1.Worker{}}
	inflight := s.inflight()
	all := slices.Clone(s.d.Registry.Snapshot().All())
	slices.SortFunc(all, func(a, b *worker.Worker) int { return byID(a.ID(), b.ID()) })
	for _, w := range all {
		if req.GetRole() != "" && string(w.Role()) != req.GetRole() {
			continue
		}
		if req.GetModel() != "" && !w.ServesModel(req.GetModel()) {
			continue
		}
		if req.GetHealth() != "" && w.Health().String() != req.GetHealth() {
			continue
		}
		out.Workers = append(out.Workers, s.toProto(w, inflight))
	}
	return out, nil
}

// clamp32 fits a count into the API's 32-bit integers (admin.proto says why they are 32-bit): a
// value past the range reads as its bound, never as a wrapped number.
func clamp32(v int64) int32 {
	return int32(max(math.MinInt32, min(v, math.MaxInt32)))
}

// healthStates are the health names a worker can have, as the API spells them.
func healthStates() []string {
	return []string{worker.HealthPending.String(), worker.HealthReady.String(), worker.HealthNotReady.String(), worker.HealthDraining.String()}
}

// byID orders worker ids as they were assigned: "w2" before "w10".
func byID(a, b string) int {
	if c := cmp.Compare(len(a), len(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func (s *Service) get(id string) (*worker.Worker, error) {
	if id == "" {
		return nil, invalid("id", "worker id is required")
	}
	w, ok := s.d.Registry.Get(id)
	if !ok {
		return nil, wire(fmt.Errorf("%w: %s", worker.ErrNotFound, id))
	}
	return w, nil
}

// GetWorker returns one worker.
func (s *Service) GetWorker(_ context.Context, req *adminv1.GetWorkerRequest) (*adminv1.GetWorkerResponse, error) {
	w, err := s.get(req.GetId())
	if err != nil {
		return nil, err
	}
	return &adminv1.GetWorkerResponse{Worker: s.toProto(w, s.inflight())}, nil
}

// AddWorker validates the spec, fills in protocol and models from the engine when not given, registers
// the worker (Pending) and probes it at once so that a healthy engine becomes routable without waiting
// for the next health round.
func (s *Service) AddWorker(ctx context.Context, req *adminv1.AddWorkerRequest) (*adminv1.AddWorkerResponse, error) {
	ws := req.GetWorker()
	if ws == nil || ws.GetUrl() == "" {
		return nil, invalid("url", "worker url is required")
	}
	role, err := worker.ParseRole(ws.GetRole())
	if err != nil {
		return nil, invalid("role", "%v", err)
	}
	if s.d.PD && role == worker.RoleRegular {
		return nil, invalid("role", "this gateway runs prefill/decode disaggregation (--pd-disaggregation): add the worker as role prefill or decode; a regular worker would never be routed to")
	}
	spec := worker.Spec{
		URL: ws.GetUrl(), Role: role, Models: ws.GetModels(), BootstrapPort: int(ws.GetBootstrapPort()),
		Labels: ws.GetLabels(), APIKey: ws.GetApiKey(), DPSize: int(ws.GetDpSize()), Source: worker.SourceAdmin,
		KVConnector: ws.GetKvConnector(), DecodeWindow: int(ws.GetDecodeWindow()), KVRole: ws.GetKvRole(),
		KVEvents: ws.GetKvEvents(),
	}
	if ws.GetProtocol() != "" {
		p, err := worker.ParseProtocol(ws.GetProtocol())
		if err != nil {
			return nil, invalid("protocol", "%v", err)
		}
		spec.Protocol = p
	}
	check := spec
	if check.Protocol == "" { // detected below; validate the rest now
		check.Protocol = worker.ProtocolSGLang
		if check.KVConnector != "" || check.KVRole != "" {
			check.Protocol = worker.ProtocolVLLM // only vLLM workers have a connector or a KV role
		}
	}
	if spec.KVEvents != "" {
		if _, err := kvevents.ParseEndpointSpec(spec.URL, spec.KVEvents); err != nil {
			return nil, invalid("kv_events", "kv_events: %v", err)
		}
	}
	if err := check.Validate(); err != nil {
		return nil, invalid("url", "%v", err)
	}
	if _, dup := s.d.Registry.Snapshot().ByURL(normalizedURL(spec)); dup {
		return nil, wire(fmt.Errorf("%w: %s", worker.ErrAlreadyExists, spec.URL))
	}
	if s.d.Detector != nil {
		if spec, err = s.d.Detector.Complete(ctx, spec); err != nil {
			return nil, wire(err)
		}
	}
	w, err := s.d.Registry.Add(spec)
	if err != nil {
		return nil, wire(err)
	}
	if s.d.Checker != nil {
		_, _ = s.d.Checker.CheckNow(ctx, w.ID())
	}
	// The registry logs "worker added" for every add, from the admin API or not.
	return &adminv1.AddWorkerResponse{Worker: s.toProto(w, s.inflight())}, nil
}

func normalizedURL(spec worker.Spec) string {
	n, err := spec.Normalized()
	if err != nil {
		return spec.URL
	}
	return n.URL
}

// UpdateWorker changes labels and the bootstrap port.
func (s *Service) UpdateWorker(_ context.Context, req *adminv1.UpdateWorkerRequest) (*adminv1.UpdateWorkerResponse, error) {
	w, err := s.get(req.GetId())
	if err != nil {
		return nil, err
	}
	if req.BootstrapPort != nil {
		if err := refuseManaged(w, "change the bootstrap port of"); err != nil {
			return nil, err // it comes from the pod's sglang.ai/bootstrap-port annotation
		}
		if w.Role() != worker.RolePrefill && req.GetBootstrapPort() != 0 {
			return nil, invalid("bootstrap_port", "only prefill workers have a bootstrap port")
		}
		if req.GetBootstrapPort() > 65535 {
			return nil, invalid("bootstrap_port", "bootstrap port %d out of range", req.GetBootstrapPort())
		}
	}
	err = s.d.Registry.Update(w.ID(), func(spec *worker.Spec) {
		if req.GetReplaceLabels() {
			spec.Labels = maps.Clone(req.GetLabels())
		} else if len(req.GetLabels()) > 0 {
			if spec.Labels == nil {
				spec.Labels = map[string]string{}
			}
			for k, v := range req.GetLabels() {
				if v == "" {
					delete(spec.Labels, k)
				} else {
					spec.Labels[k] = v
				}
			}
		}
		if req.BootstrapPort != nil {
			spec.BootstrapPort = int(req.GetBootstrapPort())
		}
	})
	if err != nil {
		return nil, wire(err)
	}
	w, _ = s.d.Registry.Get(w.ID())
	return &adminv1.UpdateWorkerResponse{Worker: s.toProto(w, s.inflight())}, nil
}

// DrainWorker stops routing to a worker; with remove_when_idle it is removed once its in-flight requests
// have finished (at once when idle).
func (s *Service) DrainWorker(ctx context.Context, req *adminv1.DrainWorkerRequest) (*adminv1.DrainWorkerResponse, error) {
	w, err := s.get(req.GetId())
	if err != nil {
		return nil, err
	}
	if err := refuseManaged(w, "drain"); err != nil {
		return nil, err
	}
	if err := s.d.Registry.Drain(w.ID()); err != nil && !errors.Is(err, worker.ErrDraining) {
		return nil, wire(err)
	}
	out := &adminv1.DrainWorkerResponse{Worker: s.toProto(w, s.inflight())}
	if req.GetRemoveWhenIdle() {
		if w.Load() == 0 {
			if err := s.d.Registry.Remove(w.ID()); err != nil && !errors.Is(err, worker.ErrNotFound) {
				return nil, wire(err)
			}
			return out, nil
		}
		s.removeWhenIdle(w.ID())
	}
	return out, nil
}

// removeWhenIdle starts (once per worker) a goroutine that removes the worker when its load reaches 0.
// Close stops them.
func (s *Service) removeWhenIdle(id string) {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	if _, running := s.drains[id]; running || s.drains == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.drains[id] = cancel
	go func() {
		defer func() {
			s.drainMu.Lock()
			delete(s.drains, id)
			s.drainMu.Unlock()
			cancel()
		}()
		if err := s.d.Registry.WaitIdle(ctx, id); err != nil {
			return
		}
		if err := s.d.Registry.Remove(id); err == nil {
			s.d.Logger.Info("drained worker removed", "id", id)
		}
	}()
}

// Close stops pending drain-then-remove goroutines.
func (s *Service) Close() {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	for _, cancel := range s.drains {
		cancel()
	}
}

// RemoveWorker unregisters a worker at once.
func (s *Service) RemoveWorker(_ context.Context, req *adminv1.RemoveWorkerRequest) (*adminv1.RemoveWorkerResponse, error) {
	w, err := s.get(req.GetId())
	if err != nil {
		return nil, err
	}
	if err := refuseManaged(w, "remove"); err != nil {
		return nil, err
	}
	out := s.toProto(w, s.inflight())
	if err := s.d.Registry.Remove(w.ID()); err != nil {
		return nil, wire(err)
	}
	return &adminv1.RemoveWorkerResponse{Worker: out}, nil
}

func (s *Service) status() *adminv1.AdmissionStatus {
	st := s.d.Admission.Status()
	out := &adminv1.AdmissionStatus{
		Enabled: st.Settings.Enabled(),
		Settings: &adminv1.AdmissionSettings{
			MaxInflightPerWorker:       int32(st.Settings.MaxInflightPerWorker),
			QueueSize:                  int32(st.Settings.QueueSize),
			QueueTimeout:               durationpb.New(st.Settings.QueueTimeout),
			MaxInflightTokensPerWorker: clamp32(st.Settings.MaxInflightTokensPerWorker),
			EarlyRejection:             st.Settings.EarlyRejection,
			DecodeMaxInflightPerWorker: int32(st.Settings.DecodeMaxInflightPerWorker),
			DecodeAuto:                 st.Settings.DecodeAuto,
		},
		Queued:          int32(st.QueuedTotal),
		WaitP50Seconds:  st.Wait.P50.Seconds(),
		WaitP90Seconds:  st.Wait.P90.Seconds(),
		WaitP99Seconds:  st.Wait.P99.Seconds(),
		Rejections:      map[string]int32{},
		ReleaseRate:     st.ReleaseRate,
		SeatReleaseRate: st.SeatReleaseRate,
	}
	for _, k := range slices.Sorted(maps.Keys(st.Seats)) {
		out.DecodeWorkers = append(out.DecodeWorkers, &adminv1.DecodeSeats{Worker: k, Inflight: int32(st.Seats[k]),
			Limit: int32(st.SeatLimits[k]), Window: int32(st.DecodeCapacity[k].Window)})
	}
	set := out.Settings
	if st.Settings.Aging > 0 {
		set.PriorityAging = durationpb.New(st.Settings.Aging)
	}
	if a := st.Settings.Adaptive; a.On() {
		set.AdaptiveLimit = &adminv1.AdaptiveLimit{Min: int32(a.Min), Max: int32(a.Max)}
	}
	for _, b := range st.Settings.Bands {
		set.PriorityBands = append(set.PriorityBands, &adminv1.PriorityBand{Name: b.Name, MinPriority: int32(b.MinPriority)})
		if len(st.Settings.Bands) > 1 {
			out.Bands = append(out.Bands, &adminv1.BandState{Name: b.Name, MinPriority: int32(b.MinPriority), Queued: int32(st.QueuedByBand[b.Name])})
		}
	}
	for _, m := range slices.Sorted(maps.Keys(st.Queued)) {
		out.Queues = append(out.Queues, &adminv1.QueueState{Model: m, Queued: int32(st.Queued[m])})
	}
	var cs *cluster.Status
	if s.d.Cluster != nil {
		cs = s.d.Cluster()
	}
	urls := maps.Clone(st.Inflight)
	if cs != nil {
		for u := range cs.Workers {
			urls[u] += 0
		}
	}
	for _, u := range slices.Sorted(maps.Keys(urls)) {
		wa := &adminv1.WorkerAdmission{Url: u, Inflight: int32(st.Inflight[u]),
			InflightTokens: clamp32(st.InflightTokens[u]), Limit: int32(st.Limits[u]), ClusterShare: -1}
		if cs != nil {
			wa.ClusterShare = int32(cs.Other)
			if ws, ok := cs.Workers[u]; ok {
				wa.ClusterShare, wa.ClusterDemand = int32(ws.Share), int32(ws.Demand)
			}
		}
		out.Workers = append(out.Workers, wa)
	}
	for k, v := range st.Rejections {
		out.Rejections[k] = clamp32(int64(min(v, math.MaxInt32)))
	}
	if cs != nil {
		out.Cluster = clusterToProto(cs)
	}
	return out
}

// clusterToProto renders cluster admission's status.
func clusterToProto(cs *cluster.Status) *adminv1.ClusterAdmission {
	out := &adminv1.ClusterAdmission{
		Mode: cs.Mode, Replica: cs.Replica, Coordinator: cs.Coordinator, IsCoordinator: cs.IsCoordinator, Term: cs.Term,
		Fallback: cs.Fallback, FleetLimit: int32(cs.FleetLimit), Members: cs.Members, RaisesBlocked: cs.RaisesBlocked,
		Rebalances: clamp32(cs.Rebalances),
	}
	if cs.LeaseAge >= 0 {
		out.LeaseAge = durationpb.New(cs.LeaseAge)
	}
	for _, m := range cs.Replicas {
		cm := &adminv1.ClusterMember{Replica: m.Replica, State: m.State}
		if m.SinceContact >= 0 {
			cm.SinceContact = durationpb.New(m.SinceContact)
		}
		for _, w := range slices.Sorted(maps.Keys(m.Workers)) {
			mw := m.Workers[w]
			cm.Workers = append(cm.Workers, &adminv1.ClusterWorkerShare{Worker: w, Granted: int32(mw.Granted),
				Reserved: int32(mw.Reserved), Demand: int32(mw.Demand), Inflight: int32(mw.Inflight)})
		}
		out.Replicas = append(out.Replicas, cm)
	}
	return out
}

// GetAdmission returns settings and live state.
func (s *Service) GetAdmission(context.Context, *adminv1.GetAdmissionRequest) (*adminv1.GetAdmissionResponse, error) {
	return &adminv1.GetAdmissionResponse{Status: s.status()}, nil
}

// UpdateAdmission applies new settings at once; unset fields keep their value. A new request limit
// without an adaptive range sets a fixed limit: it turns adaptation off.
func (s *Service) UpdateAdmission(_ context.Context, req *adminv1.UpdateAdmissionRequest) (*adminv1.UpdateAdmissionResponse, error) {
	set := s.d.Admission.Settings()
	if req.MaxInflightPerWorker != nil {
		if req.GetMaxInflightPerWorker() < 0 {
			return nil, invalid("max_inflight_per_worker", "max_inflight_per_worker must be >= 0 (0 turns admission off), got %d", req.GetMaxInflightPerWorker())
		}
		set.MaxInflightPerWorker = int(req.GetMaxInflightPerWorker())
		if req.AdaptiveLimit == nil {
			set.Adaptive = admission.AdaptiveLimit{}
		}
	}
	if req.QueueSize != nil {
		if req.GetQueueSize() < 0 {
			return nil, invalid("queue_size", "queue_size must be >= 0, got %d", req.GetQueueSize())
		}
		set.QueueSize = int(req.GetQueueSize())
	}
	if req.QueueTimeout != nil {
		if err := req.GetQueueTimeout().CheckValid(); err != nil {
			return nil, invalid("queue_timeout", "%v", err)
		}
		d := req.GetQueueTimeout().AsDuration()
		if d <= 0 {
			return nil, invalid("queue_timeout", "queue_timeout must be positive, got %s", d)
		}
		set.QueueTimeout = d
	}
	if req.MaxInflightTokensPerWorker != nil {
		if req.GetMaxInflightTokensPerWorker() < 0 {
			return nil, invalid("max_inflight_tokens_per_worker", "max_inflight_tokens_per_worker must be >= 0 (0 turns the token budget off), got %d", req.GetMaxInflightTokensPerWorker())
		}
		set.MaxInflightTokensPerWorker = int64(req.GetMaxInflightTokensPerWorker())
	}
	if req.PriorityAging != nil {
		if err := req.GetPriorityAging().CheckValid(); err != nil {
			return nil, invalid("priority_aging", "%v", err)
		}
		d := req.GetPriorityAging().AsDuration()
		if d <= 0 {
			return nil, invalid("priority_aging", "priority_aging must be positive, got %s", d)
		}
		set.Aging = d
	}
	if req.PriorityBands != nil {
		set.Bands = nil
		for _, b := range req.GetPriorityBands().GetBands() {
			set.Bands = append(set.Bands, admission.Band{Name: b.GetName(), MinPriority: int(b.GetMinPriority())})
		}
		if len(set.Bands) > 1 && set.Aging <= 0 {
			set.Aging = admission.DefaultAging
		}
		if err := (admission.Settings{Bands: set.Bands, Aging: set.Aging}).Validate(); err != nil {
			return nil, invalid("priority_bands", "%v", err)
		}
	}
	if req.EarlyRejection != nil {
		set.EarlyRejection = req.GetEarlyRejection()
	}
	if req.DecodeMaxInflightPerWorker != nil {
		set.DecodeMaxInflightPerWorker = int(req.GetDecodeMaxInflightPerWorker())
	}
	if req.DecodeAuto != nil {
		set.DecodeAuto = req.GetDecodeAuto()
	}
	if req.AdaptiveLimit != nil {
		set.Adaptive = admission.AdaptiveLimit{Min: int(req.GetAdaptiveLimit().GetMin()), Max: int(req.GetAdaptiveLimit().GetMax())}
		if err := (admission.Settings{Adaptive: set.Adaptive}).Validate(); err != nil {
			return nil, invalid("adaptive_limit", "%v (min 0 and max 0 turn adaptation off)", err)
		}
	}
	if err := s.d.Admission.Update(set); err != nil {
		return nil, invalid("max_inflight_per_worker", "%v", err)
	}
	if s.d.OnAdmissionUpdate != nil {
		s.d.OnAdmissionUpdate(set)
	}
	s.d.Logger.Info("admission settings updated", "limit", set.MaxInflightPerWorker, "queue_size", set.QueueSize, "queue_timeout", set.QueueTimeout,
		"token_limit", set.MaxInflightTokensPerWorker, "bands", len(set.Bands), "aging", set.Aging, "early_rejection", set.EarlyRejection,
		"adaptive_min", set.Adaptive.Min, "adaptive_max", set.Adaptive.Max,
		"decode_limit", set.DecodeMaxInflightPerWorker, "decode_auto", set.DecodeAuto)
	return &adminv1.UpdateAdmissionResponse{Status: s.status()}, nil
}

// fanout calls fn for every registered worker in parallel, each call bounded by FanoutTimeout and made
// with the worker's own API key; results come back in registry order.
func fanout[T any](ctx context.Context, s *Service, fn func(context.Context, *worker.Worker, *backend.Upstream) T) []T {
	ws := s.d.Registry.Snapshot().All()
	out := make([]T, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, s.d.FanoutTimeout)
			defer cancel()
			out[i] = fn(cctx, w, &backend.Upstream{Client: s.d.HTTP, APIKey: w.APIKey()})
		})
	}
	wg.Wait()
	return out
}

// GetLoads asks every worker for its load.
func (s *Service) GetLoads(ctx context.Context, _ *adminv1.GetLoadsRequest) (*adminv1.GetLoadsResponse, error) {
	loads := fanout(ctx, s, func(ctx context.Context, w *worker.Worker, u *backend.Upstream) *adminv1.WorkerLoad {
		l := &adminv1.WorkerLoad{Id: w.ID(), Url: w.URL()}
		load, err := u.FetchLoad(ctx, w.URL(), string(w.Protocol()))
		if err != nil {
			l.Error = err.Error()
		} else {
			l.RunningRequests, l.WaitingRequests, l.KvUsage = int32(load.Running), int32(load.Waiting), load.KVUsage
			for _, r := range load.Ranks {
				l.Ranks = append(l.Ranks, &adminv1.EngineRankLoad{Rank: uint32(r.Rank),
					RunningRequests: int32(r.Running), WaitingRequests: int32(r.Waiting), KvUsage: r.KVUsage})
			}
		}
		return l
	})
	return &adminv1.GetLoadsResponse{Loads: loads}, nil
}

// FlushCache asks every worker to flush its prefix cache; failures are reported per worker, not hidden.
func (s *Service) FlushCache(ctx context.Context, _ *adminv1.FlushCacheRequest) (*adminv1.FlushCacheResponse, error) {
	results := fanout(ctx, s, func(ctx context.Context, w *worker.Worker, u *backend.Upstream) *adminv1.FlushResult {
		r := &adminv1.FlushResult{Id: w.ID(), Url: w.URL(), Ok: true}
		if err := u.FlushCache(ctx, w.URL(), string(w.Protocol())); err != nil {
			r.Ok, r.Error = false, err.Error()
		}
		return r
	})
	return &adminv1.FlushCacheResponse{Results: results}, nil
}
