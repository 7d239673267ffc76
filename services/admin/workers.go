package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/kvevents/kvspec"
	"github.com/sluicegw/sluice/internal/worker"
)

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
		if _, err := kvspec.Parse(spec.URL, spec.KVEvents); err != nil {
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
